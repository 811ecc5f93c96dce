"""The soak: its growth arithmetic on made-up samples, the /proc readings, and a
20-second soak against the test stack whose report must name every process with
sane numbers (whether they grow is for the real 10-minute run to say)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aside_bench import procs, soak_growth


def reading(rss_kib: int, fds: int, processes: int = 1) -> dict[str, int]:
    return {"processes": processes, "rss_kib": rss_kib, "anon_kib": rss_kib // 2, "fds": fds,
            "sockets": fds // 2}  # fmt: skip


def series(rss: list[int], fds: list[int]) -> list[dict[str, Any]]:
    return [
        {"t": 1000.0 + i, "procs": {"svc": reading(r, f), "flat": reading(100, 5)}}
        for i, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


def test_growth_is_the_median_after_warmup_against_the_median_at_the_end() -> None:
    # 20 samples a second apart; warm-up 5 s; windows of max(3 samples, 5% of 20 s) = 3 s.
    rss = [50] * 5 + [100, 100, 100, 101] + [105] * 7 + [120, 121, 119, 500]
    fds = [10] * 16 + [11, 11, 12, 12]
    found = soak_growth.growth_table_rows(series(rss, fds), ["svc", "flat"], 5, 20)
    rows = {r["service"]: r for r in found}
    svc = rows["svc"]
    assert svc["rss_warm_kib"] == 100  # median of t = 5..8 s: the warm-up of 50 KiB is left out
    assert svc["rss_end_kib"] == 120.5  # median of t = 16..19 s: one spike does not decide
    assert svc["rss_growth"] == pytest.approx(0.205)
    assert svc["rss_max_kib"] == 500
    assert (svc["fds_warm"], svc["fds_end"], svc["fds_growth"]) == (10, 11.5, 1.5)
    assert svc["anon_growth"] == pytest.approx(0.2)  # halves: 50 -> 60 (integer halves)
    assert svc["flags"] == ["memory +20%", "private memory +20%", "fds +1.5"]
    assert svc["anon_per_process_growth"] == pytest.approx(0.2)
    assert (svc["sockets_warm"], svc["sockets_end"]) == (5, 5.5)
    table = soak_growth.growth_table(list(rows.values()))
    assert table.rows[0][0] == "svc" and "+1.5 (+0.5 sockets)" in table.rows[0]
    flat = rows["flat"]
    assert flat["rss_growth"] == 0 and flat["fds_growth"] == 0 and flat["flags"] == []


def test_a_process_that_vanishes_is_flagged() -> None:
    samples = series([100] * 10, [5] * 10)
    samples[6]["procs"]["svc"] = None
    rows = soak_growth.growth_table_rows(samples, ["svc"], 2, 10)
    assert rows[0]["flags"] == ["gone in 1 samples"]


def test_proc_readings_of_this_process_tree() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        me = os.getpid()
        assert child.pid in procs.children(me)
        assert {me, child.pid} <= set(procs.tree(me))
        tree = procs.sample_tree(me)
        assert tree is not None and tree.processes >= 2
        assert tree.rss_kib > (procs.rss_kib(me) or 0) and tree.fds > 3
    finally:
        child.kill()
        child.wait()
    assert procs.sample_tree(child.pid) is None


def test_listening_ports_names_the_socket_owner() -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port in procs.listening_ports(os.getpid())
    assert port not in procs.listening_ports(os.getpid())


def test_a_short_soak_reports_every_process(
    small_seed: Path,
    bench: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
) -> None:
    run_id = "s" + time.strftime("%H%M%S")
    done = bench(
        "soak", "--duration", "20s", "--rate", "20", "--interval", "1", "--warmup", "5s",
        "--run-id", run_id, "--data-dir", str(small_seed), "--reports-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out_dir = tmp_path / f"soak-{run_id}"
    run = json.loads((out_dir / "report.json").read_text())
    rows = {row["service"]: row for row in run["processes"]}
    assert list(rows) == list(procs.SERVICES)
    for service, row in rows.items():
        assert row["processes_warm"] >= 1, service
        assert 1024 < row["rss_warm_kib"] < 8 * 2**20, service  # 1 MiB .. 8 GiB
        assert 1024 < row["rss_end_kib"] < 8 * 2**20, service
        assert row["rss_max_kib"] >= row["rss_end_kib"] * 0.5, service
        assert -0.5 < row["rss_growth"] < 1.0, service
        assert 0 < row["anon_warm_kib"] <= row["rss_warm_kib"], service
        assert 0 <= row["sockets_warm"] <= row["fds_warm"], service
        assert 3 <= row["fds_warm"] < 10_000 and 3 <= row["fds_end"] < 10_000, service
        assert "gone" not in " ".join(row["flags"]), service
    assert rows["gateway"]["processes_warm"] >= 2  # the master and its workers
    assert rows["postgres"]["processes_warm"] >= 5  # the postmaster and its backends
    # About one sample a second for 20 s, each with every service.
    assert 15 <= len(run["samples"]) <= 30
    assert all(set(s["procs"]) == set(procs.SERVICES) for s in run["samples"])
    # The load ran and was answered.
    k6 = run["k6"]
    # (k6's summary leaves out a counter that never counted.)
    total = sum(k6.get(f"{kind}_{cls}", 0) for kind in ("count", "user", "create")
                for cls in ("2xx", "4xx", "5xx", "error"))  # fmt: skip
    assert total >= 20 * 20 * 0.9
    assert k6["create_2xx"] > 0 and k6.get("count_5xx", 0) == 0 and k6.get("user_error", 0) == 0
    assert run["removed_users"] == k6["create_2xx"]
    report = (out_dir / "report.md").read_text()
    assert "| process | procs | RSS warm-up MiB |" in report
    for service in procs.SERVICES:
        assert f"| {service} |" in report
    png = (out_dir / "soak.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
