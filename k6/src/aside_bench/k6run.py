"""One file of about 470 lines: the one k6 layer (nothing else starts k6 or reads its files).

k6 for every kind of run (sweep, ceiling, chaos, soak): the command line (the
flags and variables all scripts share plus a scenario's own), the process (a
header in the log, Ctrl-C, the wait for its first sample) and its end-of-test
summary (handleSummary's JSON)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from . import interference, procs, trackplan
from .config import Settings
from .plan import BARE_ARM, Step, vus_for
from .prepare import StackError

SCRIPTS = {
    "read": "read.js",
    "mixed": "mixed.js",
    "compute": "compute.js",
    "tracks": "tracks.js",
    interference.SCENARIO: interference.SCRIPT,
}
# The read script without its telemetry (the ceiling's reference).
BARE_SCRIPT = "bare.js"
# Scripts whose step figures may come from their end-of-test summary
# (SUMMARY_PATH, lib/common.js stepSummary), so that they can run without an
# output: no sample per request leaves k6 (mixed.js keeps its load apart from
# its checker in tagged sub-metrics). The others' figures need their samples by
# tag (the tracks' sizes, the interference's compute), so they always send
# them to InfluxDB.
SUMMARY_SCRIPTS = frozenset({"read.js", "healthz.js", "mixed.js", BARE_SCRIPT})
# Where a step's samples go (aside-bench --samples): "summary", nothing per
# request, figures from the summary (the default); "influx", every sample to
# InfluxDB (for Grafana's panels), figures from InfluxDB.
SAMPLES = ("summary", "influx")
# k6 shares the two cores with the stack: a rarer garbage collection (GOGC 400)
# costs it less CPU per request (docs/decisions.md, k6's own cost).
K6_ENV = {"K6_INFLUXDB_PUSH_INTERVAL": "1s", "GOGC": "400"}
# How often the wait for k6's end reads its CPU time; a k6 that has exported
# its dashboard report is given this long to exit before it is stopped (a
# browser left on the live dashboard keeps k6 running after its test).
POLL_S = 0.1
LINGER_S = 3.0
# A step's k6 may start up and flush for this long beyond its load and its
# graceful stop before it counts as hung.
START_AND_FLUSH_S = 60
# How often the wait for k6's first sample reads its JSON output.
JSON_POLL_S = 0.05

T = TypeVar("T")


@dataclass(frozen=True)
class LoadShape:
    """Knobs of the sweep's request mix, the same for every step of a run."""

    hot_share: float = 0.9
    cold_sample: int = 200
    write_share: float = 0.1
    complexity: int = 10
    timeout_s: int = 10
    # mixed: read-after-write checks a minute (0: none), and the reads of each
    # key after each write (each over a fresh connection, so on any worker).
    stale_per_min: int = 12
    stale_reads_after: int = 2
    # interference: the reads' fixed rate, and the work of the hashing kinds.
    read_rate: int = interference.DEFAULT_READ_RATE
    pbkdf2_iterations: int = interference.DEFAULT_PBKDF2_ITERATIONS
    bcrypt_cost: int = interference.DEFAULT_BCRYPT_COST


@dataclass(frozen=True)
class K6Run:
    """One k6 run: what every script reads (scripts/lib/common.js), the
    scenario's own variables, where the samples go and the process environment."""

    script: str
    run_id: str
    scenario: str
    arm: str
    phase: str
    rate: int
    duration_s: int
    vus: tuple[int, int]  # (preAllocatedVUs, maxVUs)
    timeout_s: int
    data_dir: Path
    repeat: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    out: str | None = None  # k6's --out, e.g. influxdb=URL or json=PATH
    console_summary: bool = True
    env: dict[str, str] = field(default_factory=dict)

    @property
    def from_summary(self) -> bool:
        """True when the run's figures come from its summary: a script that
        writes one, run without an output."""
        return self.out is None and self.script in SUMMARY_SCRIPTS

    def variables(self, gateway_url: str) -> dict[str, str]:
        return {
            "BASE_URL": gateway_url,
            "RUN_ID": self.run_id,
            "ARM": self.arm,
            "PHASE": self.phase,
            "SCENARIO": self.scenario,
            "RATE": str(self.rate),
            "DURATION": f"{self.duration_s}s",
            "PRE_VUS": str(self.vus[0]),
            "MAX_VUS": str(self.vus[1]),
            "TIMEOUT_S": str(self.timeout_s),
            "DATA_DIR": str(self.data_dir.resolve()),
            "REPEAT": str(self.repeat),
            **self.extra,
        }


