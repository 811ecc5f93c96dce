"""What k6's own telemetry costs: the warm cache arm at one fixed rate under
each telemetry variant, from the bare script (scripts/bare.js: the read's
requests alone, no output) through its checks, tags, custom metric and
InfluxDB output, to the read script as the bench runs it (no output) and
with every sample to InfluxDB. Per variant: k6's
CPU seconds per 1,000 requests (its utime + stime, /proc/<pid>/stat, as every
step records it), the gateway's CPU per request (the step's probe), the
achieved rate and p95.

The variants and their k6 runs are pure and unit-tested; `run_variants` drives
them with the bench's runner, one step each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .doc import Doc, write_pages
from .k6run import BARE_SCRIPT, K6Run, step_run
from .plan import Step
from .report import context, save_figures, save_run
from .results import StepResult
from .tables import MISSING, Table, fmt_ms, fmt_pct, fmt_rps

if TYPE_CHECKING:
    from .runner import RunBuilder, Runner

KIND = "k6cost"
ARM = "cache"
PHASE = "warm"
DEFAULT_RATE = 1000
DEFAULT_DURATION = "10s"
# bare.js's switches (1: on), each a piece of the read script's telemetry.
SWITCHES = ("CHECKS", "TAGS", "METRICS")
ALL_ON = dict.fromkeys(SWITCHES, "1")


@dataclass(frozen=True)
class Variant:
    name: str
    adds: str  # what it adds to the variant before it
    switches: dict[str, str] = field(default_factory=dict)
    influx: bool = False  # --out influxdb
    script: str = BARE_SCRIPT

    @property
    def scenario(self) -> str:
        """The step's scenario, so its samples (when it has an output) stay apart."""
        return f"{KIND}-{self.name}"


# Each adds one piece of telemetry to the one before it; the last is the bench's own.
VARIANTS = (
    Variant("bare", "the read's requests alone: no check, custom metric, tag or output"),
    Variant("checks", "+ a k6 check of each answer (a checks sample each)", {"CHECKS": "1"}),
    Variant(
        "tags",
        "+ the step's tags and system tags on every sample",
        {"CHECKS": "1", "TAGS": "1"},
    ),
    Variant("metrics", "+ the failed_iterations counter", ALL_ON),
    Variant("influxdb", "+ --out influxdb", ALL_ON, influx=True),
    Variant(
        "read",
        "read.js as the bench runs it: tags, failed_iterations, no check, no output",
        script="read.js",
    ),
    Variant(
        "read-influx",
        "read.js with every sample to InfluxDB (SAMPLES=influx)",
        influx=True,
        script="read.js",
    ),
)
NAMES = tuple(variant.name for variant in VARIANTS)


class VariantError(ValueError):
    """An unknown variant name."""


def parse_variants(text: str | None) -> list[Variant]:
    """'bare read' -> those variants in the table's order; None or '': all."""
    words = [word for word in re.split(r"[\s,]+", (text or "").strip()) if word]
    unknown = [word for word in words if word not in NAMES]
    if unknown:
        raise VariantError(f"unknown variant {unknown[0]!r}; choose from {', '.join(NAMES)}")
    return [v for v in VARIANTS if not words or v.name in words]


def variant_of(scenario: str) -> Variant | None:
    return next((v for v in VARIANTS if v.scenario == scenario), None)


def variant_step(variant: Variant, rate: int, duration_s: int) -> Step:
    return Step(variant.scenario, ARM, PHASE, rate, duration_s)


def variant_run(base: K6Run, variant: Variant, influx_url: str) -> K6Run:
    """The warm cache arm's k6 run (`base`, as the ceiling runs it) turned
    into `variant`'s: its script, switches and output."""
    bare = variant.script == BARE_SCRIPT
    switches = (dict.fromkeys(SWITCHES, "0") | variant.switches) if bare else {}
    return replace(
        base,
        script=variant.script,
        scenario=variant.scenario,
        extra={**base.extra, **switches},
        out=f"influxdb={influx_url}" if variant.influx else None,
        # Without an output the figures come from the summary: handleSummary needs it on.
        console_summary=not variant.influx,
    )


def _builder(runner: Runner, variant: Variant) -> RunBuilder:
    def build(step: Step, vus: tuple[int, int], dashboard: dict[str, str]) -> K6Run:
        options = runner.options
        base = step_run(
            runner.settings,
            replace(step, scenario="ceiling"),
            options.run_id,
            options.shape,
            vus,
            options.data_dir,
            options.max_vus,
            dashboard,
        )
        return variant_run(base, variant, runner.settings.influx_url)

    return build


