"""Merging the shards of a step (pure): each shard's counts add up and its
latency histogram adds to the others', so the percentiles are the step's,
not an average of the shards'."""

from __future__ import annotations

import pytest
from aside_bench_shards import merge as shards
from hdrh.histogram import HdrHistogram


def _encoded(values_ms: list[float]) -> str:
    histogram = HdrHistogram(1, 10_000_000, 3)
    for value in values_ms:
        histogram.record_value(int(value * 1000))
    return histogram.encode().decode()


def _point(values_ms: list[float], shard: str, rate: str = "100", **counts: int) -> dict:
    return {
        "scenario": "read", "arm": "cache", "phase": "warm", "rate": rate, "repeat": "1",
        "shard": shard, "target": 50.0, "due": len(values_ms), "started": len(values_ms),
        "dropped": 0, "failed": 0, "iterations": len(values_ms), "requests": len(values_ms),
        "hdr": _encoded(values_ms), "hdr_from_due": _encoded([v + 1 for v in values_ms]),
        **counts,
    }  # fmt: skip


def test_two_shards_merge_into_the_steps_percentiles() -> None:
    fast = [1.0] * 90  # one shard answered fast,
    slow = [100.0] * 10  # the other slowly: a tenth of the step was slow
    (step,) = shards.merge([_point(fast, "0"), _point(slow, "1", dropped=2, due=12)])
    assert step.shards == 2 and step.target == 100.0
    assert step.counts["due"] == 102 and step.counts["dropped"] == 2
    assert step.drop_rate == pytest.approx(2 / 102)
    assert step.p50 == pytest.approx(1.0, rel=0.01)
    # The merged p95 falls among the slow answers; no shard's own p95 says so.
    assert step.p95 == pytest.approx(100.0, rel=0.01)
    assert step.p95_from_due == pytest.approx(101.0, rel=0.01)


def test_steps_stay_apart_and_a_bad_histogram_is_named() -> None:
    merged = shards.merge([_point([1.0], "0", rate="200"), _point([2.0], "0", rate="100")])
    assert [step.key[3] for step in merged] == ["100", "200"]
    with pytest.raises(shards.ShardsError, match="latency histogram could not be read"):
        shards.merge([{**_point([1.0], "0"), "hdr": "not a histogram"}])
    table = shards.shards_table("r1", merged)
    assert table.rows[0][:5] == ["read", "cache", "warm", "50.0", "1"]


def test_a_step_missing_a_shard_is_refused_by_name_or_merged_flagged() -> None:
    sent = [{**_point([1.0], str(shard)), "shards": 4} for shard in (0, 1, 3)]
    with pytest.raises(shards.ShardsError, match=r"3 of its 4 shards .* missing shard 2 "):
        shards.merge(sent)
    (step,) = shards.merge(sent, partial=True)
    assert step.missing == (2,) and step.counts["due"] == 3
    assert shards.shards_table("r1", [step]).rows[0][4] == "3 of 4, PARTIAL: missing 2"
    with pytest.raises(shards.ShardsError, match="twice"):
        shards.merge([*sent, sent[0]], partial=True)


def test_the_spread_of_the_shards_starts_is_reported_and_flagged_past_its_bound() -> None:
    def step_of(starts_ms: list[int], rate: str = "100") -> list[dict]:
        return [
            {**_point([1.0], str(shard), rate=rate), "shards": len(starts_ms), "started_ms": at}
            for shard, at in enumerate(starts_ms)
        ]

    together, apart = (
        step_of([1795000000000, 1795000000004, 1795000000002]),
        step_of([1795000000000, 1795000002500, 1795000000300], rate="200"),
    )
    near, far = shards.merge([*together, *apart])
    assert near.start_spread_ms == 4.0 and not near.spread_too_wide
    assert far.start_spread_ms == 2500.0 and far.spread_too_wide
    rows = shards.shards_table("r1", [near, far]).rows
    assert rows[0][-1] == "4 ms"
    assert rows[1][-1] == "2500 ms, SPREAD: over 1000 ms"
    # The bound is the caller's; a point without started_ms (an older driver)
    # leaves the spread unknown, not zero.
    (loose,) = shards.merge(apart, spread_bound_ms=3000)
    assert not loose.spread_too_wide
    (unknown,) = shards.merge([{**apart[0], "started_ms": None}, *apart[1:]])
    assert unknown.start_spread_ms is None and not unknown.spread_too_wide
