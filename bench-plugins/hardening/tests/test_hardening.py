"""The hardening experiments: their verdicts on made-up numbers, the slow-socket
watcher against a local server that closes on its own schedule, and a tiny
`aside-bench hardening` against the real stack (50 sockets, 200 emails,
50 reads/s) whose report must have every figure, with one verdict made to fail."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aside_bench.load.samples import SamplesError
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError
from aside_bench_hardening import attacks
from aside_bench_hardening import checks as hc
from aside_bench_hardening import hostile as hh
from aside_bench_hardening import load as hl
from aside_bench_hardening import probes as fp
from aside_bench_hardening import run as hardening
from aside_bench_hardening.attacks import SlowSocket

T0 = 1_800_000_000.0
LIMITS = hc.Limits(head_deadline_s=5.0)
Bench = Callable[..., subprocess.CompletedProcess[str]]


def slow(close_s: float | None, status: int | None = None, opened: bool = True) -> SlowSocket:
    return SlowSocket(
        opened_at=T0 if opened else None,
        error=None if opened else "ConnectionRefusedError",
        status=status,
        closed_at=None if close_s is None else T0 + close_s,
    )


# ---- unit: slow sockets ------------------------------------------------------------------
def test_sockets_closed_within_the_deadline_and_slack_pass() -> None:
    records = [slow(5.0), slow(5.2), slow(5.95), slow(0.01, 503), slow(0.02, 503)]
    figures = hc.socket_figures(records, LIMITS.head_deadline_s)
    assert (figures.opened, figures.closed, figures.still_open) == (5, 5, 0)
    assert (figures.refused_503, figures.held, figures.held_closed_early) == (2, 3, 0)
    assert figures.close_max_s == 5.95 and figures.held_close_min_s == 5.0
    check = hc.close_check(figures, LIMITS)
    assert check.ok, check.detail
    assert "2 answered 503 at connect" in check.detail and "limit 6 s" in check.detail


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ([slow(5.0), slow(6.05)], "max 6.05 s"),  # one closed past deadline + 1 s
        ([slow(5.0), slow(None)], "1 still open"),  # one never closed
        ([slow(None, opened=False)], "0 of 0 opened"),  # nothing was attacked
    ],
)
def test_a_late_or_missing_close_fails(records: list[SlowSocket], why: str) -> None:
    check = hc.close_check(hc.socket_figures(records, 5.0), LIMITS)
    assert not check.ok
    assert why in check.detail


def test_a_held_socket_closed_long_before_the_deadline_is_counted() -> None:
    figures = hc.socket_figures([slow(1.0), slow(5.0)], 5.0)
    assert figures.held_closed_early == 1


# ---- unit: memory ------------------------------------------------------------------------
def rss_samples(summed_mib: list[float], start_at: int = 0) -> list[hc.RssSample]:
    """One sample every 0.1 s from T0, two workers sharing each total equally."""
    return [
        (T0 + (start_at + i) * 0.1, {1: int(m * 512), 2: int(m * 512)})
        for i, m in enumerate(summed_mib)
    ]


def test_rss_growth_is_the_peak_during_the_attack_over_the_median_before() -> None:
    # 0..1.9 s before the attack (starts at T0 + 2), 2..3.9 s during, then after.
    samples = rss_samples([100] * 15 + [99, 300, 100, 100, 100] + [120, 150, 140] * 6 + [130] * 5)
    rss = hc.rss_figures(samples, T0 + 2, T0 + 3.95)
    # The one odd reading at 1.6 s does not move the median before.
    assert rss is not None and rss.before_kib == 100 * 1024
    assert rss.peak_kib == 150 * 1024 and rss.after_kib == 130 * 1024
    assert set(rss.per_worker) == {"1", "2"}
    assert hc.rss_check(rss, True, LIMITS).ok  # +50 MiB <= 64
    assert not hc.rss_check(rss, True, hc.Limits(5.0, rss_growth_mib=49)).ok
    replaced = hc.rss_check(rss, False, LIMITS)
    assert not replaced.ok and "replaced" in replaced.detail


def test_no_reading_around_the_attack_fails() -> None:
    assert hc.rss_figures([], T0, T0 + 1) is None
    assert not hc.rss_check(None, True, LIMITS).ok


# ---- unit: reads in a window ---------------------------------------------------------------
def window(p95: float | None = 4.0, dropped: int = 0, failed: int = 0, reads: int = 500,
           new_connections: int = 0) -> dict[str, Any]:  # fmt: skip
    return {"reads": reads, "p50_ms": 1.0, "p95_ms": p95, "p99_ms": 9.0, "max_ms": 20.0,
            "dropped": dropped, "failed": failed, "new_connections": new_connections}  # fmt: skip


@pytest.mark.parametrize(
    ("reads", "limit", "ok"),
    [
        (window(), 10.0, True),
        (window(p95=10.0), 10.0, True),
        (window(p95=10.4), 10.0, False),
        (window(dropped=1), 10.0, False),
        (window(failed=2), 10.0, False),
        (window(reads=0), 10.0, False),
        (None, 10.0, False),
        (window(p95=250.0), None, True),  # the flood's reads: no latency limit
        (window(p95=250.0, failed=1), None, False),
    ],
)
def test_reads_in_a_window(reads: dict[str, Any] | None, limit: float | None, ok: bool) -> None:
    assert hc.reads_check(reads, "during the attack", limit).ok is ok


def read_line(at: float, ms: float = 1.0, ok: bool = True, new_conn: bool = False) -> str:
    return json.dumps({"t": T0 + at, "due": T0 + at, "ms": ms, "scenario": "read",
                       "name": "count", "status": 200 if ok else 0, "ok": ok,
                       "new_conn": new_conn, "tags": {}})  # fmt: skip


def drop_line(at: float) -> str:
    return json.dumps({"t": T0 + at, "due": T0 + at, "scenario": "read", "dropped": True})


WINDOWS = {"before": (T0 + 1, T0 + 2), "during": (T0 + 2, T0 + 3), "after": (T0 + 3, T0 + 4)}


def test_the_windows_come_from_the_samples_file() -> None:
    lines = [read_line(0.5, 99.0, new_conn=True)]  # the warm-up second: in no window
    # before: 20 answered reads of 1..20 ms (sent out of order, as written when each ended)
    lines += [read_line(1 + i / 40, float(i + 1)) for i in reversed(range(20))]
    # during: 3 answered, one failed (a timeout), one dropped, one new connection
    lines += [read_line(2.1, 4.0), read_line(2.2, 8.0, new_conn=True), read_line(2.3, 6.0)]
    lines += [read_line(2.4, 10_000.0, ok=False), drop_line(2.5)]
    # after: an answered read exactly at its start; `during` ends before it
    lines += [read_line(3.0, 2.0), ""]
    found = hl.sample_windows(lines, "load-slow-heads.jsonl", WINDOWS)
    before, during, after = found["before"], found["during"], found["after"]
    assert list(found) == ["before", "during", "after"]
    assert (before["start"], before["end"], before["seconds"]) == (T0 + 1, T0 + 2, 1.0)
    # Exact nearest rank over the window's answered reads.
    assert (before["reads"], before["p50_ms"], before["p95_ms"]) == (20, 10.0, 19.0)
    assert (before["p99_ms"], before["max_ms"]) == (20.0, 20.0)
    assert (before["dropped"], before["failed"], before["new_connections"]) == (0, 0, 0)
    assert (during["reads"], during["p50_ms"], during["max_ms"]) == (3, 6.0, 8.0)
    assert (during["dropped"], during["failed"], during["new_connections"]) == (1, 1, 1)
    assert not hc.reads_check(during, "during the attack").ok
    assert not hc.reuse_check(during).ok
    assert after["reads"] == 1 and after["p95_ms"] == 2.0
    empty = hl.sample_windows([], "x.jsonl", WINDOWS)["during"]
    assert empty["reads"] == 0 and empty["p95_ms"] is None and empty["max_ms"] is None
    assert not hc.reads_check(empty, "during the flood").ok


def test_a_malformed_samples_line_names_the_file_and_line() -> None:
    lines = [read_line(1.5), '{"t": 1800000001.6, "ok": tru']
    with pytest.raises(SamplesError, match=r"load-cold-flood\.jsonl, line 2: not JSON"):
        hl.sample_windows(lines, "load-cold-flood.jsonl", WINDOWS)
    no_ok = json.dumps({"t": T0 + 1.5, "ms": 1.0})
    with pytest.raises(SamplesError, match=r"x\.jsonl, line 1: 'ok' is None"):
        hl.sample_windows([no_ok], "x.jsonl", WINDOWS)


def test_the_windows_cut_the_load_at_the_attack() -> None:
    events = {"load_start": T0, "attack_start": T0 + 5, "attack_end": T0 + 12, "load_end": T0 + 20}
    assert hl.windows_around(events, "attack") == {
        "before": (T0 + hl.WARMUP_S, T0 + 5),
        "during": (T0 + 5, T0 + 12),
        "after": (T0 + 12, T0 + 20),
    }


def test_the_reads_are_the_read_scenario_on_hot_emails(settings: Settings, tmp_path: Path) -> None:
    samples = tmp_path / "load-slow-heads.jsonl"
    run = hl.load_run("unit", "slow-heads", 500, 100, 30, tmp_path, samples)
    variables = run.variables(settings)
    assert variables["SCENARIO"] == "read" and variables["CACHE"] == "l2"
    assert variables["HOT_SHARE"] == "1" and variables["ARM"] == "cache"
    assert variables["COLD_SAMPLE"] == "1" and variables["POOL"] == "100"
    assert variables["SAMPLES_PATH"] == str(samples) and variables["PHASE"] == "slow-heads"
    assert variables["TIMEOUT_S"] == str(hl.READ_TIMEOUT_S)
    assert variables["INFLUX_URL"] == settings.influx_url  # per-second points, as every run


def test_a_load_outliving_the_cache_ttl_is_refused() -> None:
    hl.check_ttl(60, 49)
    with pytest.raises(StackError, match="outlive the cache TTL"):
        hl.check_ttl(60, 50)


def test_a_connection_opened_during_the_attack_fails_the_reuse_check() -> None:
    assert hc.reuse_check(window()).ok
    fresh = hc.reuse_check(window(new_connections=3))
    assert not fresh.ok and "3 new connections" in fresh.detail


# ---- unit: the query counter after the flood --------------------------------------------
def readings(values: list[float], step_s: float = 0.05) -> list[hc.Reading]:
    return [(T0 + i * step_s, v) for i, v in enumerate(values)]


def test_last_rise_and_stillness() -> None:
    seen = readings([10, 10, 12, 12, 13] + [13] * 40)
    assert hc.last_rise(seen) == pytest.approx(T0 + 0.2)
    assert hc.still_for(seen, 2.0) and not hc.still_for(seen[:30], 2.0)
    assert hc.last_rise(readings([5, 5, 5])) is None


def test_a_counter_that_stops_within_a_second_passes() -> None:
    settle = hc.settle_figures(readings([10, 11, 14] + [14] * 45), T0, 2.0)
    assert settle == {"settled": True, "last_rise_after_s": 0.1, "queries_after": 4,
                      "readings": 48}  # fmt: skip
    assert hc.settle_check(settle, LIMITS).ok


def test_a_counter_still_rising_after_a_second_fails() -> None:
    late = hc.settle_figures(readings([10] * 25 + [11] + [11] * 45), T0, 2.0)
    assert late["last_rise_after_s"] == 1.25
    assert not hc.settle_check(late, LIMITS).ok
    rising = hc.settle_figures(readings(list(range(50))), T0, 2.0)
    check = hc.settle_check(rising, LIMITS)
    assert not check.ok and "still rising" in check.detail


def test_a_counter_that_never_rose_passes_at_zero() -> None:
    settle = hc.settle_figures(readings([7] * 45), T0, 2.0)
    assert settle["last_rise_after_s"] == 0.0 and hc.settle_check(settle, LIMITS).ok


def test_polling_stops_once_the_counter_is_still() -> None:
    values = iter([1, 2, 3])

    def counter() -> float:
        return next(values, 3)

    found = fp.poll_until_still(counter, quiet_s=0.2, deadline_s=5, interval_s=0.01)
    assert [v for _, v in found[:3]] == [1, 2, 3]
    assert found[-1][0] - found[2][0] >= 0.2
    assert found[-1][0] - found[0][0] < 2


def test_polling_gives_up_at_its_deadline() -> None:
    values = iter(range(1000))
    found = fp.poll_until_still(lambda: next(values), 1.0, deadline_s=0.2, interval_s=0.01)
    assert not hc.still_for(found, 1.0)


def test_the_flood_reads_a_thread_ran_are_the_count_answers_but_the_hits() -> None:
    before = {"db_queries": {"count_batch": 4.0}, "shed": {}, "batched_emails": 10.0,
              "count_answers": {"200": 1000.0}, "count_hits": 990.0}  # fmt: skip
    after = {"db_queries": {"count_batch": 9.0, "count_by_email": 2.0},
             "shed": {"client_gone": 70.0, "admission_limit": 3.0}, "batched_emails": 40.0,
             "count_answers": {"200": 1520.0, "503": 28.0}, "count_hits": 1500.0}  # fmt: skip
    found = fp.counter_increase(before, after)
    assert found["db_queries"] == {"count_batch": 5.0, "count_by_email": 2.0}
    assert found["shed"] == {"admission_limit": 3.0, "client_gone": 70.0}
    assert found["batched_emails"] == 30.0
    # 520 answered counts, 510 of them hits: 10 flood reads answered 200, 25 gave up;
    # the door's 3 refusals are counted as 503 answers too, and no thread ran them.
    assert found["flood_ran"] == {"200": 10.0, "503": 25.0}


# ---- unit: parameters ----------------------------------------------------------------------
def test_experiments_and_the_flood_deadline() -> None:
    assert hardening.parse_experiments("all") == ("slow-heads", "cold-flood", "hostile")
    assert hardening.parse_experiments("cold-flood, slow-heads") == ("cold-flood", "slow-heads")
    with pytest.raises(ValueError, match="unknown experiment"):
        hardening.parse_experiments("slow-bodies")
    params = hardening.HardeningParams("r", Path("x"), ("cold-flood",))
    # 20,000 emails x 50 ms / 200 in flight = 5 s if every client waited its timeout, x 6.
    assert params.flood_deadline_s == 30.0 and params.pool == 100
    assert hardening.HardeningParams("r", Path("x"), (), rate=20).pool == 10
    assert hh.parse_parts("all") == hh.parse_parts(None) == hh.PARTS
    assert hh.parse_parts("readyz, pipeline,readyz") == ("readyz", "pipeline")
    with pytest.raises(ValueError, match="unknown hostile part 'slowloris'"):
        hh.parse_parts("pipeline,slowloris")
    emails = fp.flood_emails("run_1", 3)
    assert emails == [f"flood-run_1-{i}@hardening.invalid" for i in range(3)]


def test_a_slow_head_whose_connect_times_out_is_counted_and_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def timing_out(_host: str, _port: int) -> None:
        raise TimeoutError

    monkeypatch.setattr(hh, "_open", timing_out)
    figures = hh.new_record(0.3, ["slow"])
    asyncio.run(hh._slow_head("127.0.0.1", 1, time.monotonic() + 0.3, figures))
    assert figures["errors"].get("slow head connect: TimeoutError", 0) >= 2, figures
    assert figures["slow_heads_opened"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--experiments", "slow-bodies"], "unknown experiment"),
        (["--p95-ms", "0"], "must be above 0"),
        (["--pre", "soon"], "duration must look like"),
        (["--run-id", "../x"], "--run-id must be"),
    ],
)
def test_bad_arguments_fail_with_one_line(
    args: list[str], message: str, tmp_path: Path, bench: Bench
) -> None:
    done = bench("hardening", *args, "--reports-dir", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


# ---- the slow-socket watcher against a local server ---------------------------------------
@pytest.fixture
def closing_server() -> Iterator[tuple[str, int]]:
    """Answers the first connection 503 and closes it at once (a full worker);
    holds the others and closes them 0.3 s after they were accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        held: list[tuple[float, socket.socket]] = []
        accepted = 0
        while not stop.is_set() or held:
            try:
                conn, _ = server.accept()
                accepted += 1
                if accepted == 1:
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\r\n")
                    conn.close()
                else:
                    held.append((time.monotonic(), conn))
            except TimeoutError:
                pass
            while held and time.monotonic() - held[0][0] >= 0.3:
                held.pop(0)[1].close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(5)
    server.close()


