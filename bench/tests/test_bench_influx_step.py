"""The step's point in InfluxDB (pure): line protocol, the fields the
dashboard reads (a point that cannot be written: test_bench_influxpoints.py)."""

from __future__ import annotations

import re

import pytest
from aside_bench.plan.steps import Step
from aside_bench.records.results import CacheCounts, Latency, StepResult
from aside_bench.records.saturation import LoadGen
from aside_bench.sweep import collect
from report_samples import step_record


def _result() -> StepResult:
    return StepResult(
        step=Step("read", "cache", "warm", 100, 10, repeat=2),
        latency=Latency(0.5, 1.5, 3.0, 990),
        iterations=1000,
        failed=10,
        dropped=0,
        cache=CacheCounts(hits=900, misses=100, bypass=0),
        loadgen=LoadGen(0.5, 10, 0.8, 100, 100, 3),
        from_due=Latency(0.6, 2.0, 4.0, 990),
    )


RECORD = step_record(end=1764080000.5, summary={"requests": 1000, "max": 9.0})


def test_a_step_is_one_line_of_its_tags_and_figures() -> None:
    line = collect.step_line("run 1,a=b", _result(), RECORD)
    # Three parts split at the spaces that are not escaped.
    head, fields, stamp = re.split(r"(?<!\\) ", line)
    # Tags sorted; spaces, commas and equals in a value escaped.
    assert (
        head
        == "bench_step,arm=cache,phase=warm,rate=100,repeat=2,run_id=run\\ 1\\,a\\=b,scenario=read"
    )
    assert stamp == "1764080000500"
    values = dict(pair.split("=") for pair in fields.split(","))
    assert float(values["p95"]) == 1.5 and float(values["p95_from_due"]) == 2.0
    assert float(values["hit_rate"]) == pytest.approx(0.9)
    assert float(values["drop_rate"]) == pytest.approx(0.01)
    assert float(values["driver_cpu_ms"]) == pytest.approx(0.5)
    assert float(values["max"]) == 9.0
    assert "gateway_cpu_ms" not in values  # no probe: left out, InfluxDB has no null


def test_the_dashboard_reads_only_fields_the_bench_writes() -> None:
    written = set(collect.step_fields(_result(), RECORD))
    from test_bench_dashboard import STEP_FIELDS

    assert written >= STEP_FIELDS


def test_a_point_without_a_field_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        collect.line("m", {}, {"a": None}, 0)
