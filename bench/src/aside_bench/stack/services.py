"""Control of the native stack infra/env.sh describes, checked before any process is touched."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError
from aside_bench.stack.toxiproxy import ProxiedUrls

STACK_TIMEOUT_S = 120


@dataclass(frozen=True)
class StackEnv:
    run_dir: Path
    ports: dict[str, int]  # service -> its main port
    core_url: str


def _bash(
    args: list[str], env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _url_port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


class ServiceControl:
    def __init__(self, settings: Settings, env: dict[str, str] | None = None):
        self.settings = settings
        # ASIDE_SKIP_INSTALL: a restart must not run the installer in the middle of a fault.
        self.env = {**(os.environ if env is None else env), "ASIDE_SKIP_INSTALL": "1"}
        self.script = settings.root / "infra" / "stack.sh"
        self.stack = self._read_env()

    def _read_env(self) -> StackEnv:
        """ASIDE_RUN_DIR, CORE_URL and each service's main port as infra/env.sh gives them."""
        port_var = {s.name: s.port_var for s in procs.services_table(self.settings.root)}
        names = ("ASIDE_RUN_DIR", "CORE_URL", *dict.fromkeys(port_var.values()))
        printer = 'printf "%s\\n" ' + " ".join(f'"${name}"' for name in names)
        done = _bash(
            ["-c", f'source "{self.settings.root}/infra/env.sh" && {printer}'], self.env, 30
        )
        values = done.stdout.splitlines()
        if done.returncode != 0 or len(values) != len(names):
            raise StackError(f"cannot read infra/env.sh: {done.stderr.strip()}")
        found = dict(zip(names, values, strict=True))
        try:
            ports = {service: int(found[var]) for service, var in port_var.items()}
        except ValueError as error:
            raise StackError(f"infra/env.sh gives a port that is not a number: {error}") from error
        return StackEnv(Path(found["ASIDE_RUN_DIR"]), ports, found["CORE_URL"].rstrip("/"))

    def verify(self, services: tuple[str, ...] | None = None) -> None:
        """Refuse unless the bench's URLs and the recorded pids are this stack's."""
        urls = {
            "gateway": ("GATEWAY_URL", self.settings.gateway_url),
            "postgres": ("DATABASE_URL", self.settings.database_url),
            "redis": ("REDIS_URL", self.settings.redis_url),
            "core": ("CORE_URL (of infra/env.sh)", self.stack.core_url),
        }
        for service, (name, url) in urls.items():
            port = self.stack.ports[service]
            if _url_port(url) != port:
                raise StackError(
                    f"{name} points at port {_url_port(url)} but the stack of ASIDE_RUN_DIR="
                    f"{self.stack.run_dir} has {service} on {port}: refusing to inject faults "
                    "into a stack the bench does not load (export the stack's environment)"
                )
        for service in tuple(urls) if services is None else services:
            pid = self.pid(service)
            port = self.stack.ports[service]
            if port not in procs.listening_ports(pid):
                raise StackError(
                    f"{service} pid {pid} recorded under {self.stack.run_dir} does not listen "
                    f"on port {port}: refusing to touch it"
                )

    def pid(self, service: str) -> int:
        pid = procs.recorded_pid(self.stack.run_dir, service)
        if pid is None:
            raise StackError(f"{service} is not running under {self.stack.run_dir}")
        return pid

    def gateway_workers(self) -> list[int]:
        return procs.children(self.pid("gateway"))

    def _run(
        self, *args: str, settings: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """infra/stack.sh with `args`, `settings` added to the environment."""
        return _bash([str(self.script), *args], {**self.env, **(settings or {})}, STACK_TIMEOUT_S)

    def _checked(self, *args: str, settings: dict[str, str] | None = None) -> None:
        done = self._run(*args, settings=settings)
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise StackError(f"infra/stack.sh {' '.join(args)} failed: {output}")

    def stop(self, service: str) -> None:
        self._checked("stop", service)

    def restart(self, service: str, settings: dict[str, str]) -> None:
        """Stop `service` and start it with `settings` added, until infra/stack.sh says healthy."""
        for action in ("stop", "up"):
            self._checked(action, service, settings=settings)

    def route(self, urls: ProxiedUrls | None) -> None:
        """The core, then the gateway, restarted through the proxies of `urls` (None: direct)."""
        self.restart("core", urls.core if urls else {})
        self.restart("gateway", urls.gateway if urls else {})

    def healthy(self) -> bool:
        return self._run("status").returncode == 0

    def ensure_up(self) -> None:
        """Start whatever is down (infra/stack.sh up starts only what is not running)."""
        if not self.healthy():
            self._checked("up")
