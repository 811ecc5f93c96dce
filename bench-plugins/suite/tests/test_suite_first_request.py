"""The wait for a driver's first request, on small shell commands standing in for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aside_bench.load.run import DriverProcess
from aside_bench.stack.prepare import StackError
from aside_bench_suite.samples import first_request


def test_the_first_request_is_read_as_it_is_written(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    drop = json.dumps({"t": 1.0, "due": 1.0, "scenario": "read", "dropped": True})
    sent = json.dumps({"t": 5.5, "ms": 1.0, "status": 200, "ok": True})
    script = f"echo '{drop}' > {samples}; sleep 0.2; echo '{sent}' >> {samples}; sleep 30"
    process = DriverProcess(["sh", "-c", script], tmp_path / "load.log", {}).start()
    try:
        assert first_request(process, samples, 10)["t"] == 5.5
        assert process.running
    finally:
        process.stop()
    assert not process.running


def test_no_request_before_the_driver_exits_is_an_error(tmp_path: Path) -> None:
    process = DriverProcess(["sh", "-c", "exit 2"], tmp_path / "load.log", {}).start()
    with pytest.raises(StackError, match="the load driver exited with 2"):
        first_request(process, tmp_path / "samples.jsonl", 10)


def test_no_request_within_the_deadline_stops_the_driver(tmp_path: Path) -> None:
    process = DriverProcess(["sleep", "30"], tmp_path / "load.log", {}).start()
    with pytest.raises(StackError, match=r"wrote no request to samples\.jsonl within 0 s"):
        first_request(process, tmp_path / "samples.jsonl", 0.3)
    assert not process.running
