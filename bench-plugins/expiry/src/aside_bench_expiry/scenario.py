"""The expiry scenario as the core's registry holds it: one that runs its own steps."""

from __future__ import annotations

from aside_bench.plan.scenarios import Hooks, Scenario

from aside_bench_expiry import command, plan

SCENARIO = Scenario(
    plan.SCENARIO,
    plan.DEFAULT_ARMS,
    plan.DEFAULT_ARMS,
    plan.DEFAULT_RATES,
    lambda step, shape, max_pool: {},
    hooks=Hooks(run=command.run),
)
