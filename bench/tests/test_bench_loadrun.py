"""The driver's layer without the driver: the process wrapper on small shell
commands, the variables of each step, and the summary reader on made-up
summaries of the documented shape (bench/driver/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aside_bench.load.run import (
    DriverProcess,
    LoadRun,
    driver_env,
    keeps_key_trace,
    step_run,
)
from aside_bench.load.summary import SUMMARY_SCHEMA, KeyTrace, Summary, SummaryError
from aside_bench.plan.arms import BARE_ARM
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step
from aside_bench.records.results import Latency, StaleCounts
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError, wait_for
from aside_bench.sweep.collect import summary_result

SETTINGS = config.load({})


def test_the_log_starts_with_the_variables_and_the_command(tmp_path: Path) -> None:
    log = tmp_path / "load.log"
    process = DriverProcess(["sh", "-c", 'echo "rate $RATE"; exit 3'], log, {"RATE": "7"})
    assert process.run_measured(10) == 3
    assert process.returncode == 3 and not process.running
    assert log.read_text().splitlines() == ['$ RATE=7 sh -c echo "rate $RATE"; exit 3', "rate 7"]
    assert process.cpu_seconds is not None and process.cpu_seconds >= 0


def test_no_driver_variable_leaks_in_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAMPLES_PATH", "/tmp/should-not-be-used")
    monkeypatch.setenv("RATE", "99999")
    run = LoadRun("healthz", "r1", "core", "none", 100, 3, 10, 10, Path("data"))
    env = driver_env(SETTINGS, run)
    assert env["RATE"] == "100" and "SAMPLES_PATH" not in env
    assert env["PATH"]  # the rest of the environment is kept
    assert env["INFLUX_URL"] == SETTINGS.influx_url  # per-second points by default


def test_a_driver_past_its_time_is_killed(tmp_path: Path) -> None:
    process = DriverProcess(["sleep", "30"], tmp_path / "load.log", {})
    with pytest.raises(StackError, match="did not finish within 0 s"):
        process.run_measured(0.2)
    assert not process.running


# ---- the variables of each step ---------------------------------------------------------
def _vars(step: Step, **shape: Any) -> dict[str, str]:
    run = step_run(step, "r1", LoadShape(**shape), 50, Path("data"), max_pool=300)
    return run.variables(SETTINGS)


def test_a_read_step_sends_its_arms_cache_mode_and_mix() -> None:
    found = _vars(Step("read", "hybrid", "warm", 500, 30, repeat=2), hot_share=0.8)
    assert found["SCENARIO"] == "read" and found["CACHE"] == "hybrid"
    assert (found["RATE"], found["POOL"], found["DURATION"]) == ("500", "50", "30s")
    assert (found["HOT_SHARE"], found["REPEAT"], found["PHASE"]) == ("0.8", "2", "warm")
    assert found["BASE_URL"] == SETTINGS.gateway_url
    assert _vars(Step("read", "nocache", "none", 10, 3))["CACHE"] == "off"


def test_a_read_step_sends_its_keys_popularity_only_when_asked() -> None:
    assert "DIST" not in _vars(Step("read", "cache", "warm", 100, 5))  # the hot set
    found = _vars(Step("read", "cache", "warm", 100, 5), dist="zipf", alpha=1.3, keys=5000)
    assert (found["DIST"], found["ALPHA"], found["KEYS"]) == ("zipf", "1.3", "5000")
    assert "DIST" not in _vars(Step("mixed", "cache", "warm", 100, 5), dist="zipf")


def test_a_trace_replaces_the_popularity_and_a_timed_one_runs_at_the_steps_rate(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "k.trace"
    read = Step("read", "cache", "warm", 100, 5)
    found = _vars(read, trace=trace)
    assert found["TRACE"] == str(trace.resolve()) and "DIST" not in found
    assert "TRACE_SPEED" not in found  # untimed: the keys go at RATE
    assert _vars(read, trace=trace, trace_rate=200.0)["TRACE_SPEED"] == "0.5"
    reads = _vars(Step("interference", "go-checksum", "none", 5, 5, read_rate=300),
                  trace=trace, trace_rate=200.0)  # fmt: skip
    assert (reads["TRACE"], reads["TRACE_SPEED"]) == (str(trace.resolve()), "1.5")
    assert "TRACE" not in _vars(Step("mixed", "cache", "warm", 100, 5), trace=trace)


def test_only_steps_that_read_by_key_keep_a_key_trace(tmp_path: Path) -> None:
    zipf, trace, hotset = LoadShape(dist="zipf"), LoadShape(trace=tmp_path / "k"), LoadShape()
    read = Step("read", "cache", "warm", 100, 5)
    assert keeps_key_trace(read, zipf) and keeps_key_trace(read, trace)
    assert not keeps_key_trace(read, hotset)
    assert keeps_key_trace(Step("ceiling", BARE_ARM, "warm", 100, 5), zipf)
    assert not keeps_key_trace(Step("ceiling", "healthz", "none", 100, 5), zipf)
    assert keeps_key_trace(Step("interference", "go-checksum", "none", 5, 5, read_rate=50), trace)
    assert not keeps_key_trace(Step("mixed", "cache", "warm", 100, 5), zipf)
    run = step_run(read, "r1", zipf, 50, Path("data"), key_trace_path=tmp_path / "keys.trace.gz")
    assert run.variables(SETTINGS)["KEY_TRACE_PATH"] == str(tmp_path / "keys.trace.gz")
    assert "KEY_TRACE_PATH" not in _vars(read, dist="zipf")


def test_the_ceiling_reads_and_its_references() -> None:
    assert _vars(Step("ceiling", "cache", "warm", 100, 5))["SCENARIO"] == "read"
    bare = _vars(Step("ceiling", BARE_ARM, "warm", 100, 5))
    assert (bare["SCENARIO"], bare["CACHE"]) == ("bare", "l2")
    assert _vars(Step("ceiling", "healthz", "none", 100, 5))["SCENARIO"] == "healthz"


def test_a_mixed_step_runs_its_checker() -> None:
    found = _vars(Step("mixed", "cache", "warm", 100, 5), write_share=0.2)
    assert (found["WRITE_SHARE"], found["STALE_PER_MIN"], found["STALE_READS_AFTER"]) == (
        "0.2",
        "12",
        "2",
    )


def test_an_interference_step_sends_reads_and_checked_compute() -> None:
    found = _vars(Step("interference", "go-pbkdf2", "warm", 5, 5, read_rate=500))
    assert (found["READ_RATE"], found["READ_POOL"], found["READ_CACHE"]) == ("500", "300", "l2")
    assert json.loads(found["COMPUTE_BODY"])["kind"] == "pbkdf2"
    assert len(json.loads(found["COMPUTE_EXPECT"])["derived_key"]) == 64


def test_a_compute_step_checks_the_loops_checksum() -> None:
    found = _vars(Step("compute", "python", "none", 2, 5), complexity=3)
    assert json.loads(found["COMPUTE_BODY"]) == {"kind": "checksum", "engine": "python",
                                                 "complexity": 3}  # fmt: skip
    assert json.loads(found["COMPUTE_EXPECT"])["checksum"] == 3 * 46250000


# ---- the summary --------------------------------------------------------------------------
def _latency(p95: float, count: int) -> dict:
    return {"count": count, "p50": p95 / 2, "p95": p95, "p99": p95 * 2, "max": p95 * 4}


def _scenario(p95: float | None, requests: int, **more: object) -> dict:
    return {
        "rate": 100, "pool": 100, "inflight_peak": 4, "due": requests + 2, "started": requests,
        "dropped": 2, "late": 1, "iterations": requests, "failed": 3, "requests": requests,
        "status": {"2xx": requests - 3, "5xx": 3},
        "latency": None if p95 is None else _latency(p95, requests - 3),
        "latency_from_due": None if p95 is None else _latency(p95 * 3, requests - 3),
        "by_name": {}, "counters": {}, **more,
    }  # fmt: skip


def _write(tmp_path: Path, scenarios: dict, version: int = SUMMARY_SCHEMA) -> Path:
    path = tmp_path / "summary.json"
    data = {"schema_version": version, "cpu": {"user_s": 1.5, "system_s": 0.5}}
    path.write_text(json.dumps({**data, "scenarios": scenarios}))
    return path


def test_a_read_steps_summary_gives_both_latencies_and_the_counts(tmp_path: Path) -> None:
    summary = Summary.read(_write(tmp_path, {"read": _scenario(2.0, 100)}))
    assert summary.cpu_s == 2.0
    found = summary.step_figures("read")
    assert found is not None
    assert (found["p50"], found["p95"], found["p99"], found["max"]) == (1.0, 2.0, 4.0, 8.0)
    assert found["from_due"]["p95"] == 6.0
    assert (found["requests"], found["answered"], found["failed"], found["dropped"]) == (
        100,
        97,
        3,
        2,
    )
    assert (found["pool"], found["inflight_peak"], found["late"]) == (100, 4, 1)
    assert "by_name" not in found and "stale" not in found


def test_a_step_with_no_answer_has_no_latency_but_its_failures(tmp_path: Path) -> None:
    found = Summary.read(_write(tmp_path, {"read": _scenario(None, 5)})).step_figures("read")
    assert found is not None and found["p95"] is None and found["failed"] == 3
    record = StepRecord("read", "cache", "warm", 5, 1, summary=found)
    assert summary_result(record, None).latency is None


def test_a_mixed_steps_summary_gives_each_kind_and_the_checkers_reads(tmp_path: Path) -> None:
    by_name = {
        "count": {"requests": 900, "latency": _latency(2.0, 900)},
        "create": {"requests": 50, "latency": _latency(8.0, 50)},
        "delete": {"requests": 50, "latency": None},
    }
    checker = _scenario(5.0, 40, counters={"stale_checked": 36, "stale_reads": 2,
                                           "stale_check_errors": 1})  # fmt: skip
    path = _write(tmp_path, {"mixed": _scenario(3.0, 1000, by_name=by_name), "stale": checker})
    found = Summary.read(path).step_figures("mixed")
    assert found is not None
    assert found["by_name"] == {
        "count": {"p50": 1.0, "p95": 2.0, "p99": 4.0, "max": 8.0, "answered": 900, "requests": 900},
        "create": {
            "p50": 4.0,
            "p95": 8.0,
            "p99": 16.0,
            "max": 32.0,
            "answered": 50,
            "requests": 50,
        },
    }
    assert found["stale"] == {"reads": 36, "stale": 2, "errors": 1}
    record = StepRecord("mixed", "hybrid", "warm", 950, 10, pool=950,
                        summary=json.loads(json.dumps(found)))  # fmt: skip
    result = summary_result(record, None)
    assert result.by_name["create"] == Latency(4.0, 8.0, 16.0, 50)
    assert result.stale == StaleCounts(reads=36, stale=2, errors=1)
    assert result.from_due == Latency(1.5 * 3, 9.0, 18.0, 997)


def test_an_interference_step_keeps_the_compute_beside_its_reads(tmp_path: Path) -> None:
    scenarios = {"interference": _scenario(2.0, 500), "interference_compute": _scenario(90.0, 10)}
    found = Summary.read(_write(tmp_path, scenarios)).step_figures("interference")
    assert found is not None and found["compute"]["p95"] == 90.0
    record = StepRecord("interference", "go-bcrypt", "warm", 10, 1, read_rate=500, summary=found)
    beside = summary_result(record, None).compute
    assert beside is not None and beside.latency is not None and beside.latency.p95 == 90.0


def test_a_summary_of_another_schema_names_both_versions(tmp_path: Path) -> None:
    with pytest.raises(SummaryError, match="schema version 2, this bench reads version 1"):
        Summary.read(_write(tmp_path, {}, version=2))


def test_no_summary_is_an_empty_one(tmp_path: Path) -> None:
    assert Summary.read(tmp_path / "none.json").step_figures("read") is None
    (tmp_path / "bad.json").write_text("{")
    assert Summary.read(tmp_path / "bad.json").scenarios == {}


def test_a_summarys_key_trace_is_read_when_the_step_kept_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {"read": _scenario(2.0, 100)})
    assert Summary.read(path).key_trace is None  # schema 1 without the optional field
    data = json.loads(path.read_text())
    data["key_trace"] = {"path": "/r/keys.trace.gz", "lines": 100, "lost": 0}
    path.write_text(json.dumps(data))
    assert Summary.read(path).key_trace == KeyTrace(lines=100, lost=0)


def test_a_wait_retries_only_the_errors_it_is_told_are_not_ready() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("not up yet")

    assert wait_for(refused, 0.2, 0.01) is None  # a probe of a service coming up: not yet
    with pytest.raises(ConnectionRefusedError):
        wait_for(refused, 5, 0.01, not_ready=())  # the quiet wait's: an error is the answer
