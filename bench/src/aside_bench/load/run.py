"""The one layer that starts the load driver (bench/driver, `aside-load`), for every run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aside_bench.plan import scenarios
from aside_bench.plan.arms import BARE_ARM
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError

POLL_S = 0.1  # how often the wait for the driver's end reads its CPU time
START_AND_FLUSH_S = 30  # how long past its load and timeout a driver may start and flush


@dataclass(frozen=True)
class LoadRun:
    """One driver process: its scenario, tags, rate, pool, duration and outputs."""

    scenario: str  # the driver's: read, bare, healthz, compute, interference, mixed, tracks, chaos
    run_id: str
    arm: str
    phase: str
    rate: int
    duration_s: int
    pool: int
    timeout_s: int
    data_dir: Path
    repeat: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    base_url: str | None = None  # the gateway unless given
    summary_path: Path | None = None
    samples_path: Path | None = None
    key_trace_path: Path | None = None  # every read's key, in order (gzip when .gz)
    influx: bool = True  # per-second points into InfluxDB
    live: bool = False  # a line per second on the terminal

    def variables(self, settings: Settings) -> dict[str, str]:
        found = {
            "BASE_URL": self.base_url or settings.gateway_url,
            "SCENARIO": self.scenario,
            "RUN_ID": self.run_id,
            "ARM": self.arm,
            "PHASE": self.phase,
            "REPEAT": str(self.repeat),
            "RATE": str(self.rate),
            "DURATION": f"{self.duration_s}s",
            "POOL": str(self.pool),
            "TIMEOUT_S": str(self.timeout_s),
            "DATA_DIR": str(self.data_dir.resolve()),
            "LIVE": "1" if self.live else "0",
            **self.extra,
        }
        optional = {
            "INFLUX_URL": settings.influx_url if self.influx else None,
            "SUMMARY_PATH": self.summary_path,
            "SAMPLES_PATH": self.samples_path,
            "KEY_TRACE_PATH": self.key_trace_path,
        }
        return found | {name: str(value) for name, value in optional.items() if value is not None}

    @classmethod
    def of(cls, step: Step, **more: Any) -> LoadRun:
        """The driver tagged as `step`: its arm, phase, rate, duration and repeat."""
        tags = {"arm": step.arm, "phase": step.phase, "rate": step.rate, "repeat": step.repeat}
        return cls(**tags, duration_s=step.duration_s, **more)


def deadline_s(run: LoadRun) -> float:
    """How long a driver may run: its load, the timeout and START_AND_FLUSH_S."""
    return run.duration_s + run.timeout_s + START_AND_FLUSH_S


def driver_env(settings: Settings, run: LoadRun) -> dict[str, str]:
    """This process's environment less the driver's variables, then the run's."""
    mine = run.variables(settings)
    inherited = {k: v for k, v in os.environ.items() if k not in DRIVER_VARIABLES}
    return {**inherited, **mine}


# Every variable the driver reads (bench/driver/README.md): none leaks in from the shell.
DRIVER_VARIABLES = frozenset(
    {
        "BASE_URL", "SCENARIO", "RUN_ID", "ARM", "PHASE", "REPEAT", "RATE", "DURATION",
        "POOL", "CONNS", "START_AT", "LATE_MS", "TIMEOUT_S", "SEED", "SKIP", "DATA_DIR",
        "SUMMARY_PATH", "INFLUX_SPOOL",
        "SAMPLES_PATH", "INFLUX_URL", "LIVE", "CACHE", "HOT_SHARE", "COLD_SAMPLE", "DIST", "ALPHA",
        "KEYS", "COMPUTE_BODY",
        "COMPUTE_EXPECT", "COMPUTE_HASH_PATTERN", "READ_RATE", "READ_CACHE", "READ_POOL",
        "WRITE_SHARE", "STALE_PER_MIN", "STALE_READS_AFTER", "ARM_QUERY", "SIZE_BOUNDS",
        "USER_PREFIX", "USER_SHARE", "ID_SAMPLE", "NO_REUSE", "ENGINE", "SHARDS", "SHARD",
        "TRACE", "TRACE_SPEED", "KEY_TRACE_PATH",
    }
)  # fmt: skip


