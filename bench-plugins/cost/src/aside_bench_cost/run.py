"""What the load driver itself costs: its CPU per completed request at one rate beside a
plain net/http loop (`ENGINE=reference`), both against the core's /healthz, and its read
scenario on the warm cache arm. The variants take turns, so a drift lands in both."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

from aside_bench.load.run import LoadRun, step_run
from aside_bench.plan.steps import Step
from aside_bench.records.repeats import median
from aside_bench.records.results import StepResult
from aside_bench.records.runfile import RunRecord, save_figures, save_run
from aside_bench.report.doc import write_pages
from aside_bench.report.sweep import run_page
from aside_bench.report.tables import (
    MISSING,
    Column,
    Table,
    column_table,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_rps,
)
from aside_bench.sweep.runner import Runner

KIND = "cost"
DEFAULT_RATE = 2000
DEFAULT_DURATION = "20s"
DEFAULT_REPEAT = 2


@dataclass(frozen=True)
class Variant:
    name: str
    what: str
    target: str  # "core": the core's /healthz; "gateway": the read scenario on the gateway
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def scenario(self) -> str:
        return f"{KIND}-{self.name}"

    @property
    def arm_phase(self) -> tuple[str, str]:
        return ("healthz", "none") if self.target == "core" else ("cache", "warm")


VARIANTS = (
    Variant("driver", "aside-load: batched schedule, worker pool, fasthttp", "core"),
    Variant(
        "reference",
        "a plain net/http loop: a sleep and a goroutine per request",
        "core",
        {"ENGINE": "reference"},
    ),
    Variant("driver-read", "aside-load's read scenario, warm cache arm, checks on", "gateway"),
)
NAMES = tuple(variant.name for variant in VARIANTS)
DEFAULT_NAMES = ("driver", "reference")


class VariantError(ValueError):
    """An unknown variant name."""


def parse_variants(text: str | None) -> list[Variant]:
    """'driver reference' -> those variants in the table's order; none: the default two."""
    words = [word for word in re.split(r"[\s,]+", (text or "").strip()) if word]
    unknown = [word for word in words if word not in NAMES]
    if unknown:
        raise VariantError(f"unknown variant {unknown[0]!r}; choose from {', '.join(NAMES)}")
    chosen = words or DEFAULT_NAMES
    return [v for v in VARIANTS if v.name in chosen]


def variant_of(scenario: str) -> Variant | None:
    return next((v for v in VARIANTS if v.scenario == scenario), None)


def plan(variants: list[Variant], rate: int, duration_s: int, repeat: int) -> list[Step]:
    """Every variant once a round, `repeat` rounds."""
    return [
        Step(v.scenario, *v.arm_phase, rate, duration_s, repeat=round_)
        for round_ in range(1, repeat + 1)
        for v in variants
    ]


def variant_run(runner: Runner, variant: Variant, step: Step, pool: int) -> LoadRun:
    """The driver run of one variant's step."""
    options = runner.options
    if variant.target == "gateway":
        read = replace(step, scenario="read")  # the variant's arm and phase
        return step_run(read, options.run_id, options.shape, pool, options.data_dir)
    tagged = replace(step, arm=variant.name)
    return runner.healthz_run(tagged, pool, runner.settings.core_url, extra=dict(variant.extra))


def run_variants(runner: Runner, steps: list[Step]) -> None:
    for index, step in enumerate(steps, start=1):
        if runner.interrupted:
            return
        variant = variant_of(step.scenario)
        assert variant is not None
        head = f"[{index}/{len(steps)}] {KIND} {variant.name:<11} @ {step.rate:>5}/s"
        build = partial(variant_run, runner, variant)
        runner.step_with_progress(step, head, len(steps) - index, build)


# ---- the report -----------------------------------------------------------------------
def cpu_per_1000(result: StepResult) -> float | None:
    """The driver's CPU seconds per 1,000 completed requests (= ms per request)."""
    gen = result.loadgen
    return None if gen is None else gen.cpu_ms_per_request(result.iterations)


