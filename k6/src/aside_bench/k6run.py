"""Run one k6 step: the command line, its environment, and a clean stop on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import Settings
from .plan import Step

SCRIPTS = {"read": "read.js", "mixed": "mixed.js", "compute": "compute.js"}


@dataclass(frozen=True)
class LoadShape:
    """Knobs of the request mix, the same for every step of a run."""

    hot_share: float = 0.9
    cold_sample: int = 200
    write_share: float = 0.1
    complexity: int = 10
    timeout_s: int = 10


def script_for(step: Step) -> str:
    if step.scenario == "ceiling":
        return "healthz.js" if step.arm == "healthz" else "read.js"
    return SCRIPTS[step.scenario]


def k6_command(
    settings: Settings,
    step: Step,
    run_id: str,
    shape: LoadShape,
    vus: tuple[int, int],
    data_dir: Path,
) -> list[str]:
    variables = {
        "BASE_URL": settings.gateway_url,
        "RUN_ID": run_id,
        "ARM": step.arm,
        "PHASE": step.phase,
        "RATE": str(step.rate),
        "DURATION": f"{step.duration_s}s",
        "PRE_VUS": str(vus[0]),
        "MAX_VUS": str(vus[1]),
        "TIMEOUT_S": str(shape.timeout_s),
        "SCENARIO": step.scenario,
        "DATA_DIR": str(data_dir.resolve()),
        "HOT_SHARE": str(shape.hot_share),
        "COLD_SAMPLE": str(shape.cold_sample),
        "WRITE_SHARE": str(shape.write_share),
        "COMPLEXITY": str(shape.complexity),
    }
    command = [
        str(settings.k6_bin),
        "run",
        "--quiet",
        # The report is built from InfluxDB and Prometheus, never from k6's console.
        "--summary-mode=disabled",
        "--no-usage-report",
        "--no-color",
        # No REST API server: nothing to bind, so parallel k6 runs cannot clash on its port.
        "--address",
        "",
        "--out",
        f"influxdb={settings.influx_url}",
    ]
    for name, value in variables.items():
        command += ["-e", f"{name}={value}"]
    command.append(str(settings.scripts_dir / script_for(step)))
    return command


# k6 shares the two cores with the stack: a rarer garbage collection (GOGC 400,
# a few hundred MB more of 24 GiB) took ~5% off its CPU per request.
K6_ENV = {"K6_INFLUXDB_PUSH_INTERVAL": "1s", "GOGC": "400"}


class K6Process:
    """k6 in its own process group, so a terminal's Ctrl-C reaches it only through
    us: one SIGINT, which k6 answers by stopping and flushing its output."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def run(self) -> int:
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(self.command) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **K6_ENV},
            )
            return self.process.wait()

    def interrupt(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])
