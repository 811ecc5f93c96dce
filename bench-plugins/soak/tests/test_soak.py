"""The soak: its growth arithmetic on made-up samples, the /proc readings, and a
20-second soak against the test stack whose report must name every process with
sane numbers (whether they grow is for the real 10-minute run to say)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aside_bench.load.summary import Summary
from aside_bench.stack import procs
from aside_bench_soak import growth as soak_growth
from aside_bench_soak import run as soak
from aside_bench_suite.samples import load_tallies


def reading(rss_kib: int, fds: int, processes: int = 1) -> dict[str, int]:
    return {"processes": processes, "rss_kib": rss_kib, "anon_kib": rss_kib // 2, "fds": fds,
            "sockets": fds // 2}  # fmt: skip


def series(rss: list[int], fds: list[int]) -> list[soak_growth.SoakSample]:
    return [
        soak_growth.SoakSample(1000.0 + i, {"svc": reading(r, f), "flat": reading(100, 5)})
        for i, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


def test_growth_is_the_median_after_warmup_against_the_median_at_the_end() -> None:
    # 20 samples a second apart; warm-up 5 s; windows of max(3 samples, 5% of 20 s) = 3 s.
    rss = [50] * 5 + [100, 100, 100, 101] + [105] * 7 + [120, 121, 119, 500]
    fds = [10] * 16 + [11, 11, 12, 12]
    found = soak_growth.growth_table_rows(series(rss, fds), ["svc", "flat"], 5, 20)
    rows = {r.service: r for r in found}
    svc = rows["svc"]
    assert svc.rss_warm_kib == 100  # median of t = 5..8 s: the warm-up of 50 KiB is left out
    assert svc.rss_end_kib == 120.5  # median of t = 16..19 s: one spike does not decide
    assert svc.rss_growth == pytest.approx(0.205)
    assert svc.rss_max_kib == 500
    assert (svc.fds_warm, svc.fds_end, svc.fds_growth) == (10, 11.5, 1.5)
    assert svc.anon_growth == pytest.approx(0.2)  # halves: 50 -> 60 (integer halves)
    assert svc.flags == ["memory +20%", "private memory +20%", "fds +1.5"]
    assert svc.anon_per_process_growth == pytest.approx(0.2)
    assert (svc.sockets_warm, svc.sockets_end) == (5, 5.5)
    table = soak_growth.growth_table(list(rows.values()))
    assert table.rows[0][0] == "svc" and "+1.5 (+0.5 sockets)" in table.rows[0]
    flat = rows["flat"]
    assert flat.rss_growth == 0 and flat.fds_growth == 0 and flat.flags == []


def test_a_process_that_vanishes_is_flagged() -> None:
    samples = series([100] * 10, [5] * 10)
    samples[6].procs["svc"] = None
    rows = soak_growth.growth_table_rows(samples, ["svc"], 2, 10)
    assert rows[0].flags == ["gone in 1 samples"]


def key_samples(
    counts: list[int | None], overdue: dict[int, int] | None = None
) -> list[soak_growth.SoakSample]:
    """A sample a second; `overdue`: the overdue keys counted at some of them, 0 elsewhere."""
    return [
        soak_growth.SoakSample(1000.0 + i, {}, n, None if overdue is None else overdue.get(i, 0))
        for i, n in enumerate(counts)
    ]


def test_a_flat_key_table_after_its_lifetime_is_not_flagged() -> None:
    # 20 samples a second apart: filling for 8 s, then flat with noise; lifetime 5 s.
    counts = [0, 100, 200, 300, 400, 500, 600, 700] + [800, 790, 810, 805, 795] * 2 + [800, 808]
    row = soak_growth.key_table_row(key_samples(counts), 8, 20, 5, 100)
    assert row.judged and row.flags == []
    # Medians over a lifetime each: t = 8..13 s and 14..19 s.
    assert (row.warm, row.end) == (800, 802.5)
    assert (row.min, row.max, row.expected_rows) == (790, 810, 500)
    assert row.growth == pytest.approx(2.5 / 800)


def test_the_purges_sawtooth_is_not_growth() -> None:
    # Lifetime 10 s (TTL 5 + interval 5): the table climbs 1000 -> 1400 between
    # purges and drops back; the run ends on a peak, which a short window would
    # take for +30 % of growth.
    counts = [100 * i for i in range(10)] + [1000 + 100 * (i % 5) for i in range(51)] + [1400] * 2
    samples = key_samples(counts)
    row = soak_growth.key_table_row(samples, 10, 62, 10, 100)
    assert row.judged and row.flags == [] and abs(row.growth) < 0.1
    assert (row.min, row.max) == (1000, 1400)


def test_a_key_table_that_keeps_growing_after_its_lifetime_is_flagged() -> None:
    # A purge that does not keep up: the table grows all along.
    counts = [100 * i for i in range(20)]
    row = soak_growth.key_table_row(key_samples(counts), 8, 20, 5, 100)
    assert row.judged and row.flags == ["idempotency_keys +57%"]  # 1050 -> 1650
    table = soak_growth.key_table(row)
    assert table.rows[0][0] == "1050" and table.rows[0][-1] == "idempotency_keys +57%"


def test_an_overdue_key_after_the_warm_up_is_flagged() -> None:
    samples = key_samples([800] * 20, {3: 50})  # during the warm-up: not judged
    assert soak_growth.key_table_row(samples, 8, 20, 5, 100).flags == []
    samples = key_samples([800] * 20, {3: 50, 15: 7})
    row = soak_growth.key_table_row(samples, 8, 20, 5, 100)
    assert row.overdue_max == 7 and row.flags == ["7 keys overdue"]
    # Also while the growth itself cannot be judged yet.
    row = soak_growth.key_table_row(samples, 8, 20, 86_460, 100)
    assert row.flags == ["7 keys overdue"]
    assert soak_growth.key_table(row).rows[0][-1].endswith("; 7 keys overdue")


def test_growth_within_the_key_lifetime_is_reported_not_judged() -> None:
    # 24 h keys over a 20 s run: the table fills by design.
    counts = [100 * i for i in range(20)]
    row = soak_growth.key_table_row(key_samples(counts), 8, 20, 86_460, 100)
    assert not row.judged and row.flags == [] and row.growth > 0.5
    assert "not judged" in soak_growth.key_table(row).rows[0][-1]
    # An unknown lifetime is judged: the rule errs on the side of a flag.
    assert soak_growth.key_table_row(key_samples(counts), 8, 20, None, 100).flags


def test_failed_counts_are_flagged_and_left_out() -> None:
    counts: list[int | None] = [500] * 20
    counts[12] = None
    row = soak_growth.key_table_row(key_samples(counts), 8, 20, 5, 100)
    assert row.warm == row.end == 500 and row.flags == ["count failed in 1 samples"]
    over_time = soak_growth.key_counts_over_time(key_samples(counts), points=4)
    assert over_time[0] == (0, 500) and over_time[-1] == (19, 500) and (12, None) not in over_time
    assert len(over_time) in (4, 5)


def driver_summary(scenario: dict[str, Any]) -> Summary:
    """A summary as the driver writes it (bench/driver/README.md), one scenario."""
    return Summary({"schema_version": 1, "driver": "aside-load", "scenarios": {"chaos": scenario}})


def latency(p50: float, p95: float, p99: float, top: float) -> dict[str, float]:
    return {"count": 10, "p50": p50, "p95": p95, "p99": p99, "max": top, "mean": p50}


def test_the_loads_tallies_come_from_the_drivers_summary() -> None:
    summary = driver_summary(
        {
            "dropped": 3,
            "by_name": {
                "count": {"requests": 90, "latency": latency(1.0, 2.5, 4.0, 9.0)},
                "create": {"requests": 5, "latency": None},  # none answered
            },
            "counters": {"count_2xx": 88, "count_5xx": 2, "create_error": 5},
        }
    )
    tallies = load_tallies(summary)
    assert tallies == {
        "count_2xx": 88,
        "count_5xx": 2,
        "create_error": 5,
        "count_ms": {"p50": 1.0, "p95": 2.5, "p99": 4.0, "max": 9.0},
        "create_ms": {"p50": None, "p95": None, "p99": None, "max": None},
        "dropped": 3,
    }
    rows = {row[0]: row for row in soak_growth.load_table(tallies).rows}
    assert rows["count"] == ["count", "90", "88", "0", "2", "0", "2.5", "9"]
    assert rows["create"] == ["create", "5", "0", "0", "0", "5", "n/a", "n/a"]
    assert rows["user"][1] == "0"
    assert load_tallies(Summary({})) == {}  # the driver wrote no summary


def settings_of_a_process_with(env: dict[str, str]) -> tuple[int, int] | None:
    child = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"], **env})
    try:
        # Until its exec, the child shows this process's environment.
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child.pid}/cmdline").read_bytes() != b"sleep\x0030\x00":
            assert time.monotonic() < deadline, "the child never ran sleep"
            time.sleep(0.01)
        return soak.key_settings_s(child.pid)
    finally:
        child.kill()
        child.wait()


def test_the_key_lifetime_is_read_from_the_cores_environment() -> None:
    assert settings_of_a_process_with({}) == (24 * 3600, 60)  # the core's defaults
    assert settings_of_a_process_with({"CORE_IDEMPOTENCY_TTL": "30s"}) == (30, 60)
    both = {"CORE_IDEMPOTENCY_TTL": "2h30m", "CORE_IDEMPOTENCY_PURGE_INTERVAL": "10s"}
    assert settings_of_a_process_with(both) == (9000, 10)
    assert settings_of_a_process_with({"CORE_IDEMPOTENCY_TTL": "1.5s"}) is None  # unread


def status_kib(pid: int, field: str) -> int:
    """`field` of /proc/<pid>/status, read by hand to check procs against."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def settled(read: Callable[[], int | None], truth: Callable[[], int]) -> bool:
    """True once `read` gives what /proc gave just before and just after it (a
    process still starting moves its figures between two readings)."""
    for _ in range(50):
        before, got, after = truth(), read(), truth()
        if before == got == after:
            return True
        time.sleep(0.02)
    return False


