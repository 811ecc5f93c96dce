"""The k6 layer without k6: the process wrapper on small shell commands, and the
summary reader on a made-up handleSummary file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aside_bench.k6run import ANSWERED, K6Process, K6Summary
from aside_bench.prepare import StackError


def log_tail(process: K6Process, lines: int = 5) -> str:
    """The last `lines` lines of the process's log."""
    try:
        text = process.log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def test_the_log_starts_with_the_command_and_the_exit_code_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "k6.log"
    process = K6Process(["sh", "-c", "echo said; exit 3"], log)
    assert process.run() == 3
    assert process.returncode == 3 and not process.running
    assert log.read_text().splitlines() == ["$ sh -c echo said; exit 3", "said"]
    assert log_tail(process, 1) == "said"


def test_the_environment_is_added_to_ours(tmp_path: Path) -> None:
    log = tmp_path / "k6.log"
    K6Process(["sh", "-c", 'echo "$GOGC"'], log, {"GOGC": "400"}).run()
    assert log.read_text().splitlines()[-1] == "400"


def test_the_first_point_of_a_metric_is_read_as_it_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    # k6 writes compact JSON, one object a line.
    compact = (",", ":")
    other = json.dumps({"type": "Point", "metric": "other", "data": {}}, separators=compact)
    data = {"tags": {"start": "5"}}
    point = json.dumps({"type": "Point", "metric": "chaos_req", "data": data}, separators=compact)
    script = f"echo '{other}' > {out}; sleep 0.2; echo '{point}' >> {out}; sleep 30"
    process = K6Process(["sh", "-c", script], tmp_path / "k6.log").start()
    try:
        assert process.first_point(out, "chaos_req", 10) == {"tags": {"start": "5"}}
        assert process.running
    finally:
        process.stop()
    assert not process.running


def test_no_point_before_k6_exits_is_an_error(tmp_path: Path) -> None:
    process = K6Process(["sh", "-c", "exit 2"], tmp_path / "k6.log").start()
    with pytest.raises(StackError, match="k6 exited with 2"):
        process.first_point(tmp_path / "out.json", "chaos_req", 10)


def test_the_first_sample_is_what_the_probe_finds_once_it_finds_it(tmp_path: Path) -> None:
    answers = iter([None, None, 1.5])
    process = K6Process(["sleep", "30"], tmp_path / "k6.log").start()
    try:
        assert process.first_sample(lambda: next(answers), "InfluxDB", 10, 0.01) == 1.5
        assert process.running
    finally:
        process.stop()


def test_no_sample_within_the_deadline_stops_k6(tmp_path: Path) -> None:
    process = K6Process(["sleep", "30"], tmp_path / "k6.log").start()
    with pytest.raises(StackError, match="wrote no sample to InfluxDB within 0 s"):
        process.first_sample(lambda: None, "InfluxDB", 0.3, 0.01)
    assert not process.running


def test_a_run_past_its_time_is_killed(tmp_path: Path) -> None:
    process = K6Process(["sleep", "30"], tmp_path / "k6.log").start()
    with pytest.raises(StackError, match="did not finish within 0 s"):
        process.wait(0.2)
    assert not process.running


def test_the_summary_gives_counters_trends_and_drops(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    metrics = {
        "chaos_req": {"type": "trend", "values": {"max": 9}},
        "chaos_count_2xx": {"type": "counter", "values": {"count": 12, "rate": 2}},
        "chaos_create_5xx": {"type": "counter", "values": {"count": 1}},
        "chaos_count_ms": {"type": "trend", "values": {"p(95)": 3.5, "max": 7}},
        "http_reqs": {"type": "counter", "values": {"count": 13}},
        "dropped_iterations": {"type": "counter", "values": {"count": 4}},
    }
    path.write_text(json.dumps({"metrics": metrics, "state": {}}))
    summary = K6Summary.read(path)
    assert summary.counts("chaos_") == {"count_2xx": 12, "create_5xx": 1}
    assert summary.values("chaos_", skip=("chaos_req",)) == {"count_ms": {"p(95)": 3.5, "max": 7}}
    assert summary.dropped_iterations == 4
    assert K6Summary.read(tmp_path / "none.json").metrics == {}
    (tmp_path / "bad.json").write_text("{")
    assert K6Summary.read(tmp_path / "bad.json").counts("chaos_") == {}


def _trend(p95: float) -> dict:
    return {"type": "trend", "values": {"med": p95 / 2, "p(95)": p95, "p(99)": p95 * 2}}


def _counter(count: int) -> dict:
    return {"type": "counter", "values": {"count": count}}


def _step_figures(tmp_path: Path, metrics: dict) -> dict | None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"metrics": metrics}))
    return K6Summary.read(path).step_figures()


