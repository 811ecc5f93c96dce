"""The expiry scenario's plan and its report's windows (pure: no service)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from aside_bench_expiry import plan as plan
from aside_bench_expiry import report
from aside_bench_expiry.plan import ArmRun, Reading


def test_arms_parse_unindexed_first_and_default_to_every_mode_both_ways() -> None:
    arms = plan.parse_arms("swr+index plain nocache plain")
    assert [a.label for a in arms] == ["plain", "nocache", "swr+index"]
    assert arms[1].cache == "off" and arms[0].cache == "l2"
    labels = [a.label for a in plan.parse_arms(None)]
    assert labels[:5] == ["nocache", "plain", "jitter", "early", "swr"]
    assert labels[5:] == [f"{name}+index" for name in labels[:5]]
    with pytest.raises(plan.ExpiryPlanError, match="unknown expiry arm 'lru'"):
        plan.parse_arms("lru")


def test_windows_hold_the_expiry_and_a_steady_stretch_after_the_fill() -> None:
    windows = plan.windows_for(20)
    assert (windows.steady, windows.expiry) == ((-13, -3), (-3, 7))
    # The steady window starts at least 3 s after the fill, for any TTL allowed.
    for ttl in range(plan.MIN_TTL_S, 120):
        found = plan.windows_for(ttl)
        assert ttl + found.steady[0] >= 3 and found.width_s >= 1
        assert found.steady[1] == found.expiry[0] <= 0 < found.expiry[1]
    with pytest.raises(plan.ExpiryPlanError):
        plan.windows_for(plan.MIN_TTL_S - 1)


def test_the_load_runs_past_the_expiry_window_and_the_gateway_gets_the_mode() -> None:
    cached = plan.Arm("swr", indexed=False)
    assert plan.load_seconds(cached, 20, since_fill_s=1.5) == 27  # 20 + 7 + 1 - 1.5, up
    assert plan.load_seconds(plan.Arm(None, indexed=True), 20, 1.5) == plan.NOCACHE_S
    env = plan.gateway_env(cached, 20)
    assert env["CACHE_EXPIRY"] == "swr" and env["CACHE_TTL_SECONDS"] == "20"
    assert plan.gateway_env(plan.Arm(None, indexed=False), 20) == {}


def _run_folder(tmp_path: Path, spike_ms: float) -> Path:
    """A plain arm at 10/s whose requests in [E, E+1) take spike_ms, and 40 scans then."""
    expiry_at = 1_000_000.0
    lines = []
    for tenth in range(-150, 80):
        t = expiry_at + tenth / 10
        ms = spike_ms if 0 <= tenth < 10 else 1.0
        lines.append(json.dumps({"t": t, "ms": ms, "ok": True, "status": 200}))
    (tmp_path / "samples-001.jsonl").write_text("\n".join(lines) + "\n")
    readings = [
        Reading(expiry_at + s, 4000 if s >= 1 else 0, 0.0, 0.0, 0.0, None, table_rows=100.0)
        for s in range(-16, 9)
    ]
    arm = ArmRun("plain", "plain", False, 10, expiry_at, fill={"keys": 300, "fill_s": 0.4},
                 samples="samples-001.jsonl", readings=readings)  # fmt: skip
    params = {"run_id": "t", "rates": [10], "ttl_s": 20, "hot_count": 100, "cold_sample": 200,
              "hot_share": 0.9, "windows": asdict(plan.windows_for(20))}  # fmt: skip
    record = {"params": params, "arms": [asdict(arm)]}
    (tmp_path / "run.json").write_text(json.dumps(record))
    return tmp_path


def test_the_report_finds_the_spike_in_the_expiry_window(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, spike_ms=200.0)
    one = report.arm_figures(report.load_run(folder)[1][0], folder, plan.windows_for(20))
    assert one.found
    assert one.steady.p99 == 1.0 and one.expiry.p99 == 200.0 and one.ratio == 200.0
    assert (one.steady.scans, one.expiry.scans) == (0, 40)
    assert one.seconds[0].p99 == 200.0 and one.seconds[-1].p99 == 1.0
    assert not one.meets_goal
    text = report.write_report(folder).read_text()
    assert "the expiry with plain costs p99 200 ms against 1.00 ms (200.0x)" in text
    assert "## Windows and seconds" in text and (folder / "expiry.png").exists()


def test_a_flat_expiry_meets_the_goal(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, spike_ms=2.0)
    one = report.arm_figures(report.load_run(folder)[1][0], folder, plan.windows_for(20))
    assert one.ratio == 2.0 and one.meets_goal
