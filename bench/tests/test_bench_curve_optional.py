"""The miss-ratio curve's simulator is an optional extra (libcachesim,
GPL-3.0-or-later): without it a sweep's report is still written, and says the
curve was not drawn and why, where the curve would have been."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from aside_bench.curve import simulate
from aside_bench.plan.steps import Step
from aside_bench.records.results import CacheCounts, Latency, RedisCounts, StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.report import sweep
from report_samples import sample_run, step_record

KEYS = [f"user{i % 40}@x" for i in range(400)]


def _not_installed() -> None:
    raise ImportError("No module named 'libcachesim'")


def _warm_cache_run(out_dir: Path) -> tuple[RunRecord, list[StepResult]]:
    """One warm step of the cache arm that recorded its keys: a run with a curve."""
    (out_dir / "keys.trace").write_text("\n".join(KEYS) + "\n")
    record = step_record(rate=100, duration_s=4, completed=True, key_trace="keys.trace")
    run = replace(sample_run(), run_id="curve-1", steps=[record])
    result = StepResult(
        step=Step("read", "cache", "warm", 100, 4),
        latency=Latency(1.0, 2.0, 3.0, 400),
        iterations=400,
        failed=0,
        dropped=0,
        cache=CacheCounts(hits=360, misses=40, bypass=0),
        redis=RedisCounts(keys=40, used_memory=2**20, evicted=0, expired=0),
    )
    return run, [result]


def test_without_the_simulator_a_curve_is_an_error_that_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simulate, "_libcachesim", _not_installed)
    with pytest.raises(simulate.CurveUnavailable, match="optional curve extra"):
        simulate.curve(simulate.Stream(KEYS), [10])


def test_the_report_says_the_curve_was_not_drawn_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulate, "_libcachesim", _not_installed)
    run, results = _warm_cache_run(tmp_path)
    curves, not_drawn = sweep.drawn_curves(run, results, tmp_path)
    assert curves == [] and not_drawn is not None
    assert not_drawn.startswith("The hit rate against cache size was not drawn: libcachesim")
    assert "GPL-3.0-or-later" in not_drawn and "No module named 'libcachesim'" in not_drawn
    sweep.write_sweep(run, results, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert f"> {not_drawn}" in markdown
    assert "## Hit rate against cache size" not in markdown
    assert "was not drawn" in (tmp_path / "report.html").read_text()


def test_with_the_simulator_the_same_run_has_its_curve(tmp_path: Path) -> None:
    pytest.importorskip("libcachesim")  # the lab installs it (uv sync): then this runs
    run, results = _warm_cache_run(tmp_path)
    curves, not_drawn = sweep.drawn_curves(run, results, tmp_path)
    assert not_drawn is None and [curve.rate for curve in curves] == [100]