def test_a_read_steps_summary_gives_the_answered_latency_and_failed_iterations(
    tmp_path: Path,
) -> None:
    # As from InfluxDB: a timed-out request is a failure, not a slow answer.
    metrics = {
        ANSWERED: _trend(2.0),
        "http_req_duration": _trend(900.0),
        "http_reqs": _counter(100),
        "http_req_failed": {"type": "rate", "values": {"passes": 1, "fails": 99}},
        "iterations": _counter(100),
        "failed_iterations": _counter(3),  # a wrong body fails an answered request too
    }
    found = _step_figures(tmp_path, metrics)
    assert found is not None
    assert (found["p50"], found["p95"], found["p99"]) == (1.0, 2.0, 4.0)
    assert (found["requests"], found["failed"], found["dropped"]) == (100, 3, 0)


def test_a_read_step_with_no_answer_has_no_latency_but_its_failures(tmp_path: Path) -> None:
    metrics = {
        "http_req_duration": _trend(10_000.0),
        "http_reqs": _counter(5),
        "iterations": _counter(5),
        "failed_iterations": _counter(5),
    }
    found = _step_figures(tmp_path, metrics)
    assert found is not None
    assert found["p95"] is None and found["failed"] == 5


def test_a_mixed_steps_summary_gives_each_kind_and_the_checkers_reads(tmp_path: Path) -> None:
    # mixed.js keeps its load's sub-metrics under the read script's names, its
    # kinds as http_req_duration{name:KIND} and the checker's counters.
    from aside_bench.collect import summary_result
    from aside_bench.results import Latency, StaleCounts

    count, create = _trend(2.0), _trend(8.0)
    count["values"]["count"], create["values"]["count"] = 900, 50
    metrics = {
        ANSWERED: _trend(3.0),
        "http_req_duration": _trend(3.0),
        "http_reqs": _counter(1000),
        "iterations": _counter(950),
        "failed_iterations": _counter(0),
        "http_req_duration{name:count}": count,
        "http_req_duration{name:create}": create,
        "stale_checked": _counter(36),
        "stale_reads": _counter(2),
        "stale_check_errors": _counter(1),
    }
    found = _step_figures(tmp_path, metrics)
    assert found is not None
    assert found["by_name"] == {
        "count": {"p50": 1.0, "p95": 2.0, "p99": 4.0, "requests": 900},
        "create": {"p50": 4.0, "p95": 8.0, "p99": 16.0, "requests": 50},
    }
    assert found["stale"] == {"reads": 36, "stale": 2, "errors": 1}
    record = {
        "scenario": "mixed", "arm": "hybrid", "phase": "warm", "rate": 950,
        "duration_s": 10, "vus": [30, 1000], "summary": json.loads(json.dumps(found)),
    }  # fmt: skip
    result = summary_result(record, None)
    assert result.by_name["create"] == Latency(4.0, 8.0, 16.0, 50)
    assert result.stale == StaleCounts(reads=36, stale=2, errors=1)


def test_a_read_steps_summary_has_no_kinds_and_no_checker(tmp_path: Path) -> None:
    metrics = {ANSWERED: _trend(2.0), "http_reqs": _counter(10), "iterations": _counter(10)}
    found = _step_figures(tmp_path, metrics)
    assert found is not None and "by_name" not in found and "stale" not in found