@dataclass(frozen=True)
class VariantCost:
    """A variant's cost, the median of its rounds, each kept (a row of run.json's "cost")."""

    variant: str
    what: str
    cpu_ms_per_request: float | None
    rounds: list[float | None]
    vs_reference: float | None
    cores: float | None
    achieved_rps: float | None
    p95_ms: float | None
    drop_rate: float | None


def figures(results: list[StepResult]) -> list[VariantCost]:
    """Each variant that ran, in the table's order."""
    by_name: dict[str, list[StepResult]] = {}
    for result in results:
        variant = variant_of(result.step.scenario)
        if variant is not None:
            by_name.setdefault(variant.name, []).append(result)
    reference = median([cpu_per_1000(r) for r in by_name.get("reference", [])])
    found = []
    for variant in VARIANTS:
        rounds = by_name.get(variant.name)
        if not rounds:
            continue
        costs = [cpu_per_1000(r) for r in rounds]
        cpu = median(costs)
        found.append(
            VariantCost(
                variant=variant.name,
                what=variant.what,
                cpu_ms_per_request=cpu,
                rounds=costs,
                vs_reference=cpu / reference if cpu is not None and reference else None,
                cores=median([r.loadgen.cpu_cores if r.loadgen else None for r in rounds]),
                achieved_rps=median([r.achieved_rps for r in rounds]),
                p95_ms=median([r.latency.p95 if r.latency else None for r in rounds]),
                drop_rate=median([r.drop_rate for r in rounds]),
            )
        )
    return found


def _ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


COLUMNS: tuple[Column[VariantCost], ...] = (
    ("variant", lambda row: row.variant),
    ("what", lambda row: row.what),
    ("CPU ms / request", lambda row: fmt_num(row.cpu_ms_per_request, 3)),
    ("each round", lambda row: " / ".join(fmt_num(cost, 3) for cost in row.rounds)),
    ("vs reference", lambda row: _ratio(row.vs_reference)),
    ("driver cores", lambda row: fmt_num(row.cores, 2)),
    ("achieved /s", lambda row: fmt_rps(row.achieved_rps)),
    ("p95 ms", lambda row: fmt_ms(row.p95_ms)),
    ("drops", lambda row: fmt_pct(row.drop_rate)),
)


def cost_table(rows: list[VariantCost], rate: int) -> Table:
    title = f"The load driver's own CPU per completed request at {rate}/s"
    return column_table(title, COLUMNS, rows)


DEFINITIONS = [
    "CPU ms / request: utime + stime of the driver's process from its start to its exit "
    "(/proc/<pid>/stat, read as it exits) over the requests it completed, the median of "
    "the rounds; start-up and the summary's writing are included, the same for every variant",
    "vs reference: that figure over the plain net/http loop's in the same run",
    "driver cores: its CPU over the step's duration; the driver shares the machine's cores "
    "with every service, so what it spends is CPU the services do not get",
    "achieved /s, p95, drops: from the driver's summary, as every step's",
]


def write_cost(run: RunRecord, results: list[StepResult], out_dir: Path) -> list[Table]:
    title = f"Aside driver cost {run.run_id}"
    rows = figures(results)
    run.extra[KIND] = [asdict(row) for row in rows]
    save_run(run, out_dir)
    save_figures(results, out_dir)
    doc = run_page(title, run, calibration=False)  # it measures the driver itself
    doc.p(
        "The load driver's own CPU per completed request at one rate, against a plain Go "
        "net/http open-model loop in the same run, both sending GET /healthz to the core "
        "(a trivial route of a Go server), the variants taking turns. The driver shares the "
        "machine's cores with the stack."
    )
    table = cost_table(rows, int(run.params["rate"]))
    doc.table(table)
    doc.h(2, "How the figures are computed")
    doc.ul(DEFINITIONS)
    write_pages(doc, out_dir / "report.md", out_dir / "report.html", title)
    return [table]
