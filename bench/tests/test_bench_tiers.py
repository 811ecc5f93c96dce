"""Unit tests of the cache-tier arms: their plan, the per-step gateway figures
(CPU per request, hit rate per tier, invalidation lag quantiles) and the
tables that show them. Nothing here needs a running service."""

from __future__ import annotations

import http.server
import json
import math
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from aside_bench.ceiling.report import ceiling_tables
from aside_bench.load.run import step_run
from aside_bench.plan.arms import CACHE_ARMS, CACHE_PARAMS, CEILING_ARMS, REDIS_READS, cache_param
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import PlanError, Step, build_steps, gateway_env, parse_arms, phases_for
from aside_bench.records.results import Latency, StaleCounts, StepResult
from aside_bench.records.tierstats import (
    bucket_increase,
    cpu_ms_per_request,
    histogram_max,
    histogram_quantile,
    step_cost,
    tier_hit_rates,
)
from aside_bench.report.tables import (
    COST_COLUMNS,
    MISSING,
    series_table,
    staleness_table,
    sweep_tables,
)
from aside_bench.stack import config, procs
from aside_bench.stack.gateway_metrics import (
    connection_bound,
    connections_per_worker,
    step_counters,
)
from aside_bench.sweep import warmtiers
from aside_bench.sweep.invalidation_lag_floor import figures, published_ms
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---- the plan ------------------------------------------------------------------------
def test_the_tier_arms_and_the_l2_alias_parse() -> None:
    assert parse_arms("nocache l2 l1 hybrid", CACHE_ARMS) == ["nocache", "cache", "l1", "hybrid"]
    # The alias names the cache arm: given twice, it is one arm.
    assert parse_arms("cache l2", CACHE_ARMS) == ["cache"]
    assert parse_arms("l2 l1 hybrid healthz", CEILING_ARMS) == ["cache", "l1", "hybrid", "healthz"]


def test_an_alias_outside_its_scenario_is_named_as_typed() -> None:
    with pytest.raises(PlanError, match="'l2'"):
        parse_arms("go l2", ("go", "python"))


def test_the_tier_arms_have_cold_and_warm_phases() -> None:
    assert phases_for("read", "l1", "both") == ["cold", "warm"]
    assert phases_for("read", "hybrid", "warm") == ["warm"]
    steps = build_steps("mixed", [50], ["nocache", "cache", "l1", "hybrid", "tracking"], "both", 30)
    assert [(s.arm, s.phase) for s in steps] == [
        ("nocache", "none"),
        ("cache", "cold"), ("cache", "warm"),
        ("l1", "cold"), ("l1", "warm"),
        ("hybrid", "cold"), ("hybrid", "warm"),
        ("tracking", "cold"), ("tracking", "warm"),
    ]  # fmt: skip


def test_each_read_arm_sends_its_cache_parameter() -> None:
    arms = ("nocache", "index", "cache", "l1", "hybrid", "tracking")
    assert [cache_param(arm) for arm in arms] == [
        "off", "off", "l2", "l1", "hybrid", "tracking",
    ]  # fmt: skip
    assert cache_param("healthz") is None


@pytest.mark.parametrize("arm", sorted(CACHE_PARAMS))
def test_every_read_arm_tells_the_driver_its_cache_mode(arm: str) -> None:
    run = step_run(Step("read", arm, "warm", 100, 30), "r", LoadShape(), 100, Path("data"))
    assert run.variables(config.load({}))["CACHE"] == CACHE_PARAMS[arm]
    # The modes the gateway's ?cache= takes (the driver refuses any other).
    assert CACHE_PARAMS[arm] in ("off", "nopool", "coalesce", "l1", "l2", "hybrid", "tracking")


# ---- CPU per request, hit rate per tier ------------------------------------------------
def test_cpu_per_request_is_the_ticks_over_the_step_per_request() -> None:
    # 150 ticks at 100 per second: 1.5 s of CPU for 500 requests, 3 ms each.
    assert cpu_ms_per_request(1000, 1150, 100, 500) == pytest.approx(3.0)
    assert cpu_ms_per_request(None, 1150, 100, 500) is None
    assert cpu_ms_per_request(1000, 1150, 100, 0) is None
    # A restarted gateway counts from its new start, never below 0.
    assert cpu_ms_per_request(1000, 40, 100, 10) == 0.0