def deadline_s(run: K6Run) -> float:
    """How long a step's k6 may run: its load, its graceful stop (the request
    timeout + 2 s, scripts/lib/common.js) and START_AND_FLUSH_S."""
    return run.duration_s + run.timeout_s + 2 + START_AND_FLUSH_S


def dashboard_env(live_port: int | None, export: Path | None) -> dict[str, str]:
    """k6's web dashboard: served on 127.0.0.1:`live_port` while the step runs,
    and/or its HTML report written to `export` at the end. Without a live port
    it listens on a random port of 127.0.0.1 all the same: this k6's "no HTTP"
    port (-1) listens on every interface instead."""
    if live_port is None and export is None:
        return {}
    env = {
        "K6_WEB_DASHBOARD": "true",
        "K6_WEB_DASHBOARD_HOST": "127.0.0.1",
        "K6_WEB_DASHBOARD_PORT": str(live_port if live_port is not None else 0),
        # Its default of 10 s leaves a short step without the two snapshots
        # the report needs, and the live view without a point for 10 s.
        "K6_WEB_DASHBOARD_PERIOD": "1s",
    }
    if export is not None:
        env["K6_WEB_DASHBOARD_EXPORT"] = str(export)
    return env


def k6_command(settings: Settings, run: K6Run) -> list[str]:
    command = [str(settings.k6_bin), "run", "--quiet"]
    if not run.console_summary:
        command.append("--summary-mode=disabled")
    # No REST API server: nothing to bind, so parallel k6 runs cannot clash on its port.
    command += ["--no-usage-report", "--no-color", "--address", ""]
    if run.out is not None:
        command += ["--out", run.out]
    for name, value in run.variables(settings.gateway_url).items():
        command += ["-e", f"{name}={value}"]
    command.append(str(settings.scripts_dir / run.script))
    return command


# ---- the sweep's and the ceiling's steps ----------------------------------------------
def script_for(step: Step) -> str:
    if step.scenario == "ceiling":
        return {"healthz": "healthz.js", BARE_ARM: BARE_SCRIPT}.get(step.arm, "read.js")
    return SCRIPTS[step.scenario]


def _scenario_variables(step: Step, shape: LoadShape, max_vus: int) -> dict[str, str]:
    """The variables only one scenario's script reads."""
    if step.scenario != interference.SCENARIO:
        return {}
    read_vus = vus_for(step.read_rate, interference.READ_ARM, max_vus, interference.PHASE)
    work = (shape.complexity, shape.pbkdf2_iterations, shape.bcrypt_cost)
    return interference.k6_variables(step.arm, step.read_rate, read_vus, work)


def step_run(
    settings: Settings,
    step: Step,
    run_id: str,
    shape: LoadShape,
    vus: tuple[int, int],
    data_dir: Path,
    max_vus: int = 1000,
    env: dict[str, str] | None = None,
    samples: str = "summary",
) -> K6Run:
    """k6 for one step; `vus` are the step's own, `max_vus` caps any other
    scenario's (the interference reads'). `samples` (SAMPLES): a script that
    can give its figures from its summary runs without an output unless
    "influx" asks for every sample; the bare script never has one."""
    script = script_for(step)
    quiet = script == BARE_SCRIPT or (script in SUMMARY_SCRIPTS and samples == "summary")
    return K6Run(
        script=script,
        run_id=run_id,
        scenario=step.scenario,
        arm=step.arm,
        phase=step.phase,
        rate=step.rate,
        duration_s=step.duration_s,
        vus=vus,
        timeout_s=shape.timeout_s,
        data_dir=data_dir,
        repeat=step.repeat,
        extra={
            "HOT_SHARE": str(shape.hot_share),
            "COLD_SAMPLE": str(shape.cold_sample),
            "WRITE_SHARE": str(shape.write_share),
            "COMPLEXITY": str(shape.complexity),
            "STALE_PER_MIN": str(shape.stale_per_min),
            "STALE_READS_AFTER": str(shape.stale_reads_after),
            **track_variables(step),
            **_scenario_variables(step, shape, max_vus),
        },
        out=None if quiet else f"influxdb={settings.influx_url}",
        # A run with an output is read back from InfluxDB, never from k6's
        # console; handleSummary needs the summary on.
        console_summary=quiet,
        env={**K6_ENV, **(env or {})},
    )