def test_slow_heads_records_each_close_and_answer(closing_server: tuple[str, int]) -> None:
    records = attacks.slow_heads(closing_server, 5, wait_s=5)
    figures = hc.socket_figures(records, head_deadline_s=0.3)
    assert (figures.opened, figures.closed, figures.still_open) == (5, 5, 0)
    assert figures.refused_503 == 1 and figures.held == 4
    # Held sockets close 0.3 s after their accept; the watcher sees it within its poll.
    assert figures.held_close_min_s >= 0.25 and figures.held_close_max_s < 1.5


def test_sockets_the_server_never_closes_are_given_up_at_the_wait() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never closes
        started = time.monotonic()
        records = attacks.slow_heads(silent.getsockname(), 3, wait_s=0.3)
        assert time.monotonic() - started < 3
    figures = hc.socket_figures(records, head_deadline_s=0.1)
    assert figures.opened == 3 and figures.still_open == 3
    assert not hc.close_check(figures, hc.Limits(0.1)).ok


def test_the_file_limit_is_raised_only_when_needed() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert attacks.raise_nofile(min(soft, 64)) == soft


# ---- a tiny run against the stack ------------------------------------------------------------
@pytest.fixture(scope="module")
def hardening_run(small_seed: Path, bench: Bench, tmp_path_factory: pytest.TempPathFactory):
    """Both experiments at a toy size, with an impossible p95 limit for the reads
    during the slow heads, so that verdict must fail and the run exit 1."""
    reports = tmp_path_factory.mktemp("hardening")
    run_id = "h" + time.strftime("%H%M%S")
    done = bench(
        "hardening", "--experiments", "slow-heads,cold-flood", "--rate", "50", "--sockets", "50",
        "--emails", "200", "--pre", "2s", "--post", "2s", "--p95-ms", "0.001", "--run-id", run_id,
        "--data-dir", str(small_seed), "--reports-dir", str(reports),
    )  # fmt: skip
    out_dir = reports / f"hardening-{run_id}"
    return done, out_dir, json.loads((out_dir / "report.json").read_text())