def test_proc_readings_of_this_process_tree() -> None:
    child = subprocess.Popen(["sleep", "30"], env={"ASIDE_PROBE": "here"})
    try:
        me = os.getpid()
        assert child.pid in procs.children(me) and procs.parents()[child.pid] == me
        assert {me, child.pid} <= set(procs.tree(me))
        assert procs.environ_value(child.pid, "ASIDE_PROBE") == "here"
        assert procs.environ_value(child.pid, "HOME") is None
        rss = procs.rss_kib(child.pid)
        assert rss is not None and rss > 0
        assert settled(lambda: procs.rss_kib(child.pid), lambda: status_kib(child.pid, "VmRSS"))
        assert procs.fd_count(child.pid) == len(os.listdir(f"/proc/{child.pid}/fd"))
        tree = procs.sample_tree(me)
        assert tree is not None and tree.processes >= 2
        assert tree.rss_kib > (procs.rss_kib(me) or 0) and tree.fds > 3
        assert 0 < tree.anon_kib <= tree.rss_kib
    finally:
        child.kill()
    # Exited, not yet reaped: a zombie is gone but for its final CPU time.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert child.pid not in procs.parents()
    assert procs.rss_kib(child.pid) is None and procs.sample_tree(child.pid) is None
    assert procs.environ_value(child.pid, "ASIDE_PROBE") is None
    assert procs.cpu_ticks(child.pid) is not None
    child.wait()
    assert procs.sample_tree(child.pid) is None
    assert procs.rss_kib(child.pid) is None
    assert procs.fd_count(child.pid) is None and procs.cpu_ticks(child.pid) is None
    assert procs.tree_cpu_ticks(child.pid) is None
    assert procs.environ_value(child.pid, "ASIDE_PROBE") is None
    assert procs.listening_ports(child.pid) == set()


