"""`aside-bench shards`: a run sent by several drivers, its shards merged from InfluxDB."""

from __future__ import annotations

import argparse

from aside_bench.cli.options import Command, UsageError
from aside_bench.stack import config
from aside_bench.stack.sources import Influx

from aside_bench_shards import merge as shards


def add(merged: argparse.ArgumentParser) -> None:
    merged.add_argument("--run", required=True, help="the run id the drivers were given")
    merged.add_argument(
        "--partial", action="store_true", help="merge a step missing shards anyway, flagged"
    )
    merged.add_argument(
        "--start-spread-ms",
        type=float,
        default=shards.START_SPREAD_MS,
        help="flag a step whose shards began more than this apart (default %(default)s)",
    )


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Every step of a run sent by several drivers, their shards merged."""
    influx = Influx(settings.influx_base, settings.influx_db)
    try:
        points = shards.read_points(influx, args.run)
        merged = shards.merge(points, args.partial, args.start_spread_ms)
    except shards.ShardsError as error:
        raise UsageError(f"run {args.run}: {error}") from None
    if not merged:
        raise UsageError(f"run {args.run}: no step point in InfluxDB ({shards.MEASUREMENT})")
    print(shards.shards_table(args.run, merged).markdown())
    if any(step.missing for step in merged):
        print(f"aside-bench: run {args.run}: PARTIAL, a step misses shards (see the table)")
    for step in merged:
        if step.spread_too_wide:
            print(
                f"aside-bench: run {args.run}: SPREAD, {' '.join(step.key[:3])} @ {step.key[3]}/s:"
                f" its shards began {step.start_spread_ms:.0f} ms apart, over"
                f" {args.start_spread_ms:.0f} ms; its merged rate ramped (give them one START_AT)"
            )
    return 0


COMMANDS = (
    Command(
        "shards",
        "a run sent by several drivers (the chart's Indexed Job), merged from InfluxDB",
        add,
        run,
    ),
)