def _checks(experiment: dict[str, Any]) -> dict[str, bool]:
    return {c["name"].split(":")[0]: c["ok"] for c in experiment["checks"]}


def test_the_forced_failure_is_flagged_and_the_exit_code_says_so(hardening_run) -> None:
    done, _, run = hardening_run
    assert done.returncode == 1, done.stderr[-3000:]
    assert run["kind"] == "hardening" and run["passed"] is False
    slow_heads, flood = run["experiments"]
    assert slow_heads["name"] == "slow-heads" and flood["name"] == "cold-flood"
    assert slow_heads["error"] is None and flood["error"] is None, (slow_heads, flood)
    checks = _checks(slow_heads)
    # Only the reads' latency limit (0.001 ms) fails; the gateway held its deadline.
    assert checks == {
        "every slow socket closed within the head deadline + 1 s": True,
        "gateway workers' RSS grows by at most 64 MiB": True,
        "reads during the attack": False,
        "reads used connections opened before the attack": True,
    }, slow_heads["checks"]
    assert slow_heads["passed"] is False and flood["passed"] is True, flood["checks"]
    lines = done.stdout.strip().splitlines()
    assert lines[-2].startswith("slow-heads: FAIL (reads during the attack")
    assert lines[-1].startswith("cold-flood: PASS")