def test_tier_hit_rates_from_the_counter_increase() -> None:
    start = {"l1 hit": 100.0, "l1 miss": 50.0, "l2 hit": 10.0, "l2 miss": 5.0}
    end = {"l1 hit": 1000.0, "l1 miss": 150.0, "l2 hit": 90.0, "l2 miss": 25.0}
    rates = tier_hit_rates(start, end)
    assert rates["l1"] == pytest.approx(900 / 1000)
    assert rates["l2"] == pytest.approx(80 / 100)


def test_an_unused_tier_has_no_rate_and_a_reset_counts_from_zero() -> None:
    assert tier_hit_rates({}, {"l2 hit": 30.0, "l2 miss": 10.0}) == {"l1": None, "l2": 0.75}
    # The gateway restarted: its counters start again below the first reading.
    assert tier_hit_rates({"l1 hit": 500.0, "l1 miss": 100.0}, {"l1 hit": 9.0, "l1 miss": 1.0})[
        "l1"
    ] == pytest.approx(0.9)


# ---- the invalidation lag ---------------------------------------------------------------
LAG_START = {"0.001": 10.0, "0.005": 20.0, "0.01": 20.0, "0.1": 20.0, "+Inf": 20.0}
LAG_END = {"0.001": 10.0, "0.005": 70.0, "0.01": 110.0, "0.1": 120.0, "+Inf": 120.0}


def test_bucket_increase_is_cumulative_and_sorted() -> None:
    assert bucket_increase(LAG_START, LAG_END) == [
        (0.001, 0.0), (0.005, 50.0), (0.01, 90.0), (0.1, 100.0), (math.inf, 100.0),
    ]  # fmt: skip


def test_lag_quantiles_interpolate_within_the_bucket() -> None:
    buckets = bucket_increase(LAG_START, LAG_END)
    # Rank 50 of 100 is the top of the (0.001, 0.005] bucket.
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.005)
    # Rank 99 is 9/10 of the way through (0.01, 0.1].
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.01 + 0.09 * 0.9)
    assert histogram_max(buckets) == 0.1


def test_lag_quantile_edges() -> None:
    first = [(0.002, 4.0), (0.01, 4.0), (math.inf, 4.0)]
    # The first bucket's lower bound is 0.
    assert histogram_quantile(0.5, first) == pytest.approx(0.001)
    beyond = [(0.5, 1.0), (5.0, 1.0), (math.inf, 10.0)]
    # A rank in +Inf gives the highest finite bound, as histogram_quantile does.
    assert histogram_quantile(0.99, beyond) == 5.0
    assert histogram_max(beyond) == math.inf
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, [(0.1, 3.0)]) is None  # no +Inf bucket
    assert histogram_max([(0.1, 0.0), (math.inf, 0.0)]) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, first)


# ---- a step's probe, end to end ------------------------------------------------------------
def _exposition(requests: float, l1_hits: float, lag: list[float], entries: float) -> str:
    """A gateway /metrics text with the names and labels the gateway exports."""
    registry = CollectorRegistry()
    http = Counter("aside_gateway_http_requests_total", "", ["route", "method", "status"],
                   registry=registry)  # fmt: skip
    http.labels("/api/v1/users/count", "GET", "200").inc(requests)
    http.labels("/metrics", "GET", "200").inc(7)
    tiers = Counter("aside_gateway_cache_tier_reads_total", "", ["route", "tier", "outcome"],
                    registry=registry)  # fmt: skip
    tiers.labels("count_by_email", "l1", "hit").inc(l1_hits)
    tiers.labels("user_by_id", "l1", "hit").inc(1)
    tiers.labels("count_by_email", "l1", "miss").inc(10)
    histogram = Histogram("aside_gateway_l1_invalidation_lag_seconds", "",
                          buckets=(0.001, 0.01, 0.1), registry=registry)  # fmt: skip
    for seconds in lag:
        histogram.observe(seconds)
    Gauge("aside_gateway_l1_entries", "", registry=registry).set(entries)
    Gauge("aside_gateway_l1_bytes", "", registry=registry).set(entries * 1024)
    return generate_latest(registry).decode()


