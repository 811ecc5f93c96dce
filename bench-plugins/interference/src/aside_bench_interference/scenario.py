"""The interference scenario as the core's registry holds it."""

from __future__ import annotations

import argparse

from aside_bench.cli import options as opt
from aside_bench.cli.runner_commands import shape_default
from aside_bench.plan import compute
from aside_bench.plan.scenarios import Hooks, Scenario, popularity
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step, pool_for

from aside_bench_interference import plan, report


def _add_options(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group("interference (--scenario interference, rates 0 allowed)")
    for flag, name, what in (
        ("--read-rate", "read_rate", "cached reads/s beside the compute"),
        ("--pbkdf2-iterations", "pbkdf2_iterations", "pbkdf2 arms' iterations"),
        ("--bcrypt-cost", "bcrypt_cost", "bcrypt arms' cost"),
    ):
        opt.option(group, flag, opt.positive, shape_default(name), what)


def _check(args: argparse.Namespace) -> None:
    with opt.usage_errors(compute.ComputeError):
        plan.check_work(args.pbkdf2_iterations, args.bcrypt_cost)


def _variables(step: Step, shape: LoadShape, max_pool: int) -> dict[str, str]:
    work = (shape.complexity, shape.pbkdf2_iterations, shape.bcrypt_cost)
    read_pool = pool_for(step.read_rate, max_pool)
    found = plan.driver_variables(step.arm, step.read_rate, read_pool, work)
    return {**found, **popularity(shape, step.read_rate)}


SCENARIO = Scenario(
    plan.SCENARIO,
    plan.ARMS,
    plan.DEFAULT_ARMS,
    plan.DEFAULT_RATES,
    _variables,
    lowest_rate=0,
    trace=True,
    phase=plan.PHASE,
    read_rate=True,
    beside=plan.COMPUTE_SCENARIO,
    hooks=Hooks(
        add_options=_add_options,
        check=_check,
        run_params=lambda _args, shape, *_: report.run_params(shape),
        writer=lambda settings: report.write_interference,
    ),
)