def test_the_slow_heads_figures(hardening_run) -> None:
    _, _, run = hardening_run
    experiment = run["experiments"][0]
    sockets = experiment["figures"]["sockets"]
    assert (sockets["sockets"], sockets["opened"], sockets["closed"]) == (50, 50, 50)
    assert sockets["refused_503"] == 0 and sockets["held"] == 50
    deadline = run["limits"]["head_deadline_s"]
    assert deadline - 0.5 <= sockets["held_close_min_s"] <= sockets["close_max_s"]
    assert sockets["close_max_s"] <= run["limits"]["close_limit_s"]
    assert len(experiment["figures"]["close_s"]) == 50
    rss = experiment["figures"]["rss"]
    assert 1024 < rss["before_kib"] <= rss["peak_kib"] < 4 * 2**20
    assert set(rss["per_worker"]) == {str(p) for p in experiment["notes"]["workers"]}
    events = experiment["events"]
    assert events["load_start"] < events["attack_start"] < events["attack_end"] < events["load_end"]
    windows = experiment["windows"]
    assert list(windows) == ["before", "during", "after"]
    # 50 reads/s in each window (the first second of the load is left out of `before`).
    assert 0.9 <= windows["before"]["seconds"] <= 1.5
    for name in ("before", "during"):
        expected = 50 * windows[name]["seconds"]
        assert 0.6 * expected <= windows[name]["reads"] <= 1.4 * expected + 10, windows[name]
    assert windows["during"]["p95_ms"] > 0 and windows["during"]["new_connections"] == 0