def track_variables(step: Step) -> dict[str, str]:
    """The tracks scenario's own variables (trackplan.py)."""
    if step.scenario != trackplan.SCENARIO:
        return {}
    return {
        "ARM_QUERY": trackplan.query(step.arm),
        "SIZE_BOUNDS": ",".join(map(str, trackplan.SIZE_BOUNDS)),
    }


# ---- the process ----------------------------------------------------------------------
class K6Process:
    """k6 in its own process group, so a terminal's Ctrl-C reaches it only through
    us: one SIGINT, which k6 answers by stopping and flushing its output. Its
    output goes to `log_path` after a line with the command."""

    def __init__(self, command: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.command = command
        self.log_path = log_path
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        # utime + stime of k6 at its exit (read from /proc before it is reaped)
        self.cpu_ticks: int | None = None
        # stopped after its test because the live dashboard held it open
        self.lingered = False

    def start(self) -> K6Process:
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(self.command) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        return self

    def run(self) -> int:
        """Start k6 and wait for it to end; its exit code."""
        return self.start().wait()

    def run_measured(self, deadline_s: float, done_when: Path | None = None) -> int:
        """Start k6, wait for it to end and keep its CPU time (`cpu_seconds`).
        Past `deadline_s` it is stopped and StackError raised. Once `done_when`
        exists (its dashboard report, written after every output has flushed)
        k6 has LINGER_S to exit, else it is stopped and counts as done."""
        self.start()
        assert self.process is not None
        pid, began, done_at = self.process.pid, time.monotonic(), None
        while not self._exited(pid):
            now = time.monotonic()
            if done_when is not None and done_at is None and done_when.exists():
                done_at = now
            if done_at is not None and now - done_at > LINGER_S:
                self.lingered = True
                self.stop()
                return 0
            if now - began > deadline_s:
                self.stop()
                raise StackError(
                    f"k6 did not finish within {deadline_s:.0f} s; see {self.log_path}"
                )
            time.sleep(POLL_S)
        return self.process.wait()

    def _exited(self, pid: int) -> bool:
        """True once k6 has exited; its CPU time is read first, and once more
        while it is a zombie (exited, not yet reaped), when it is final."""
        ticks = procs.cpu_ticks(pid)
        if ticks is not None:
            self.cpu_ticks = ticks
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped (Ctrl-C's poll): keep the last reading
            return True
        if exited is None:
            return False
        ticks = procs.cpu_ticks(pid)
        if ticks is not None:
            self.cpu_ticks = ticks
        return True

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
        """k6's exit code; past `timeout_s` it is killed and StackError raised."""
        assert self.process is not None, "k6 was not started"
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise StackError(
                f"k6 did not finish within {timeout_s:.0f} s; see {self.log_path}"
            ) from None

    def interrupt(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGINT)

    def stop(self) -> None:
        """Kill k6 (no flush: its output is not wanted any more)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def first_sample(
        self, probe: Callable[[], T | None], where: str, deadline_s: float, interval_s: float
    ) -> T:
        """What `probe` finds once k6's first sample has reached its output
        (`where`, for the error), polled every `interval_s`; k6 exiting first is
        StackError, and so is nothing within `deadline_s` (k6 is stopped then).
        One wait for every output: only how the output is read differs."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            found = probe()
            if found is not None:
                return found
            if not self.running:
                raise StackError(f"k6 exited with {self.returncode}; see {self.log_path}")
            time.sleep(interval_s)  # the polling pace
        self.stop()
        raise StackError(
            f"k6 wrote no sample to {where} within {deadline_s:.0f} s; see {self.log_path}"
        )

    def first_point(self, out: Path, metric: str, deadline_s: float) -> dict[str, Any]:
        """The `data` of the first `metric` point k6 writes to its JSON output `out`;
        k6 is stopped and StackError raised if none comes within `deadline_s`."""
        offset = 0

        def probe() -> dict[str, Any] | None:
            nonlocal offset
            if not out.exists():
                return None
            with out.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            # Whole lines only: k6 may be half-way through writing the last one.
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            for line in complete.decode().splitlines():
                if f'"metric":"{metric}"' in line and '"type":"Point"' in line:
                    return json.loads(line)["data"]
            return None

        return self.first_sample(probe, f"{out.name} ({metric})", deadline_s, JSON_POLL_S)


def start_k6(settings: Settings, run: K6Run, log_path: Path) -> K6Process:
    """k6 started for `run`, its output appended to `log_path`."""
    return K6Process(k6_command(settings, run), log_path, run.env).start()


# ---- the summary ----------------------------------------------------------------------
# k6's sub-metric of the answered requests' latency (expected_response tag).
ANSWERED = "http_req_duration{expected_response:true}"
# The answered requests of one kind (the mixed script: count, create, delete).
BY_NAME = "http_req_duration{name:"


@dataclass(frozen=True)
class K6Summary:
    """The metrics of the JSON a script's handleSummary wrote (SUMMARY_PATH);
    empty when k6 wrote none or it cannot be read."""

    metrics: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> K6Summary:
        try:
            metrics = json.loads(path.read_text())["metrics"]
        except (OSError, ValueError, KeyError, TypeError):
            return cls({})
        return cls(metrics if isinstance(metrics, dict) else {})

    def _named(self, prefix: str) -> dict[str, dict[str, Any]]:
        return {
            name[len(prefix) :]: metric
            for name, metric in self.metrics.items()
            if name.startswith(prefix)
        }

    def counts(self, prefix: str) -> dict[str, int]:
        """Every counter whose name starts with `prefix`, by the rest of its name."""
        return {
            name: int(metric.get("values", {}).get("count", 0))
            for name, metric in self._named(prefix).items()
            if metric.get("type") == "counter"
        }

    def values(self, prefix: str, skip: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
        """The values (p(95), max, ...) of every other metric starting with `prefix`."""
        return {
            name: metric.get("values", {})
            for name, metric in self._named(prefix).items()
            if metric.get("type") != "counter" and prefix + name not in skip
        }

    @property
    def dropped_iterations(self) -> int:
        return int(self.metrics.get("dropped_iterations", {}).get("values", {}).get("count", 0))

    def _value(self, metric: str, key: str) -> float | None:
        value = self.metrics.get(metric, {}).get("values", {}).get(key)
        return None if value is None else float(value)

    def step_figures(self) -> dict[str, Any] | None:
        """What a step's result needs, from a step script's summary (run.json
        keeps it as the step's "summary"); None when it holds no request at all.

        As from InfluxDB: the latency of the answered requests and the failed
        iterations where the script tags and counts them; the bare script does
        neither, so there every request's latency and the failed requests."""
        counted = "failed_iterations" in self.metrics
        # Nothing answered: a counting script has no ANSWERED metric at all.
        duration = ANSWERED if counted else "http_req_duration"
        p95 = self._value(duration, "p(95)")
        if p95 is None and "http_reqs" not in self.metrics:
            return None
        if counted:
            failed = self._value("failed_iterations", "count")
        else:  # a failed request (bad status, timeout): the bare script checks no body
            failed = self._value("http_req_failed", "passes")
        return {
            "p50": self._value(duration, "med"),
            "p95": p95,
            "p99": self._value(duration, "p(99)"),
            "requests": int(self._value("http_reqs", "count") or 0),
            "iterations": int(self._value("iterations", "count") or 0),
            "failed": int(failed or 0),
            "dropped": self.dropped_iterations,
            "vus_peak": self._value("vus", "max"),
            "vus_allocated": self._value("vus_max", "max"),
            **self._mixed_figures(),
        }

    def _mixed_figures(self) -> dict[str, Any]:
        """The mixed script's: the answered requests' latency by kind (`name`), and
        its checker's reads (judged, stale, without a usable answer)."""
        found: dict[str, Any] = {}
        by_name = {
            name.removesuffix("}"): {
                "p50": values.get("med"),
                "p95": values.get("p(95)"),
                "p99": values.get("p(99)"),
                "requests": int(values.get("count") or 0),
            }
            for name, values in self.values(BY_NAME).items()
            if values.get("p(95)") is not None
        }
        if by_name:
            found["by_name"] = by_name
        if "stale_checked" in self.metrics or "stale_check_errors" in self.metrics:
            found["stale"] = {
                "reads": int(self._value("stale_checked", "count") or 0),
                "stale": int(self._value("stale_reads", "count") or 0),
                "errors": int(self._value("stale_check_errors", "count") or 0),
            }
        return found
