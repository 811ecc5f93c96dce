"""`report` (a run's report rebuilt from run.json and Prometheus) and `compare` (two runs)."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from pathlib import Path

from aside_bench.ceiling import report as ceiling_report
from aside_bench.cli import options as opt
from aside_bench.cli import runner_commands
from aside_bench.cli.options import Command, UsageError
from aside_bench.compare import machines
from aside_bench.compare import page as comparepage
from aside_bench.compare import steps as compare
from aside_bench.compare.steps import DEFAULT_TOLERANCE
from aside_bench.load import meter
from aside_bench.plan.steps import words
from aside_bench.records import runfile
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.stack import config, influxpoints
from aside_bench.stack.sources import Influx, Prometheus
from aside_bench.sweep.collect import collect


def add_run_choice(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", default="", help="the run id (a folder of reports/)")
    opt.reports_dir(parser)


def run_report(args: argparse.Namespace, settings: config.Settings) -> int:
    out_dir = opt.known_run(args.reports_dir or settings.default_reports_dir, args.run, "report")
    run = opt.read_run(out_dir)
    prom = Prometheus(settings.prometheus_url)
    results = collect(prom, run.steps)
    for table in _writer(run.kind, run.params.get("scenario"), settings)(run, results, out_dir):
        print(table.markdown())
    print(f"report: {out_dir}/")
    if (out_dir / influxpoints.SPOOL_DIR).is_dir():
        sent = influxpoints.resend(Influx(settings.influx_base, settings.influx_db), out_dir)
        print(f"InfluxDB: {sent.points} spooled points from {sent.files} files sent")
    return 0


# Plug-ins' runs of their own kind register their report writers here (the
# entry's name is the kind: `cost`).
REPORT_WRITERS = "aside_bench.reports"


def _writer(kind: str, scenario: str | None, settings: config.Settings) -> runner_commands.Writer:
    """The report of a run: the ceiling's, a plug-in's for its own kind, else its sweep's."""
    if kind == "ceiling":
        return ceiling_report.write_ceiling
    for entry in entry_points(group=REPORT_WRITERS, name=kind):
        return entry.load()
    return runner_commands.sweep_writer(scenario, settings)


COMPARE_FLAGS = {
    "--normalise": "compare runs of machines more than 1.25x apart, B put on A's machine "
    "(runs without the driver's CPU per step: by the ratio of their calibrations)",
    "--ignore-calibration": "compare even when nothing measured a run's machine (no driver CPU "
    "per step and CALIBRATE=0) or the two differ",
    "--as-measured": "judge B's figures as measured, not put on A's machine step by step",
}


def add_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_a",
        help="the baseline: a run id (a folder of reports/), or several ('r1,r2' or "
        "'r1 r2') whose repeats pool, so the drift between them counts as noise",
    )
    parser.add_argument("run_b", help="the run compared with it (or several, as for run_a)")
    for flag, what in COMPARE_FLAGS.items():
        parser.add_argument(flag, action="store_true", help=what)
    what = "relative change flagged between runs without repeats"
    opt.option(parser, "--tolerance", opt.share, DEFAULT_TOLERANCE, what)
    opt.reports_dir(parser)


def _figures(settings: config.Settings, run: RunRecord, out_dir: Path) -> list[runfile.StepFigures]:
    """A run's per-step figures: its results.json, else its run.json and Prometheus."""
    saved = runfile.load_figures(out_dir)
    if saved is not None:
        return saved
    prom = Prometheus(settings.prometheus_url)
    return [runfile.StepFigures.of(r) for r in collect(prom, run.steps)]


def _side(
    settings: config.Settings, reports_dir: Path, given: str
) -> tuple[RunRecord, list[runfile.StepFigures], list[StepResult]]:
    """One side of a compare: its run (several: a baseline), their figures and steps."""
    dirs = [reports_dir / run_id for run_id in words(given)]  # 'r1', 'r1,r2' or 'r1 r2'
    if not dirs:
        raise UsageError("compare: a side names no run")
    runs = [opt.read_run(out_dir) for out_dir in dirs]
    pairs = zip(runs, dirs, strict=True)
    figures = [one for run, out_dir in pairs for one in _figures(settings, run, out_dir)]
    results = [result for run in runs for result in comparepage.run_results(run)]
    return compare.baseline(runs), figures, results


def run_compare(args: argparse.Namespace, settings: config.Settings) -> int:
    reports = args.reports_dir or settings.default_reports_dir
    run_a, figures_a, results_a = _side(settings, reports, args.run_a)
    run_b, figures_b, results_b = _side(settings, reports, args.run_b)
    with opt.usage_errors(machines.CompareError):
        speeds = meter.step_speeds(figures_a, figures_b)
        scale = machines.machine_scale(
            run_a, run_b, args.normalise, args.ignore_calibration, speeds, args.as_measured
        )
    rows = compare.compare(figures_a, figures_b, scale, args.tolerance)
    if not rows:
        raise UsageError(f"{args.run_a} and {args.run_b} share no step (arm, rate, phase)")
    out_dir = reports / f"compare-{run_a.run_id}-{run_b.run_id}"
    table = compare.write(run_a, run_b, rows, scale, args.tolerance, out_dir)
    sides = comparepage.Sides(run_a, run_b, results_a, results_b)
    page = comparepage.write_page(sides, rows, scale, args.tolerance, out_dir)
    print(table)
    print(f"compare: {out_dir}/ (the page: {page})")
    return 0


REPORT_HELP = "rebuild reports/<run>/ from run.json and Prometheus"
REPORT = Command("report", REPORT_HELP, add_run_choice, run_report)
COMPARE = Command("compare", "every step two runs share, side by side", add_compare, run_compare)
