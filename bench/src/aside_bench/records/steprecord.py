"""One step of a run as run.json keeps it; a plug-in's own fields ride in `extra`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aside_bench.plan.steps import Step
from aside_bench.records.documents import DriverRun, HopTimes, StepProbe, StepSummary, WarmFill


@dataclass
class StepRecord:
    """A step's record: a field not recorded is None and left out of run.json."""

    scenario: str
    arm: str
    phase: str
    rate: int
    duration_s: int
    repeat: int = 1
    read_rate: int = 0  # saved only when the step has one
    completed: bool = False
    # Its preparation: the distance's hops, the gateway's restart, Redis's bound.
    distance: str | None = None
    gateway_restarted_with: dict[str, str] | None = None
    cache_memory: dict[str, int | str] | None = None  # maxmemory, policy
    quiet_wait_s: float | None = None
    skip: int | None = None  # iterations a warm step passes over (its cold step's)
    prep: str | None = None
    warm: WarmFill | None = None
    warning: str | None = None
    # The driver's run: its pool, instants, exit, CPU and summary.
    pool: int | None = None
    prom_start: float | None = None
    driver_scenario: str | None = None
    samples: str | None = None
    probe: StepProbe | None = None
    start: float | None = None
    end: float | None = None
    driver_exit: int | None = None
    driver: DriverRun | None = None
    summary_error: str | None = None
    summary: StepSummary | None = None
    key_trace: str | None = None
    key_trace_lines: int | None = None
    key_trace_lost: int | None = None
    influx: dict[str, int] | None = None
    hops: dict[str, HopTimes | str] | None = None  # by hop, or an error
    redis: dict[str, dict[str, int] | list[int]] | None = None
    interrupted: bool = False  # saved only when it was
    prom_end: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, step: Step, **more: Any) -> StepRecord:
        return cls(**asdict(step), **more)

    @property
    def step(self) -> Step:
        return Step(
            self.scenario,
            self.arm,
            self.phase,
            int(self.rate),
            self.duration_s,
            repeat=int(self.repeat),
            read_rate=int(self.read_rate),
        )

    @property
    def figures(self) -> StepSummary:
        """The driver's summary of the step (empty when it wrote none)."""
        return self.summary or StepSummary()

    def to_json(self) -> dict[str, Any]:
        # read_rate and interrupted are saved only when set, a field at None never.
        unset = {"extra"} | {
            name for name in ("read_rate", "interrupted") if not getattr(self, name)
        }
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in unset}
        return {**{k: v for k, v in values.items() if v is not None}, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepRecord:
        """A step of run.json, any bench's: a field it lacks takes its default."""
        values = {name: value for name, value in data.items() if name in _KNOWN}
        extra = {name: value for name, value in data.items() if name not in _KNOWN}
        return cls(**values, extra=extra)


_KNOWN = {f.name for f in fields(StepRecord)} - {"extra"}