def test_the_cold_flood_figures(hardening_run) -> None:
    _, _, run = hardening_run
    experiment = run["experiments"][1]
    f = experiment["figures"]
    assert f["flood"]["sent"] == 200 and sum(f["flood"]["outcomes"].values()) == 200
    assert experiment["notes"]["flood_emails_in_table"] == 0
    assert f["settle"]["settled"] and f["settle"]["last_rise_after_s"] <= 1.0
    assert f["queries_before_flood_end"] >= 0 and f["readings"][0][0] >= 0
    counters, windows = f["gateway_counters"], experiment["windows"]
    assert set(counters) == {"db_queries", "shed", "batched_emails", "count_answers",
                             "count_hits", "flood_ran"}  # fmt: skip
    # A flood read a thread took was shed or ran, once; the driver's reads are the hits.
    # The door's refusals, of a driver's read or a flood's, are left out of both.
    thread_shed = sum(n for r, n in counters["shed"].items() if r not in fp.DOOR_REASONS)
    assert thread_shed + sum(counters["flood_ran"].values()) <= 200
    assert counters["count_hits"] >= windows["during"]["reads"]
    assert windows["before"]["reads"] > 0 and windows["after"]["reads"] > 0
    assert windows["during"]["failed"] == 0 and windows["during"]["dropped"] == 0