def test_step_counters_read_the_gateway_exposition() -> None:
    counters = step_counters(_exposition(40, 89, [0.0005, 0.05], 12))
    assert counters["requests"] == 40  # /metrics is not load
    assert counters["tier_reads"] == {"l1 hit": 90.0, "l1 miss": 10.0}
    assert counters["lag_buckets"] == {"0.001": 1.0, "0.01": 1.0, "0.1": 2.0, "+Inf": 2.0}
    assert (counters["l1_entries"], counters["l1_bytes"]) == (12.0, 12 * 1024.0)


def _bound_exposition(bound: float | None) -> str:
    registry = CollectorRegistry()
    if bound is not None:
        Gauge("aside_gateway_connections_max", "", registry=registry).set(bound)
    return generate_latest(registry).decode()


def test_a_connection_bound_of_zero_is_a_worker_still_starting() -> None:
    assert connections_per_worker(_bound_exposition(1000)) == 1000
    assert connections_per_worker(_bound_exposition(0)) is None
    assert connections_per_worker(_bound_exposition(None)) is None


def _metrics_server(pages: list[str]) -> tuple[http.server.HTTPServer, list[str]]:
    """A /metrics that answers `pages` in turn, then the last one for good;
    the pages it served, in order."""
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = pages[min(len(served), len(pages) - 1)]
            served.append(page)
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, served


@pytest.mark.parametrize(
    ("pages", "expected"),
    [
        ([0, 0, 1000], 1000),  # workers starting, then every one has set its bound
        ([1000], 1000),
        ([None], None),  # a gateway that does not say is not waited for
    ],
)
def test_the_connection_bound_waits_out_workers_still_starting(
    pages: list[float | None], expected: int | None
) -> None:
    server, served = _metrics_server([_bound_exposition(one) for one in pages])
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = replace(config.load({}), gateway_url=url)
        assert connection_bound(settings, within_s=10.0) == expected
        assert len(served) == len(pages)
    finally:
        server.shutdown()


def test_a_connection_bound_still_zero_at_its_deadline_is_not_known() -> None:
    server, served = _metrics_server([_bound_exposition(0)])
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = replace(config.load({}), gateway_url=url)
        assert connection_bound(settings, within_s=0.5) is None
        assert len(served) >= 2
    finally:
        server.shutdown()


def test_step_cost_from_two_probe_readings() -> None:
    start = {"cpu_ticks": 500, "clk_tck": 100} | step_counters(_exposition(100, 0, [], 0))
    end = {"cpu_ticks": 560, "clk_tck": 100, "gateway_rss_kib": 204800, "redis_rss_kib": 10240}
    end |= step_counters(_exposition(400, 270, [0.002, 0.003, 0.05], 300))
    cost = step_cost({"start": start, "end": end})
    assert cost is not None
    assert cost.requests == 300
    assert cost.cpu_ms_per_request == pytest.approx(600 / 300)
    assert (cost.gateway_rss_mib, cost.redis_rss_mib) == (200.0, 10.0)
    assert cost.l1_hit_rate == pytest.approx(270 / 270)  # the 10 misses are in both readings
    assert cost.l2_hit_rate is None
    assert cost.l1_entries == 300 and cost.l1_mib == pytest.approx(300 / 1024)
    assert cost.lag_count == 3
    assert cost.lag_p50_ms == pytest.approx((0.001 + 0.009 * 0.75) * 1000)
    assert cost.lag_max_ms == pytest.approx(100.0)
    assert step_cost(None) is None
    assert step_cost({"start": start}) is None
    # The machine's own ticks (busy, total, steal): its busy share and the host's steal.
    assert (cost.machine_busy, cost.host_steal) == (None, None)  # older runs: not read
    machine = step_cost(
        {"start": start | {"machine_ticks": [100, 1000, 5]},
         "end": end | {"machine_ticks": [250, 1200, 25]}}
    )  # fmt: skip
    assert machine is not None
    assert machine.machine_busy == pytest.approx(0.75) and machine.host_steal == pytest.approx(0.1)