def run_variants(runner: Runner, variants: list[Variant], rate: int, duration_s: int) -> None:
    """One step per variant, each from a freshly warmed cache."""
    for index, variant in enumerate(variants, start=1):
        if runner.interrupted:
            return
        step = variant_step(variant, rate, duration_s)
        head = f"[{index}/{len(variants)}] {KIND} {variant.name:<8} @ {rate:>5}/s"
        runner.step_with_progress(step, head, len(variants) - index, _builder(runner, variant))


# ---- the report -----------------------------------------------------------------------
def k6_cpu_per_1000(result: StepResult) -> float | None:
    """k6's CPU seconds per 1,000 requests (= ms per request)."""
    gen = result.loadgen
    return None if gen is None else gen.cpu_ms_per_request(result.iterations)


def _num(value: float | None, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def figures(results: list[StepResult]) -> list[dict[str, Any]]:
    """One dict per variant that ran, in the table's order (run.json's "k6cost")."""
    by_name = {}
    for result in results:
        variant = variant_of(result.step.scenario)
        if variant is not None:
            by_name[variant.name] = result
    bare = by_name.get("bare")
    base = None if bare is None else k6_cpu_per_1000(bare)
    found = []
    for variant in VARIANTS:
        result = by_name.get(variant.name)
        if result is None:
            continue
        cpu = k6_cpu_per_1000(result)
        gen, cost, latency = result.loadgen, result.cost, result.latency
        found.append(
            {
                "variant": variant.name,
                "adds": variant.adds,
                "k6_cpu_s_per_1000": cpu,
                "vs_bare": cpu / base if cpu is not None and base else None,
                "k6_cores": None if gen is None else gen.cpu_cores,
                "gateway_cpu_ms_per_request": None if cost is None else cost.cpu_ms_per_request,
                "achieved_rps": result.achieved_rps,
                "p95_ms": None if latency is None else latency.p95,
                "drop_rate": result.drop_rate,
            }
        )
    return found


HEADERS = [
    "variant",
    "adds",
    "k6 CPU s / 1,000 req",
    "vs bare",
    "k6 cores",
    "gateway CPU ms/req",
    "achieved /s",
    "p95 ms",
    "drops",
]


def cost_table(rows: list[dict[str, Any]], rate: int) -> Table:
    return Table(
        f"k6's cost per request by telemetry, warm cache arm at {rate}/s",
        HEADERS,
        [
            [
                row["variant"],
                row["adds"],
                _num(row["k6_cpu_s_per_1000"]),
                MISSING if row["vs_bare"] is None else f"{row['vs_bare']:.2f}x",
                _num(row["k6_cores"], 2),
                _num(row["gateway_cpu_ms_per_request"]),
                fmt_rps(row["achieved_rps"]),
                fmt_ms(row["p95_ms"]),
                fmt_pct(row["drop_rate"]),
            ]
            for row in rows
        ],
    )


DEFINITIONS = [
    "k6 CPU s / 1,000 req: utime + stime of the k6 process from its start to its exit "
    "(/proc/<pid>/stat, read as it exits) per 1,000 requests started; it includes k6's "
    "start-up and its final flush, the same for every variant",
    "vs bare: that figure over the bare variant's",
    "gateway CPU ms/req: the gateway's process tree's CPU over the step per request it answered",
    "achieved /s, p95, drops: from k6's end-of-test summary where the variant has no "
    "output, from InfluxDB where it has, as the bench reads them (every request's latency "
    "where no failed_iterations counter tags the answered ones)",
]


def write_k6cost(run: dict[str, Any], results: list[StepResult], out_dir: Path) -> list[Table]:
    title = f"Aside k6 cost {run['run_id']}"
    rows = figures(results)
    run[KIND] = rows
    save_run(run, out_dir)
    save_figures(results, out_dir)
    doc = Doc()
    doc.h(1, title)
    context(doc, run)
    doc.p(
        "The warm cache arm at one rate under each telemetry variant, each adding one piece "
        "of the read script's telemetry to the one before it. k6 shares the machine's cores "
        "with the stack: what it spends per request is CPU the gateway does not get."
    )
    table = cost_table(rows, int(run["params"]["rate"]))
    doc.table(table)
    doc.h(2, "How the figures are computed")
    doc.ul(DEFINITIONS)
    write_pages(doc, out_dir / "report.md", out_dir / "report.html", title)
    return [table]
