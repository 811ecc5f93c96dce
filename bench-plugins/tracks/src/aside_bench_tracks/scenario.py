"""The tracks scenario as the core's registry holds it."""

from __future__ import annotations

import argparse

from aside_bench.plan.scenarios import Hooks, Scenario
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step
from aside_bench.stack.config import Settings
from aside_bench.stack.seeddata import SeedData

from aside_bench_tracks import plan
from aside_bench_tracks import run as tracks


def _variables(step: Step, shape: LoadShape, max_pool: int) -> dict[str, str]:
    return {"ARM_QUERY": plan.query(step.arm), "SIZE_BOUNDS": ",".join(map(str, plan.SIZE_BOUNDS))}


def _run_params(
    args: argparse.Namespace, shape: LoadShape, settings: Settings, seed: SeedData
) -> dict[str, tracks.TracksSummary]:
    return {"tracks": tracks.check_tracks(settings, seed.data_dir)}


SCENARIO = Scenario(
    plan.SCENARIO,
    plan.ARMS,
    plan.DEFAULT_ARMS,
    plan.DEFAULT_RATES,
    _variables,
    tiered=plan.CACHE_ARMS,
    hooks=Hooks(run_params=_run_params, prepare=tracks.warm_tracks, writer=tracks.writer),
)
