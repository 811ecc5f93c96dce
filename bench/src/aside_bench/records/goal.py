"""The service goal a price needs (docs/decisions/071-prices-compared-at-equal-service.md)."""

from __future__ import annotations

from dataclasses import dataclass

from aside_bench.records.results import StepResult

# The p95 limit a sweep's step is judged by, as the ceiling's default.
GOAL_P95_MS = 10.0
# One in a thousand (99.9% success): a lone timeout is no miss, a shed step is.
DROP_TOLERANCE = 0.001


@dataclass(frozen=True)
class Goal:
    """p95 within `p95_ms`, dropped or failed within `drop_tolerance` of the scheduled."""

    p95_ms: float = GOAL_P95_MS
    drop_tolerance: float = DROP_TOLERANCE

    def held(self, result: StepResult) -> bool:
        latency = result.latency
        held = latency is not None and latency.p95 <= self.p95_ms
        return held and result.drop_rate <= self.drop_tolerance

    def words(self) -> str:
        """The goal as the report states it."""
        return (
            f"p95 <= {self.p95_ms:g} ms with at most {self.drop_tolerance:.1%} of the "
            "requests dropped or failed"
        )


def served_words(result: StepResult) -> str:
    """What a step served of what it was asked: "served 208/s of 1,000"."""
    return f"served {result.achieved_rps:,.0f}/s of {result.step.rate:,}"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def missed_words(result: StepResult) -> str:
    """A missed step's cell: what it served and its p95."""
    p95 = "no answer" if result.latency is None else f"p95 {_ms(result.latency.p95)} ms"
    return f"missed: {served_words(result)}, {p95}"
