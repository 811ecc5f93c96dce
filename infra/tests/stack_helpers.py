"""Helpers for the stack tests: free ports and a private mini stack."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "infra" / "stack.sh"
# The cheap services with real state; enough to prove up/down/clash behaviour
# without disturbing the test stack that the other suites use.
MINI_SERVICES = ("postgres", "redis", "influxdb")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MiniStack:
    run_dir: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(STACK), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def port(self, name: str) -> int:
        return int(self.env[name])

    def live_pids(self) -> dict[str, int]:
        """Pids recorded by the stack whose process still exists."""
        pids = {}
        for f in (self.run_dir / "pids").glob("*.pid"):
            pid = int(f.read_text().split()[0])
            if Path(f"/proc/{pid}").exists():
                pids[f.stem] = pid
        return pids


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