def test_the_gateway_tree_cpu_ticks_cover_its_children() -> None:
    own = procs.cpu_ticks(os.getpid())
    assert isinstance(own, int) and own >= 0
    tree = procs.tree_cpu_ticks(os.getpid())
    assert tree is not None and tree >= own
    assert procs.clock_ticks_per_s() > 0


# ---- tables ------------------------------------------------------------------------------
def _result(
    arm: str,
    phase: str,
    rate: int,
    probed: bool,
    stale: StaleCounts | None = None,
    lag: tuple[float, ...] = (0.004,),
    floor: dict | None = None,
) -> StepResult:
    probe = None
    if probed:
        start = {"cpu_ticks": 0, "clk_tck": 100} | step_counters(_exposition(0, 0, [], 0))
        end = {"cpu_ticks": 30, "clk_tck": 100, "gateway_rss_kib": 102400, "redis_rss_kib": None}
        end |= step_counters(_exposition(rate * 30, rate * 27, list(lag), 50))
        probe = {"start": start, "end": end, "floor": floor}
    return StepResult(
        step=Step("mixed", arm, phase, rate, 30),
        latency=Latency(1.0, 2.0, 3.0, rate * 30),
        iterations=rate * 30,
        failed=0,
        dropped=0,
        cache=None,
        cost=step_cost(probe),
        stale=stale,
    )


def test_series_tables_carry_the_cost_columns_that_have_values() -> None:
    results = [_result("l1", "warm", 100, True), _result("l1", "warm", 300, False)]
    table = series_table(results, "l1", "warm")
    # Redis' memory was not read and no L2 lookup happened: those columns are left out.
    assert table.headers[-4:] == ["gateway CPU ms/req", "gateway RSS MiB", "L1 hit rate", "L1 MiB"]
    assert set(table.headers[-4:]) <= {column.header for column in COST_COLUMNS}
    # 0.3 s of CPU for 3000 requests; the step's 2700 L1 lookups all hit.
    assert table.rows[0][-4:] == ["0.10", "100.0", "100.0%", "0.05"]
    assert table.rows[1][-4:] == [MISSING] * 4
    unprobed = series_table([_result("l1", "warm", 300, False)], "l1", "warm")
    assert unprobed.headers[-1] == "cache hit rate"


def test_the_staleness_table_shows_stale_reads_and_the_lag_per_series() -> None:
    results = [
        _result("cache", "warm", 50, True, StaleCounts(reads=108, stale=0)),
        _result("l1", "warm", 50, True, StaleCounts(reads=108, stale=3, errors=1)),
    ]
    table = staleness_table(results)
    assert table is not None
    assert table.headers[:5] == ["series", "target /s", "checked reads", "stale reads",
                                 "no answer"]  # fmt: skip
    assert table.rows[1][:5] == ["l1 (warm)", "50", "108", "3", "1"]
    # One lag sample of 4 ms in (1 ms, 10 ms]: p50 is half-way, max the bucket's top;
    # no floor was measured (a run from before the floor subscriber).
    assert table.rows[1][5:] == ["5.50", "9.91", "10.0", "1", MISSING, MISSING]
    assert table in [t for t in sweep_tables(results) if t.title == table.title]
    assert staleness_table([_result("l1", "warm", 50, True)]) is None
    quiet = _result("cache", "warm", 50, False, StaleCounts(reads=10, stale=0))
    assert staleness_table([quiet]).rows[0][5:] == [MISSING] * 6
    # Probed, but no invalidation message arrived: no lag, not an unknown one.
    silent = _result(
        "cache", "warm", 50, True, StaleCounts(reads=10, stale=0), lag=(), floor=figures([])
    )
    assert staleness_table([silent]).rows[0][5:] == ["none"] * 3 + ["0", "none", "none"]
    floored = _result(
        "l1", "warm", 50, True, StaleCounts(reads=10, stale=0), floor=figures([0.4, 0.6, 3.1])
    )
    assert staleness_table([floored]).rows[0][-2:] == ["0.60", "3.10"]