def test_cpu_ticks_count_own_work_and_reaped_childrens() -> None:
    me = os.getpid()
    before = procs.cpu_ticks(me)
    assert isinstance(before, int)
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    own = procs.cpu_ticks(me)
    assert own is not None and own - before >= 0.1 * procs.clock_ticks_per_s()
    spin = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    after = procs.cpu_ticks(me)  # the reaped child's ticks are in ours now
    assert after is not None and after - own >= 0.1 * procs.clock_ticks_per_s()


def test_the_machine_ticks_are_proc_stats() -> None:
    def by_hand() -> procs.MachineTicks:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
        ticks = [int(value) for value in first[1:9]]  # user ... steal
        return procs.MachineTicks(sum(ticks) - ticks[3] - ticks[4], sum(ticks), ticks[7])

    before, ticks, after = by_hand(), procs.machine_ticks(), by_hand()
    assert ticks is not None
    for name in ("busy", "total", "steal"):
        assert getattr(before, name) <= getattr(ticks, name) <= getattr(after, name)


def test_a_recorded_pid_needs_its_command_line_and_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "pids").mkdir(parents=True)
    child = subprocess.Popen(["sleep", "30"], env={"ASIDE_RUN_DIR": str(run_dir)})
    try:
        (run_dir / "pids" / "svc.pid").write_text(f"{child.pid}\n")
        (run_dir / "pids" / "svc.pid.cmd").write_text("sleep 30\n")
        assert procs.recorded_pid(run_dir, "svc") == child.pid
        assert procs.recorded_pid(tmp_path, "svc") is None  # no pid file there
        (tmp_path / "pids").symlink_to(run_dir / "pids")
        assert procs.recorded_pid(tmp_path, "svc") is None  # another stack's process
        (run_dir / "pids" / "svc.pid.cmd").write_text("sleep 31\n")
        assert procs.recorded_pid(run_dir, "svc") is None  # a recycled pid
        (run_dir / "pids" / "svc.pid.cmd").write_text("sleep 30\n")
    finally:
        child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert procs.recorded_pid(run_dir, "svc") is None  # a zombie
    child.wait()
    assert procs.recorded_pid(run_dir, "svc") is None


