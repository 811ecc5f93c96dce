"""The tracks scenario as the core's registry holds it."""

from __future__ import annotations

import argparse

from aside_bench.plan.scenarios import Hooks, Scenario
from aside_bench.plan.shape import LoadShape
from aside_bench.stack.config import Settings
from aside_bench.stack.seeddata import SeedData

from aside_bench_tracks import plan
from aside_bench_tracks import run as tracks


def _run_params(
    args: argparse.Namespace, shape: LoadShape, settings: Settings, seed: SeedData
) -> dict[str, tracks.TracksSummary]:
    return {"tracks": tracks.check_tracks(settings, seed.data_dir)}


SCENARIO = Scenario(
    plan.SCENARIO,
    plan.ARMS,
    plan.DEFAULT_ARMS,
    plan.DEFAULT_RATES,
    lambda step, shape, max_pool: plan.driver_variables(step.arm),
    tiered=plan.CACHE_ARMS,
    hooks=Hooks(run_params=_run_params, prepare=tracks.warm_tracks, writer=tracks.writer),
)