def test_the_floor_figures_are_nearest_rank_quantiles() -> None:
    lags = [float(ms) for ms in range(1, 201)]  # 1..200 ms
    assert figures(lags) == {"count": 200, "p50_ms": 100.0, "p99_ms": 198.0, "max_ms": 200.0}
    assert figures([7.0]) == {"count": 1, "p50_ms": 7.0, "p99_ms": 7.0, "max_ms": 7.0}
    assert figures([])["p99_ms"] is None
    # The core's µs publish time; a message without it is not timed.
    assert published_ms({"keys": [], "published_us": 1_700_000_000_123_456}) == pytest.approx(
        1_700_000_000_123.456
    )
    assert published_ms({"keys": [], "published_ms": 5}) is None
    assert published_ms({"keys": [], "published_us": True}) is None


def test_the_ceiling_gives_a_ratio_per_tier_arm() -> None:
    def step(arm: str, phase: str, rate: int, p95: float) -> StepResult:
        return StepResult(Step("ceiling", arm, phase, rate, 10), Latency(1, p95, p95, 10),
                          rate * 10, 0, 0, None)  # fmt: skip

    results = [
        step("cache", "warm", 200, 3), step("l1", "warm", 200, 2), step("l1", "warm", 400, 4),
        step("healthz", "none", 200, 2), step("healthz", "none", 400, 4),
        step("healthz", "none", 800, 30),
    ]  # fmt: skip
    tables, found = ceiling_tables(results, 10)
    assert tables[0].rows[-2:] == [["cache / healthz", "0.50"], ["l1 / healthz", "1.00"]]
    assert found.ratios == {"cache": 0.5, "l1": 1.0}


def test_a_mixed_step_of_a_tier_arm_runs_the_staleness_checker_beside_the_load() -> None:
    settings = config.load({})
    step = Step("mixed", "l1", "warm", 100, 30)
    run = step_run(step, "r", LoadShape(stale_per_min=12), 100, Path("data"))
    found = run.variables(settings)
    assert (found["SCENARIO"], found["CACHE"], found["STALE_PER_MIN"]) == ("mixed", "l1", "12")
    off = step_run(step, "r", LoadShape(stale_per_min=0), 100, Path("data")).variables(settings)
    assert off["STALE_PER_MIN"] == "0"


def test_the_ttl_arm_turns_invalidation_off_and_only_tracking_keeps_its_messages() -> None:
    untracked = {"CACHE_L1_TRACKING": "off"}
    assert gateway_env("l1-ttl") == {"CACHE_L1_INVALIDATION": "off", **untracked}
    assert cache_param("l1-ttl") == "l1"
    # Only the tracking arm keeps the connection Redis tells of every change.
    arms = ("nocache", "index", "cache", "l1", "hybrid")
    assert all(gateway_env(arm) == untracked for arm in arms)
    assert gateway_env("tracking") == {} and gateway_env("cache", untracked=False) == {}


def test_the_bench_flushes_l1_on_the_channel_and_with_the_message_of_the_contract() -> None:
    tiers = json.loads((REPO_ROOT / "contracts" / "cache.json").read_text())["tiers"]
    assert tiers["invalidation_channel"] == warmtiers.INVALIDATION_CHANNEL
    message = json.loads(warmtiers.flush_message(1700000000.123))
    assert message == tiers["flush_message"] | {"published_ms": 1700000000123}


def test_every_arm_reading_through_redis_has_its_redis_counters_read() -> None:
    through_redis = {cache_param(arm) for arm in ("cache", "hybrid", "tracking")}
    assert through_redis == set(REDIS_READS)
    assert not {cache_param(arm) for arm in ("nocache", "index", "l1", "l1-ttl")} & through_redis