def test_listening_ports_names_the_socket_owner() -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port in procs.listening_ports(os.getpid())
        with socket.create_connection(("127.0.0.1", port)) as client:
            # A connected socket is not a listener.
            assert client.getsockname()[1] not in procs.listening_ports(os.getpid())
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
    load = run["load"]
    assert run["load_exit"] == 0 and load["dropped"] == 0
    # (A counter that never counted may be left out of the summary.)
    total = sum(load.get(f"{kind}_{cls}", 0) for kind in ("count", "user", "create")
                for cls in ("2xx", "4xx", "5xx", "error"))  # fmt: skip
    assert total >= 20 * 20 * 0.9
    assert load["create_2xx"] > 0 and load.get("count_5xx", 0) == 0
    assert load.get("user_error", 0) == 0 and load["count_ms"]["p95"] > 0
    assert run["removed_users"] == load["create_2xx"]
    # Every sample counted the stored keys; 20 s is far inside a key's lifetime.
    counts = [s["idempotency_keys"] for s in run["samples"]]
    assert all(isinstance(n, int) for n in counts), counts
    assert all(s["idempotency_keys_overdue"] == 0 for s in run["samples"])
    assert counts[-1] >= counts[0] + load["create_2xx"] * 0.5
    keys = run["idempotency_keys"]
    assert keys["lifetime_s"] >= 2 and keys["create_rate"] == pytest.approx(20 * 0.2)
    assert keys["judged"] == (keys["lifetime_s"] <= 5) and keys["missed_samples"] == 0
    report = (out_dir / "report.md").read_text()
    assert "| process | procs | RSS warm-up MiB |" in report
    assert "| rows after warm-up | rows at the end |" in report
    for service in procs.SERVICES:
        assert f"| {service} |" in report
    png = (out_dir / "soak.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