def driver_scenario(step: Step) -> str:
    """The driver's scenario for a step: the ceiling's as `read` (BARE_ARM `bare`)."""
    if step.scenario == "ceiling":
        return {"healthz": "healthz", BARE_ARM: "bare"}.get(step.arm, "read")
    return step.scenario


def keeps_key_trace(step: Step, shape: LoadShape) -> bool:
    """A step keeps its keys when it reads by key (not the hot set's)."""
    name = driver_scenario(step)
    found = scenarios.scenario_of(name)
    keyed = name == "bare" or (found is not None and (found.dist or found.trace))
    return keyed and (shape.dist != "hotset" or shape.trace is not None)


def _scenario_variables(step: Step, shape: LoadShape, max_pool: int) -> dict[str, str]:
    """The variables only the step's scenario reads (`bare`: the read's)."""
    name = driver_scenario(step)
    found = scenarios.scenario_of("read" if name == "bare" else name)
    return {} if found is None else found.variables(step, shape, max_pool)


def step_run(
    step: Step,
    run_id: str,
    shape: LoadShape,
    pool: int,
    data_dir: Path,
    max_pool: int = 1000,
    *,
    live: bool = False,
    samples_path: Path | None = None,
    key_trace_path: Path | None = None,
) -> LoadRun:
    """The driver for one step; `max_pool` caps any other scenario's pool."""
    return LoadRun.of(
        step,
        scenario=driver_scenario(step),
        run_id=run_id,
        pool=pool,
        timeout_s=shape.timeout_s,
        data_dir=data_dir,
        extra=_scenario_variables(step, shape, max_pool),
        samples_path=samples_path,
        key_trace_path=key_trace_path,
        live=live,
    )


class DriverProcess:
    """The driver in its own process group: Ctrl-C reaches it only as our one SIGINT."""

    def __init__(
        self, command: list[str], log_path: Path, env: dict[str, str], live: bool = False
    ) -> None:
        self.command = command
        self.log_path = log_path
        self.env = env
        self.live = live
        self.process: subprocess.Popen[bytes] | None = None
        # utime + stime of the driver at its exit (read from /proc before it is reaped)
        self.cpu_ticks: int | None = None

    def start(self) -> DriverProcess:
        with self.log_path.open("ab") as log:
            shown = {k: v for k, v in self.env.items() if k in DRIVER_VARIABLES}
            line = " ".join(f"{k}={v}" for k, v in sorted(shown.items()))
            log.write(f"$ {line} {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=None if self.live else subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        return self

    def run_measured(self, deadline_s: float) -> int:
        """Start the driver and wait for its end (see wait)."""
        return self.start().wait(deadline_s)

    def _hung(self, deadline_s: float) -> StackError:
        self.stop()
        return StackError(
            f"the load driver did not finish within {deadline_s:.0f} s; see {self.log_path}"
        )

    def _exited(self, pid: int) -> bool:
        """Whether the driver has exited; its CPU time read before and while it is a zombie."""
        self._read_ticks(pid)
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped (Ctrl-C's poll): keep the last reading
            return True
        if exited is not None:
            self._read_ticks(pid)
        return exited is not None

    def _read_ticks(self, pid: int) -> None:
        ticks = procs.cpu_ticks(pid)
        self.cpu_ticks = self.cpu_ticks if ticks is None else ticks

    @property
    def cpu_seconds(self) -> float | None:
        return None if self.cpu_ticks is None else self.cpu_ticks / procs.clock_ticks_per_s()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def wait(self, timeout_s: float | None = None) -> int:
        """The driver's exit code, its CPU time kept; past `timeout_s` killed, StackError raised."""
        assert self.process is not None, "the load driver was not started"
        pid, began = self.process.pid, time.monotonic()
        while not self._exited(pid):
            if timeout_s is not None and time.monotonic() - began > timeout_s:
                raise self._hung(timeout_s)
            time.sleep(POLL_S)  # the polling pace
        return self.process.wait()

    def interrupt(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGINT)

    def stop(self) -> None:
        """Kill the driver (its summary is not wanted any more)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def new_driver(settings: Settings, run: LoadRun, log_path: Path) -> DriverProcess:
    """The driver for `run`, not started yet; its output goes to `log_path`."""
    return DriverProcess([str(settings.driver_bin)], log_path, driver_env(settings, run), run.live)
