"""The report's cost table: per series and rate, the CPU each service spent
per request, the memory held and the priced cost per million requests
(records/prices.py), and that cost as a price of the service only where the step
held the goal (records/goal.py): elsewhere what the step served instead."""

from __future__ import annotations

from typing import Any

from aside_bench.plan.steps import series_label
from aside_bench.records.goal import Goal, missed_words
from aside_bench.records.prices import Prices, step_spend
from aside_bench.records.results import StepResult
from aside_bench.report.tables import Table, series_of, series_order
from aside_bench.stack.config import Settings

# An uncached arm's Redis cell: it reads no cache, so no Redis is costed.
NO_REDIS = "no Redis"


def run_prices(params: dict[str, Any]) -> Prices:
    """The prices a run was made with (run.json), or the defaults for a run without."""
    found = params.get("prices") or {}
    return Prices(
        float(found.get("vcpu_hour", Settings.price_vcpu_hour)),
        float(found.get("gib_hour", Settings.price_gib_hour)),
    )


def cost_table(results: list[StepResult], prices: Prices, goal: Goal) -> Table | None:
    rows = []
    for arm, phase in series_order(results):
        for result in series_of(results, arm, phase):
            spend = step_spend(result)
            if spend is None:
                continue
            rows.append(
                [
                    series_label(arm, phase),
                    f"{result.step.rate:,}",
                    f"{spend.gateway_cpu_ms:.2f}",
                    f"{spend.postgres_cpu_ms:.2f}",
                    f"{spend.redis_cpu_ms:.2f}" if result.redis is not None else NO_REDIS,
                    f"{spend.memory_mib:.0f}",
                    f"{spend.cpu_per_million(prices):.3f}",
                    f"{spend.memory_per_million(prices):.3f}",
                    f"{spend.per_million(prices):.3f}",
                    f"{spend.per_million(prices):.3f}"
                    if goal.held(result)
                    else missed_words(result),
                ]
            )
    if not rows:
        return None
    return Table(
        f"cost per million requests ({prices.words()}); a price of the service only where "
        f"the step held the goal ({goal.words()})",
        [
            "series",
            "target /s",
            "gateway CPU ms/req",
            "PostgreSQL CPU ms/req",
            "Redis CPU ms/req",
            "memory MiB",
            "CPU $/M",
            "memory $/M",
            "total $/M served",
            "price $/M at the goal",
        ],
        rows,
    )