def test_the_report_files(hardening_run) -> None:
    _, out_dir, run = hardening_run
    assert run["machine"]["nproc"] >= 1 and "load driver shares" in run["machine"]["note"]
    report = (out_dir / "report.md").read_text()
    for title in (
        "### Hardening: every experiment",
        "### slow-heads: the driver's cached reads",
        "### slow-heads: the slow sockets",
        "### slow-heads: gateway workers' memory (VmRSS)",
        "### cold-flood: the driver's cached reads",
        "### cold-flood: the flood and the database",
    ):
        assert title in report
    assert "| slow-heads |" in report and "| FAIL |" in report and "| pass |" in report
    assert "FAIL reads during the attack" in report
    # Each experiment's samples file is kept, gzipped, beside the report.
    for name in ("slow-heads", "cold-flood"):
        assert (out_dir / f"load-{name}.jsonl.gz").stat().st_size > 100


def test_the_hostile_client_run(small_seed: Path, bench: Bench, tmp_path: Path) -> None:
    """A short hostile client beside the reads: its own figures and every verdict reported."""
    run_id = "x" + time.strftime("%H%M%S")
    done = bench(
        "hardening", "--experiments", "hostile", "--hostile", "3s", "--rate", "50",
        "--pre", "2s", "--post", "2s", "--run-id", run_id,
        "--data-dir", str(small_seed), "--reports-dir", str(tmp_path),
    )  # fmt: skip
    run = json.loads((tmp_path / f"hardening-{run_id}" / "report.json").read_text())
    (experiment,) = run["experiments"]
    assert experiment["name"] == "hostile" and experiment["error"] is None, done.stderr[-3000:]
    hostile = experiment["figures"]["hostile"]
    assert hostile["pipelined_answered"] > 0 and hostile["readyz"].get("200", 0) > 0, hostile
    assert hostile["slow_heads_opened"] >= 64
    assert set(_checks(experiment)) == {
        "reads before the hostile client",
        "reads during the hostile client (quiet p95 x2)",
        "each gateway worker's RSS grows by at most 32 MiB",
        "the pipelined requests were answered",
    }, experiment["checks"]
    assert done.stdout.strip().splitlines()[-1].startswith("hostile: ")
