"""The fault suite: its verdicts on made-up samples, and its short form
(`aside-bench chaos --short`) against the test stack, every case checked from
the report it writes. The stack is left with every service up, even when a case
fails (the `stack_restored` fixture starts whatever is down)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aside_bench.load.run import DRIVER_VARIABLES, DriverProcess
from aside_bench.load.samples import SamplesError, compress
from aside_bench.stack.config import Settings
from aside_bench.stack.gateway_metrics import cache_error_counts, labelled_samples, request_counts
from aside_bench.stack.seeddata import SeedData
from aside_bench_chaos import checks as cc
from aside_bench_chaos import gray
from aside_bench_chaos import run as chaos
from aside_bench_suite import samples as cs
from aside_bench_suite.base import user_prefix

REPO_ROOT = Path(__file__).resolve().parents[3]
T0 = 1_800_000_000.0


def sample(kind: str, status: int, at: float, ms: float = 5, **tags: str) -> cs.Sample:
    return cs.Sample(kind, status, T0 + at, ms, {"kind": kind, "status": str(status), **tags})


# ---- unit: parsing and figures -----------------------------------------------------------
def line(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


def test_samples_lines_become_samples_and_drops() -> None:
    tags = {"kind": "create", "status": "201", "id": 7, "ok": True, "username": "u", "email": None}
    lines = [
        line(t=T0 + 0.5, due=T0 + 0.5, ms=3.0, scenario="chaos", name="count", status=200,
             ok=True, new_conn=True, tags={"kind": "count", "status": "200", "ok": False}),
        line(t=T0 + 0.25, due=T0 + 0.25, ms=12.0, scenario="chaos", name="create", status=201,
             ok=True, new_conn=True, tags=tags),
        line(t=T0 + 0.3, due=T0 + 0.3, scenario="chaos", dropped=True),
        "",
    ]  # fmt: skip
    samples, dropped = cs.parse_samples(lines, "load-core.jsonl")
    assert dropped == 1
    assert [s.kind for s in samples] == ["create", "count"]  # by the instant sent
    first = samples[0]
    assert (first.kind, first.status, first.start, first.ms) == ("create", 201, T0 + 0.25, 12.0)
    assert first.end == pytest.approx(T0 + 0.262)
    assert first.ok and first.tag("id") == "7" and first.tag("missing") == ""
    # A JSON boolean reads as the checks compare it; a null tag is no tag.
    assert first.tag("ok") == "1" and samples[1].tag("ok") == "0" and "email" not in first.tags


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ('{"t": 1800000000.1, "ms": 3', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (line(t=T0, ms=3.0, status=200, tags={"status": "200"}), "kind"),
        (line(t=T0, status=200, tags={"kind": "count"}), "'ms' is None"),
        (line(t="soon", ms=1.0, status=200, tags={"kind": "count"}), "'t' is 'soon'"),
    ],
)
def test_a_malformed_samples_line_names_the_file_and_line(bad: str, why: str) -> None:
    good = line(t=T0, ms=1.0, status=200, tags={"kind": "count"})
    with pytest.raises(SamplesError, match=r"load-redis\.jsonl, line 3: ") as raised:
        cs.parse_samples([good, good, bad], "load-redis.jsonl")
    assert why in str(raised.value)


def test_a_samples_file_is_read_then_gzipped(tmp_path: Path) -> None:
    path = tmp_path / "load-core.jsonl"
    path.write_text(line(t=T0, ms=1.0, status=200, tags={"kind": "user"}) + "\n")
    samples, dropped = cs.read_samples(path)
    assert [s.kind for s in samples] == ["user"] and dropped == 0
    assert compress(path) == tmp_path / "load-core.jsonl.gz"
    assert not path.exists() and (tmp_path / "load-core.jsonl.gz").stat().st_size > 0


def test_by_kind_counts_statuses_and_codes() -> None:
    samples = [
        sample("count", 200, 0.0, 3),
        sample("count", 503, 0.1, 900, code="database_unavailable"),
        sample("create", 0, 0.2, 3000, error="1211"),
        sample("user", 404, 0.3, 2, code="not_found"),
    ]
    table = cs.by_kind(samples)
    assert table["count"]["statuses"] == {"200": 1, "503": 1}
    assert table["count"]["codes"] == {"database_unavailable": 1}
    assert table["count"]["max_ms"] == 900
    assert table["create"]["statuses"] == {"no answer": 1}
    assert table["create"]["codes"] == {"1211": 1}
    assert table["user"]["codes"] == {}  # a 404 is an answer about the data, not a failure


def test_hit_ratio_back_finds_the_first_good_window() -> None:
    ready = T0 + 10
    samples = [sample("user", 200, 10 + i / 10, xcache="MISS") for i in range(10)]
    samples += [sample("user", 200, 11 + i / 10, xcache="HIT") for i in range(20)]
    # The first one-second window with 80% hits starts at 10.8 (2 misses, 8 hits).
    assert cc.hit_ratio_back(samples, ready, baseline=1.0) == pytest.approx(0.8, abs=0.11)
    assert cs.first_after(samples, ready, lambda s: s.tag("xcache") == "HIT") == pytest.approx(1.0)
    assert cc.hit_ratio_back(samples[:10], ready, baseline=1.0) is None


def test_hit_ratio_back_counts_rereads_only() -> None:
    # After a flush every key's first read misses, however well the cache works:
    # 40 keys read once each (all MISS), then each read again (all HIT).
    ready = T0 + 10
    firsts = [sample("count", 200, 10 + i / 40, key=f"e{i}", xcache="MISS") for i in range(40)]
    again = [sample("count", 200, 11 + i / 40, key=f"e{i}", xcache="HIT") for i in range(40)]
    reads = firsts + again
    assert [r.tag("key") for r in cc.rereads(reads, ready)] == [f"e{i}" for i in range(40)]
    # The plain share of the window [10.5, 11.5) is 50 %; among re-reads it is 100 %.
    assert cc.hit_ratio_back(reads, ready, baseline=1.0) == pytest.approx(0.0, abs=0.11)
    # A read before `ready` (Redis down: nothing was filled) makes no re-read.
    early = [sample("count", 200, 9.9, key="e0", xcache="BYPASS")]
    assert cc.rereads(early + firsts[:1], ready) == []
    # A re-read must start after the first read ended (its fill).
    overlapping = [sample("user", 200, 10.0, 50, key="7"), sample("user", 200, 10.02, key="7")]
    assert cc.rereads(overlapping, ready) == []


def checks_by_name(checks: list[cs.Check]) -> dict[str, bool]:
    return {check.name: check.ok for check in checks}


def test_redis_case_accepts_only_200_or_503_with_retry_after() -> None:
    events = {"fault": T0 + 1, "ready": T0 + 3}
    good = [sample("count", 200, 0.5, xcache="HIT"), sample("user", 200, 0.6, xcache="HIT")]
    good += [sample("count", 200, 2, xcache="BYPASS", cache_error="1")]
    good += [sample("count", 503, 2.1, code="unavailable", retry_after="1")]
    good += [sample("user", 200, 3.2 + i / 10, xcache="HIT") for i in range(20)]
    good += [sample("create", 201, 2.0, invalidation="failed")]
    checks, figures = cc.redis_checks(good, events)
    assert all(checks_by_name(checks).values()), checks
    assert figures["reads_during_outage"] == 2 and figures["reads_during_outage_bypass"] == 1
    # Reads after the restart began are not counted as the outage's: the new
    # Redis may answer them before the driver sees it ready.
    restarting = {"fault": T0 + 1, "restore": T0 + 2.3, "ready": T0 + 3}
    early_hit = [*good, sample("user", 200, 2.5, xcache="HIT")]
    assert cc.redis_checks(early_hit, restarting)[1]["reads_during_outage"] == 2
    assert figures["writes_invalidation_failed"] == 1
    bad = [*good, sample("count", 503, 2.2, code="database_unavailable")]  # no Retry-After
    assert not checks_by_name(cc.redis_checks(bad, events)[0])[
        "reads: only 200, or 503 with Retry-After"
    ]


def test_core_case_wants_fast_core_unavailable_while_down() -> None:
    events = {"fault": T0 + 1, "restore": T0 + 3, "ready": T0 + 3.2}
    samples = [sample("user", 200, 0.5), sample("create", 201, 0.5)]
    samples += [sample("create", 503, 1.5, 4, code="core_unavailable")]
    samples += [sample("create", 201, 3.5)]
    checks, figures = cc.core_checks(samples, events)
    assert all(checks_by_name(checks).values()), checks
    assert figures["first_2xx_write_after_ready_s"] == pytest.approx(0.3)
    slow = [*samples, sample("create", 503, 2.0, 1500, code="core_unavailable")]
    assert not all(checks_by_name(cc.core_checks(slow, events)[0]).values())
    failed_after = [*samples, sample("create", 503, 4.0, 3, code="core_unavailable")]
    assert not checks_by_name(cc.core_checks(failed_after, events)[0])[
        "writes succeed once the core is back"
    ]
    # A write in flight when the core died may have committed: its 504 says so.
    in_flight = [*samples, sample("create", 504, 0.99, 30, code="write_outcome_unknown")]
    assert all(checks_by_name(cc.core_checks(in_flight, events)[0]).values())
    # Started after the kill, it was never sent: 504 there is wrong.
    late = [*samples, sample("create", 504, 1.5, 30, code="write_outcome_unknown")]
    assert not all(checks_by_name(cc.core_checks(late, events)[0]).values())


def test_postgres_case_wants_cached_reads_and_recovery_within_the_limit() -> None:
    events = {"fault": T0 + 1, "ready": T0 + 4}
    samples = [sample("user", 200, 1 + i / 5, xcache="HIT") for i in range(20)]
    samples += [sample("count", 503, 1.5, 1000, code="database_unavailable", retry_after="1")]
    samples += [sample("create", 503, 1.6, 5, code="database_unavailable", retry_after="1")]
    samples += [sample("create", 201, 4.5), sample("count", 200, 4.6, xcache="MISS")]
    checks, figures = cc.postgres_checks(samples, events)
    assert all(checks_by_name(checks).values()), checks
    assert figures["first_miss_after_ready_s"] == pytest.approx(0.6)
    late = [*samples, sample("count", 503, 9.5, 10, code="database_unavailable")]
    assert not all(checks_by_name(cc.postgres_checks(late, events)[0]).values())
    cached_failed = [
        *samples,
        sample("user", 503, 2, 10, code="database_unavailable", retry_after="1"),
    ]
    assert not checks_by_name(cc.postgres_checks(cached_failed, events)[0])[
        "cached reads keep answering 200"
    ]
    # ...unless the gateway's Redis breaker had opened (it then reads PostgreSQL).
    checks, figures = cc.postgres_checks(cached_failed, events, redis_errors=2)
    assert checks_by_name(checks)["cached reads keep answering 200"]
    assert figures["cached_reads_failed_after_redis_errors"] == 1
    slow = [*samples, sample("user", 503, 2, 2000, code="database_unavailable", retry_after="1")]
    assert not checks_by_name(cc.postgres_checks(slow, events, redis_errors=2)[0])[
        "cached reads keep answering 200"
    ]


def test_worker_case_explains_every_unanswered_request_and_counter() -> None:
    events = {"fault": T0 + 2, "replaced": T0 + 2.5}
    samples = [sample("count", 200, 1), sample("count", 200, 3), sample("create", 201, 3)]
    # In flight at the kill: no answer; the killed worker had counted one of them.
    samples += [sample("count", 0, 1.99, 30, error="1000"), sample("user", 0, 1.995, 30)]
    counters = {
        ("/api/v1/users/count", "GET", "200"): 3.0,  # two answered + one never delivered
        ("/api/v1/users", "POST", "201"): 1.0,
    }
    checks, figures = cc.worker_checks(samples, events, counters)
    assert all(checks_by_name(checks).values()), checks
    assert figures["counted_not_delivered"] == 1 and figures["unanswered"] == 2
    # More counted than answered plus unanswered on that route: not exact.
    over = {**counters, ("/api/v1/users/count", "GET", "200"): 5.0}
    assert not checks_by_name(cc.worker_checks(samples, events, over)[0])["gateway counters exact"]
    # Fewer counted than the driver saw answered: a lost count.
    under = {**counters, ("/api/v1/users", "POST", "201"): 0.0}
    assert not checks_by_name(cc.worker_checks(samples, events, under)[0])["gateway counters exact"]
    # An unanswered request that started after the kill is not explained by it.
    later = [*samples, sample("count", 0, 4, 5, error="1000")]
    assert not checks_by_name(cc.worker_checks(later, events, counters)[0])[
        "only requests in flight on the killed worker go unanswered"
    ]


def test_loaded_route_increase_keeps_the_loaded_routes() -> None:
    before = {("/api/v1/users/count", "GET", "200"): 10.0, ("/metrics", "GET", "200"): 3.0}
    after = {
        ("/api/v1/users/count", "GET", "200"): 15.0,
        ("/metrics", "GET", "200"): 9.0,
        ("/api/v1/users", "POST", "201"): 2.0,
    }
    assert cc.loaded_route_increase(before, after) == {
        ("/api/v1/users/count", "GET", "200"): 5.0,
        ("/api/v1/users", "POST", "201"): 2.0,
    }


def labels(text: str) -> list[tuple[str, str]]:
    """The label pairs of one sample whose labels read `text` in /metrics."""
    [(found, _value)] = labelled_samples(f"m{{{text}}} 1.0\n", "m")
    return list(found.items())


def test_metric_labels_are_parsed_with_escapes() -> None:
    assert labels('method="GET",route="/api/v1/users/<id>",status="200"') == [
        ("method", "GET"),
        ("route", "/api/v1/users/<id>"),
        ("status", "200"),
    ]
    assert labels(r'route="a\"b"') == [("route", 'a"b')]


def test_gateway_counters_are_summed_by_their_labels() -> None:
    text = "\n".join(
        [
            "# HELP aside_gateway_http_requests_total Requests.",
            "# TYPE aside_gateway_http_requests_total counter",
            'aside_gateway_http_requests_total{method="GET",route="/a",status="200"} 3.0',
            'aside_gateway_http_requests_total{method="GET",route="/a",status="500"} 1.0',
            'aside_gateway_http_requests_created{method="GET",route="/a",status="200"} 1.7e9',
            "# TYPE aside_gateway_cache_errors_total counter",
            'aside_gateway_cache_errors_total{op="get"} 2.0',
            'aside_gateway_cache_errors_total{op="breaker_open"} 1.0',
            "",
        ]
    )
    assert request_counts(text) == {("/a", "GET", "200"): 3.0, ("/a", "GET", "500"): 1.0}
    assert cache_error_counts(text) == {"get": 2.0, "breaker_open": 1.0}


def _gray_load(
    slow_ms: float, after_ms: float, status: int = 200, slow_every: int = 1, **tags: str
) -> list[cs.Sample]:
    """Reads every 0.1 s for 10 s (the fault from 3 s to 6 s: one read in
    `slow_every` takes `slow_ms`) and a write a second."""
    samples = []
    for tenth in range(100):
        at = tenth / 10
        slow = slow_ms if tenth % slow_every == 0 else 2.0
        ms = slow if 3 <= at < 6 else (after_ms if 6 <= at < 7 else 2.0)
        code = status if 3 <= at < 6 else 200
        samples.append(sample("user", code, at, ms, **(tags if code != 200 else {})))
        if tenth % 10 == 5:
            samples.append(sample("create", 201, at, 20))
    return samples


GRAY_EVENTS = {"load_start": T0, "fault": T0 + 3, "ready": T0 + 6}


def test_a_gray_failure_within_its_budgets_passes() -> None:
    case = gray.GRAY_CASES["redis-slow"]
    checks, figures = gray.gray_checks(case, _gray_load(400, 2, slow_every=4), GRAY_EVENTS)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert figures["read_p99_during_fault_ms"] == 400
    assert figures["read_p50_during_fault_ms"] == 2
    assert figures["steady_p95_again_after_s"] == 0.0


def test_a_gray_failure_past_its_budgets_fails_by_name() -> None:
    case = gray.GRAY_CASES["redis-slow"]
    slow = {c.name: c.ok for c in gray.gray_checks(case, _gray_load(1600, 2), GRAY_EVENTS)[0]}
    assert not slow["read p99 over the fault within 1500 ms"]
    # Every read waiting on the hop (no breaker opened): the p99 holds, the median does not.
    waited = {c.name: c.ok for c in gray.gray_checks(case, _gray_load(400, 2), GRAY_EVENTS)[0]}
    assert waited["read p99 over the fault within 1500 ms"]
    assert not waited["most reads around the fault: read p50 within 200 ms"]
    # Still slow a second after the hop healed: back after 1 s, within RECOVER_S.
    _, figures = gray.gray_checks(case, _gray_load(400, 50), GRAY_EVENTS)
    assert figures["steady_p95_again_after_s"] == pytest.approx(1.0)
    # A 500, or a read 503 without Retry-After, is not a clear answer.
    for bad in (_gray_load(5, 2, 500, code="internal"), _gray_load(5, 2, 503, code="x")):
        checks, _ = gray.gray_checks(case, bad, GRAY_EVENTS)
        assert not checks[0].ok and "unclear" in checks[0].detail
    checks, _ = gray.gray_checks(
        case, _gray_load(5, 2, 503, code="x", retry_after="1"), GRAY_EVENTS
    )
    assert checks[0].ok


def test_cases_and_run_ids_are_checked() -> None:
    assert chaos.parse_cases(None) == chaos.KILLS == chaos.parse_cases("all")
    assert chaos.parse_cases("gray") == tuple(gray.GRAY_CASES)
    assert chaos.parse_cases("redis-slow core") == ("redis-slow", "core")
    assert chaos.parse_cases("worker, redis") == ("worker", "redis")
    with pytest.raises(ValueError, match="mysql"):
        chaos.parse_cases("redis mysql")
    with pytest.raises(ValueError, match="too long"):
        user_prefix("x" * 45, "postgres")


def test_bad_parameters_stop_before_anything_runs(
    bench: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    done = bench("chaos", "--cases", "disk", "--reports-dir", str(tmp_path))
    assert done.returncode == 2
    assert "unknown case(s) disk" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_chaos_load_is_an_open_model_on_fresh_connections(
    settings: Settings, tmp_path: Path
) -> None:
    seed = SeedData(meta={}, hot=["hot@example.com"], cold=[], data_dir=tmp_path)
    params = chaos.ChaosParams("unit", tmp_path, ("core",), 60, chaos.SHORT)
    samples, summary = tmp_path / "load-core.jsonl", tmp_path / "s.json"
    run = chaos.load_run(params, seed, "core", samples, summary)
    variables = run.variables(settings)
    assert set(variables) <= DRIVER_VARIABLES
    assert variables["SCENARIO"] == "chaos" and variables["RATE"] == "60"
    assert variables["DURATION"] == f"{chaos.SHORT.load_duration_s('core')}s"
    # Every request on a new connection; room for the rate held up to the timeout.
    assert variables["NO_REUSE"] == "1" and variables["TIMEOUT_S"] == "3"
    assert variables["POOL"] == str(60 * (3 + 1))
    assert variables["USER_PREFIX"] == "load.unit.core"
    assert variables["SAMPLES_PATH"] == str(samples) and variables["SUMMARY_PATH"] == str(summary)
    assert variables["BASE_URL"] == settings.gateway_url
    assert variables["INFLUX_URL"] == settings.influx_url  # per-second points, as every run


# ---- the short form against the test stack ------------------------------------------------
def _stack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "stack.sh"), *args],
        env={**os.environ, "ASIDE_SKIP_INSTALL": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def stack_restored() -> Iterator[None]:
    """Whatever happens in the suite, every service is up again afterwards."""
    yield
    if _stack("status").returncode != 0:
        up = _stack("up")
        assert up.returncode == 0, f"could not restart the stack: {up.stderr}"


@pytest.fixture(scope="module")
def chaos_run(
    small_seed: Path,
    stack_restored: None,
    bench: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    reports = tmp_path_factory.mktemp("chaos-reports")
    run_id = "t" + time.strftime("%H%M%S")
    started = time.monotonic()
    done = bench(
        "chaos", "--short", "--run-id", run_id, "--data-dir", str(small_seed),
        "--reports-dir", str(reports),
    )  # fmt: skip
    elapsed = time.monotonic() - started
    out_dir = reports / f"chaos-{run_id}"
    assert (out_dir / "report.json").exists(), f"no report: {done.stderr[-3000:]}"
    run = json.loads((out_dir / "report.json").read_text())
    run["_exit"], run["_stdout"], run["_stderr"] = done.returncode, done.stdout, done.stderr
    run["_dir"], run["_elapsed"] = str(out_dir), elapsed
    return run


def case(run: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in run["cases"] if c["name"] == name]
    assert found, f"case {name} did not run: {run['_stderr'][-2000:]}"
    return found[0]


def _failures(run: dict[str, Any]) -> str:
    return "\n".join(
        f"{c['name']}: {c['error'] or ''} "
        + "; ".join(f"{k['name']}: {k['detail']}" for k in c["checks"] if not k["ok"])
        for c in run["cases"]
        if not c["passed"]
    )


def test_every_case_passes_within_budget(chaos_run: dict[str, Any]) -> None:
    assert [c["name"] for c in chaos_run["cases"]] == list(chaos.KILLS)
    assert chaos_run["passed"] and chaos_run["_exit"] == 0, _failures(chaos_run)
    for name in chaos.KILLS:
        checks = case(chaos_run, name)["checks"]
        assert len(checks) >= 7 and all(c["ok"] for c in checks)
        # The driver's summary was read: its tallies are checked against the samples.
        assert case(chaos_run, name)["notes"]["driver_summary"], name
        assert "every request has its sample" in {c["name"] for c in checks}, name
    assert chaos_run["_elapsed"] < 110


def test_redis_down_reads_come_from_postgres_and_hits_resume(chaos_run: dict[str, Any]) -> None:
    redis_case = case(chaos_run, "redis")
    figures = redis_case["figures"]
    assert figures["reads_during_outage"] > 0
    assert (
        figures["reads_during_outage_bypass"] + figures["reads_during_outage_503"]
        == figures["reads_during_outage"]
    )
    assert figures["first_hit_after_ready_s"] <= cc.RECOVER_S
    assert figures["hit_ratio_back_after_ready_s"] <= cc.RECOVER_S
    statuses = {s for k in redis_case["requests"].values() for s in k["statuses"]}
    assert statuses <= {"200", "201", "503"}
    assert redis_case["notes"]["restarted_pid"] != redis_case["notes"]["killed_pid"]


def test_core_down_writes_fail_fast_and_recover(chaos_run: dict[str, Any]) -> None:
    core_case = case(chaos_run, "core")
    figures = core_case["figures"]
    assert figures["writes_while_down"] > 0
    assert figures["max_ms_while_down"] <= cc.CORE_DOWN_MAX_MS
    assert figures["first_2xx_write_after_ready_s"] <= cc.RECOVER_S
    assert core_case["requests"]["create"]["codes"].keys() <= {
        "core_unavailable",
        "write_outcome_unknown",  # only a write in flight when the core died
    }
    assert set(core_case["requests"]["count"]["statuses"]) == {"200"}
    assert core_case["writes"]["not_acknowledged"] > 0


def test_postgres_restart_fails_fast_and_pools_recover(chaos_run: dict[str, Any]) -> None:
    pg_case = case(chaos_run, "postgres")
    figures = pg_case["figures"]
    assert figures["cached_reads_while_down"] > 0
    assert figures["failed_writes"] > 0
    assert figures["max_failure_ms"] <= cc.DB_DOWN_MAX_MS
    assert figures["first_2xx_write_after_ready_s"] <= cc.RECOVER_S
    assert figures["first_miss_after_ready_s"] <= cc.RECOVER_S
    # Cached reads all answer, unless a Redis error in the gateway sent some to
    # PostgreSQL meanwhile (the check above then allows fast 503s only).
    failed_cached = sum(
        n for status, n in pg_case["requests"]["user"]["statuses"].items() if status != "200"
    )
    assert failed_cached == figures["cached_reads_failed_after_redis_errors"]
    if failed_cached:
        assert figures["gateway_redis_errors"] > 0


def test_killed_worker_is_replaced_and_counters_are_exact(chaos_run: dict[str, Any]) -> None:
    worker = case(chaos_run, "worker")
    figures = worker["figures"]
    assert figures["worker_replaced_after_s"] <= cc.REPLACE_S
    assert figures["requests_compared"] > 100
    assert worker["notes"]["killed_pid"] not in worker["notes"]["workers_after"]
    assert sum(figures["loaded_route_increase"].values()) >= figures["requests_compared"]


def test_every_write_is_accounted_for_and_reads_match(
    chaos_run: dict[str, Any], settings: Settings
) -> None:
    for name in chaos.KILLS:
        writes = case(chaos_run, name)["writes"]
        assert writes["writes"] > 10, name
        assert writes["rows_after"] == writes["writes"], name
        assert writes["retried"] == writes["not_acknowledged"], name
        assert writes["problems"] == [], name
        reads = case(chaos_run, name)["reads"]
        assert reads["reads"] >= 2 * (reads["emails"] + reads["ids"]) and not reads["mismatches"]
    # The run's users are gone again: the table is as seeded.
    with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
        left = conn.execute(
            "SELECT count(*) FROM users WHERE username LIKE %s", (f"load.{chaos_run['run_id']}.%",)
        ).fetchone()[0]
    assert left == 0 and chaos_run["removed_users"] > 0


def test_report_files_and_a_healthy_stack(chaos_run: dict[str, Any]) -> None:
    out_dir = Path(chaos_run["_dir"])
    report = (out_dir / "report.md").read_text()
    for name in chaos.KILLS:
        assert f"## {name}:" in report
        assert (out_dir / f"load-{name}.jsonl.gz").stat().st_size > 1000
    assert "| case | requests |" in chaos_run["_stdout"]
    assert _stack("status").returncode == 0


def test_the_cpu_meter_reads_the_driver_and_the_proxy_in_cores(tmp_path: Path) -> None:
    meter = gray.CpuMeter.start(os.getpid())  # this process stands in for the proxy
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    driver = DriverProcess([sys.executable, "-c", burn], tmp_path / "burn.log", dict(os.environ))
    assert driver.start().wait(30) == 0  # the wait every suite uses keeps the driver's CPU
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    shares = meter.shares(driver.cpu_seconds)
    assert shares["driver_cpu_cores"] is not None and shares["driver_cpu_cores"] > 0.05
    assert shares["proxy_cpu_cores"] is not None and shares["proxy_cpu_cores"] > 0.05
    assert gray.CpuMeter.start(None).shares(None) == {
        "driver_cpu_cores": None,
        "proxy_cpu_cores": None,
    }
