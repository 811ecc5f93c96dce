"""Network distance as a sweep dimension: every arm once per distance
(`cache~same-zone`), the hops' toxics set between steps, each hop's round trip
measured beside the load, a decision per distance, and nothing left on the
proxies after the run. Unit tests, then a short run on the test stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from aside_bench.plan.arms import base_arm, cache_param
from aside_bench.plan.steps import (
    DIRECT,
    arm_distance,
    arm_memory,
    at_distances,
    build_steps,
    gateway_env,
    phases_for,
)
from aside_bench.records.results import Latency, StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report.distances import agrees, by_distance, hop_table, proxy_cost_table
from aside_bench.report.tables import MISSING
from aside_bench.stack import procs
from aside_bench.stack import toxiproxy as tp
from aside_bench.stack.config import load
from aside_bench.stack.services import ServiceControl
from bench_helpers import bench_env
from report_samples import RESULTS, sample_run, step_cost, step_record

REDIS_MS = 2  # the cross-zone figure


# ---- unit ------------------------------------------------------------------------------
def test_an_arm_at_a_distance_is_the_arm_with_its_distance_named() -> None:
    arms = at_distances(["nocache", "cache@4mb"], [DIRECT, "same-zone"])
    assert arms == ["nocache", "cache@4mb", "nocache~same-zone", "cache@4mb~same-zone"]
    assert at_distances(["cache"], []) == ["cache"]
    one = "cache@4mb~same-zone"
    assert base_arm(one) == "cache" and arm_distance(one) == "same-zone"
    assert arm_memory(one) == 4 * 1024**2 and cache_param(one) == "l2"
    assert arm_distance("cache") is None
    assert phases_for("read", "hybrid~cross-zone", "both") == ["cold", "warm"]
    assert phases_for("read", "nocache~cross-zone", "both") == ["none"]
    assert gateway_env("l1-ttl~loopback")["CACHE_L1_INVALIDATION"] == "off"


def test_a_rates_steps_compare_the_distances_back_to_back() -> None:
    arms = at_distances(["cache"], ["loopback", "cross-zone"])
    steps = build_steps("read", [30, 100], arms, "warm", 5)
    assert [(s.rate, s.arm) for s in steps] == [
        (30, "cache~loopback"), (30, "cache~cross-zone"),
        (100, "cache~loopback"), (100, "cache~cross-zone"),
    ]  # fmt: skip


def _at(result: StepResult, arm: str, p50: float) -> StepResult:
    latency = replace(result.latency, p50=p50) if result.latency else Latency(p50, p50, p50, 1)
    return replace(result, step=replace(result.step, arm=arm), latency=latency)


def test_each_distance_gets_its_steps_with_the_arms_as_they_read() -> None:
    cache = next(r for r in RESULTS if r.step.arm == "cache" and r.step.phase == "warm")
    cost = replace(step_cost(0.4), proxy_cpu_ms_per_request=0.5)
    through = replace(_at(cache, "cache~loopback", 1.3), cost=cost)
    results = [_at(cache, "cache", 1.0), through, _at(cache, "cache~cross-zone", 3.4)]
    found = by_distance(results)
    assert list(found) == [DIRECT, "loopback", "cross-zone"]
    assert {r.step.arm for one in found.values() for r in one} == {"cache"}
    table = proxy_cost_table(results)
    assert table is not None and len(table.rows) == 1
    assert table.rows[0][4] == "0.30"  # 1.3 ms through the proxies against 1.0 direct
    # The proxy's CPU beside it: 0.5 ms a request at the rate served, as a share of a core.
    assert table.rows[0][5] == "0.50"
    assert table.rows[0][6] == f"{0.5 * through.achieved_rps / 1000:.2f}"
    assert proxy_cost_table([_at(cache, "cache~cross-zone", 3.4)]) is None  # no pair to read


def test_a_measured_round_trip_agrees_within_a_fifth_or_a_tenth_of_a_ms() -> None:
    assert agrees(11.9, 10) and not agrees(12.1, 10)
    assert agrees(0.09, 0) and not agrees(0.2, 0)


def test_the_hop_table_puts_each_setting_beside_what_the_steps_measured() -> None:
    run = sample_run()
    run.params["distances"] = {"explicit": {"source": "DISTANCE_*_MS", "hops": {
        "redis": {"round_trip_ms": 10, "jitter_ms": 0},
        "postgres": {"round_trip_ms": 0, "jitter_ms": 0}}}}  # fmt: skip
    run.steps = [
        step_record(distance="explicit", hops={"redis": {"median_ms": m, "p95_ms": m},
                                               "postgres": {"median_ms": 0.3, "p95_ms": 0.4}})
        for m in (10.8, 11.2, 11.0)
    ]  # fmt: skip
    table = hop_table(run)
    assert table is not None
    rows = {row[1]: row for row in table.rows}
    assert rows["redis"][2:] == ["10.0", "11.0", MISSING, "3", "yes"]  # no loopback ran
    assert rows["postgres"][-1] == "no"  # 0.3 ms through the proxy against nothing added
    assert hop_table(RunRecord("r", "sweep", "", {}, {}, {}, {})) is None
    # With a loopback beside it, the setting is set against what the toxic added.
    run.params["distances"] = {"loopback": {"hops": {"redis": {"round_trip_ms": 0}}},
                               "same-zone": {"hops": {"redis": {"round_trip_ms": 1}}}}  # fmt: skip
    run.steps = [step_record(distance=d, hops={"redis": {"median_ms": m, "p95_ms": m}})
                 for d, m in (("loopback", 0.3), ("same-zone", 1.35))]  # fmt: skip
    table = hop_table(run)
    assert table is not None
    assert table.rows[1][3:5] == ["1.35", "1.05"] and table.rows[1][-1] == "yes"
    assert table.rows[0][4] == MISSING and table.rows[0][-1] == "reference"  # 1.35 set on it


# ---- the command line -----------------------------------------------------------------
def _bench(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aside_bench", *args], env=bench_env(**env),
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--distance", "far"], {}, "unknown distance 'far'"),
        (["--distance", "explicit"], {}, "distance explicit needs DISTANCE_REDIS_MS"),
        (["--scenario", "compute", "--distance", "loopback"], {}, "--distance is for the read"),
        ([], {"DISTANCE_REDIS_MS": "250"}, "REDIS_TIMEOUT_MS=200 is not longer than the redis"),
        ([], {"DISTANCE_REDIS_MS": "1.5005"}, "DISTANCE_REDIS_MS must be milliseconds"),
    ],
)
def test_a_distance_that_cannot_run_is_refused_in_one_line(
    args: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    done = _bench("run", *args, "--reports-dir", str(tmp_path), "--no-calibrate", **env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


# ---- a short run on the test stack ----------------------------------------------------
def test_a_run_at_distances_measures_each_hop_and_leaves_no_proxy_behind(
    small_seed: Path, tmp_path: Path
) -> None:
    done = _bench("run", "--run-id", "distances", "--rates", "10", "--duration", "4s",
                  "--arms", "cache", "--warm", "warm", "--no-calibrate",
                  "--distance", "direct loopback explicit", "--data-dir", str(small_seed),
                  "--reports-dir", str(tmp_path), DISTANCE_REDIS_MS=str(REDIS_MS))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp_path / "distances" / "run.json").read_text())
    steps = {s["arm"]: s for s in run["steps"]}
    assert set(steps) == {"cache", "cache~loopback", "cache~explicit"}
    assert "hops" not in steps["cache"] and "distance" not in steps["cache"]
    redis = steps["cache~explicit"]["hops"]["redis"]["median_ms"]
    base = steps["cache~loopback"]["hops"]["redis"]["median_ms"]
    # Applied and measured: the hop added its setting, not nothing and not several. How
    # closely it agrees is the run's own hop table's verdict (a shared 2-core machine's
    # median of 20 pings has come out 0.8 ms over a 2 ms setting).
    assert 0.8 * REDIS_MS <= redis - base <= 2 * REDIS_MS, (redis, base)
    assert steps["cache~explicit"]["hops"]["postgres"]["median_ms"] < REDIS_MS / 2
    report = (tmp_path / "distances" / "report.md").read_text()
    assert "Distances: each hop's round trip, set and measured" in report
    assert "The proxy's own cost" in report
    for name in (DIRECT, "loopback", "explicit"):
        assert f"### the decision ({name}): at each rate" in report
    # Nothing left behind: no toxic on a hop, the core and the gateway direct again.
    api = tp.Toxiproxy()
    try:
        assert all(not toxics for toxics in api.toxics().values())
    finally:
        api.close()
    control = ServiceControl(load(bench_env()))
    for service in ("core", "gateway"):
        url = procs.environ_value(control.pid(service), "REDIS_URL") or ""
        assert str(control.stack.ports["redis"]) in url, (service, url)
    assert os.environ.get("DISTANCE_REDIS_MS") is None  # the test's own environment untouched
