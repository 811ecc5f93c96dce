"""Whether two runs' machines measure alike, and B put on A's machine (decision 040). Pure."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from aside_bench.records.calibration import base_latency, capped, rate_of
from aside_bench.records.runfile import RunRecord, StepKey

# Runs whose machine calibrations differ by more than this are not compared as they are.
MACHINE_RATIO_LIMIT = 1.25
# Base latencies (records.calibration.base_latency) further apart than this get a warning line.
BASE_LATENCY_WARNING = 0.15
# The figures the machine's speed moves (latencies); rates and shares it does not.
LATENCIES = frozenset({"p50", "p95", "p99"})


class CompareError(ValueError):
    """Two runs cannot be compared as asked; the message says why."""


@dataclass(frozen=True)
class Scale:
    """How fast B's machine measured against A's, and how B's figures are put beside A's."""

    rate_a: int | None  # the machines' calibrations (the driver + the core's /healthz)
    rate_b: int | None
    normalised: bool  # machines further apart than MACHINE_RATIO_LIMIT compared anyway
    steps: dict[StepKey, float] = field(default_factory=dict)  # meter.step_speeds
    as_measured: bool = False  # B's figures judged as they are

    @property
    def calibration_ratio(self) -> float | None:
        """How much faster B's machine calibrated than A's (the driver's knee)."""
        return self.rate_b / self.rate_a if self.rate_a and self.rate_b else None

    @property
    def ratio(self) -> float | None:
        """How much faster B measured: the median of the steps' meter, else the calibrations'."""
        return statistics.median(self.steps.values()) if self.steps else self.calibration_ratio

    @property
    def judged_by(self) -> str:
        return "steps" if self.steps else "calibration"

    def speed(self, key: StepKey) -> float | None:
        """The factor B's latencies of a step are multiplied by; None: as measured."""
        if self.as_measured:
            return None
        if self.steps:
            return self.steps.get(key)
        return self.calibration_ratio if self.normalised else None

    def apply(self, name: str, value: float | None, key: StepKey) -> float | None:
        """B's figure on A's machine: a latency times the step's speed, rates and shares as is."""
        speed = self.speed(key)
        if value is None or speed is None or name not in LATENCIES:
            return value
        return value * speed


def _within(ratio: float) -> bool:
    return max(ratio, 1 / ratio) <= MACHINE_RATIO_LIMIT


def machine_scale(
    run_a: RunRecord,
    run_b: RunRecord,
    normalise: bool,
    ignore: bool = False,
    steps: dict[StepKey, float] | None = None,
    as_measured: bool = False,
) -> Scale:
    """The Scale of two runs, or CompareError when unmeasured or too far apart."""
    scale = Scale(
        rate_of(run_a.machine), rate_of(run_b.machine), normalise, steps or {}, as_measured
    )
    if not scale.steps:
        for run, rate in ((run_a, scale.rate_a), (run_b, scale.rate_b)):
            if rate is None and not ignore:
                raise CompareError(
                    f"run {run.run_id} has neither the driver's CPU per step nor a machine "
                    "calibration (it ran with CALIBRATE=0), so nothing says its machine "
                    "measures like the other's; pass --ignore-calibration to compare anyway"
                )
    ratio = scale.ratio
    if ratio is None:
        if normalise:
            raise CompareError("--normalise needs both runs calibrated")
        return scale
    if not _within(ratio) and not (normalise or ignore):
        measured = f"their calibrations, {scale.rate_a} and {scale.rate_b} req/s"
        if scale.steps:
            measured = "the driver's CPU per request in the steps both ran"
        raise CompareError(
            f"the machines differ: by {measured}, B ran {ratio:.2f}x as fast as A "
            f"({max(ratio, 1 / ratio):.2f}x, more than {MACHINE_RATIO_LIMIT:g}x); "
            "pass --normalise to compare them with B put on A's machine, or "
            "--ignore-calibration to compare anyway"
        )
    return scale


def run_line(name: str, run: RunRecord, rate: int | None) -> str:
    machine = run.machine
    bound = " (held at every rate tried: a lower bound)" if capped(machine) else ""
    runs, which = run.runs, run.run_id
    if len(runs) > 1:
        which = (
            f"a baseline of {len(runs)} runs, {', '.join(runs)}, their repeats pooled (the "
            "drift between them counts as noise; the median calibration shown)"
        )
    return (
        f"{name}: {which} ({machine.get('cpu')}, {machine.get('nproc')} cores), "
        f"machine calibration {rate or 'none'} req/s{bound}"
    )


def base_latency_line(run_a: RunRecord, run_b: RunRecord) -> str | None:
    """Both machines' base latency, warned about beyond BASE_LATENCY_WARNING."""
    a, b = base_latency(run_a.machine), base_latency(run_b.machine)
    if a is None or b is None:
        return None
    ratio = b[1] / a[1] if a[1] > 0 else 1.0
    line = (
        "base latency (median p95 of the core's /healthz over the calibration's lowest "
        f"probes): A {a[1]:.2f} ms up to {a[0]}/s, B {b[1]:.2f} ms up to {b[0]}/s "
        f"({ratio:.2f}x)"
    )
    if abs(ratio - 1) > BASE_LATENCY_WARNING:
        faster = "faster" if ratio < 1 else "slower"
        line += (
            f": B's machine answered a trivial request {abs(1 - ratio):.0%} {faster} at low "
            "load, a drift between the runs that their repeats cannot see; read a latency "
            "change of about that share as the machine's, and confirm flags with a third run"
        )
    return line


def machine_lines(scale: Scale) -> list[str]:
    """What measured the two machines, how far apart, and what was done with it."""
    knee, allowed = scale.calibration_ratio, f"{MACHINE_RATIO_LIMIT:g}x allowed"
    if not scale.steps:
        if knee is None:
            return []
        if scale.normalised and not scale.as_measured:
            how = ": B's latencies are multiplied by that ratio"
        elif _within(knee):
            how = f" (within the {allowed}; figures as measured)"
        else:
            how = f" (beyond the {allowed}, compared as measured: --ignore-calibration)"
        return [f"B's machine calibrated {knee:.2f}x A's{how}"]
    ratio, speeds = scale.ratio or 1.0, sorted(scale.steps.values())
    if _within(ratio):
        against = f"within the {allowed}"
    else:
        told = "--normalise" if scale.normalised else "--ignore-calibration"
        against = f"beyond the {allowed} ({told})"
    lines = [
        f"B's machine ran {ratio:.2f}x as fast as A's, {against}: the driver's CPU per request, "
        f"the median over the {len(speeds)} steps both held ({speeds[0]:.2f}-{speeds[-1]:.2f}x "
        "step by step)"
    ]
    if knee is not None:
        lines.append(
            f"their calibrations (the driver's knee against the core's /healthz) read {knee:.2f}x: "
            "a 3 s probe's knee moves more than the machine does, so the steps' own meter "
            "judges"
        )
    if scale.as_measured:
        lines.append("figures judged as measured (--as-measured)")
    else:
        lines.append(
            "B's latencies are put on A's machine step by step, multiplied by the step's "
            "speed (column B's speed; n/a: a step that dropped iterations, judged as "
            "measured); rates and shares as measured; --as-measured judges them raw"
        )
    return lines
