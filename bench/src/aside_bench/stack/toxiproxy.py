"""The proxies on the services' hops (toxiproxy, infra/conf/toxiproxy.json) and their toxics."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

import requests

from aside_bench.stack.prepare import StackError

# infra/conf/toxiproxy.json's proxies: the infra/env.sh variable of each port, its default.
PROXY_PORTS: dict[str, tuple[str, int]] = {
    "redis": ("ASIDE_TOXIPROXY_REDIS_PORT", 26479),
    "postgres": ("ASIDE_TOXIPROXY_POSTGRES_PORT", 25532),
    "core": ("ASIDE_TOXIPROXY_CORE_PORT", 28180),
    "core-redis": ("ASIDE_TOXIPROXY_CORE_REDIS_PORT", 26480),
    "core-postgres": ("ASIDE_TOXIPROXY_CORE_POSTGRES_PORT", 25533),
}
HOPS = tuple(PROXY_PORTS)
API_PORT = ("ASIDE_TOXIPROXY_PORT", 28474)
API_TIMEOUT_S = 5.0  # every call is local and small: past this the API is not answering
DOWNSTREAM = "downstream"


class ToxiproxyError(StackError):
    """The API refused or did not answer; the message says which call."""


@dataclass(frozen=True)
class Toxic:
    """One toxic as toxiproxy's API takes it (`type`'s attributes in `attributes`)."""

    name: str
    type: str  # latency, timeout, bandwidth, reset_peer, limit_data, slicer, slow_close
    stream: str = DOWNSTREAM
    attributes: dict[str, int] = field(default_factory=dict)
    toxicity: float = 1.0


class ToxicAnswer(TypedDict):
    """A toxic as toxiproxy's API lists it."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]


def _port(name: str, default: int, env: dict[str, str]) -> int:
    value = env.get(name) or str(default)
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ToxiproxyError(f"{name} must be a port number, got {value!r}")
    return port


@dataclass(frozen=True)
class Proxies:
    """Where toxiproxy's API and each proxy listen (infra/env.sh's variables)."""

    api_port: int
    ports: dict[str, int]  # hop -> the port its proxy listens on

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Proxies:
        env = dict(os.environ if env is None else env)
        ports = {hop: _port(var, default, env) for hop, (var, default) in PROXY_PORTS.items()}
        return cls(_port(*API_PORT, env), ports)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"


def latency_toxics(
    round_trip_ms: float, jitter_ms: float = 0, prefix: str = "distance"
) -> list[Toxic]:
    """The `latency_us` toxic (bench/proxy) adding `round_trip_ms` and jitter to a hop's reply."""
    if round_trip_ms <= 0 and jitter_ms <= 0:
        return []
    attributes = {"latency_us": round(round_trip_ms * 1000), "jitter_us": round(jitter_ms * 1000)}
    return [Toxic(f"{prefix}-{DOWNSTREAM}", "latency_us", DOWNSTREAM, attributes)]


class Toxiproxy:
    """toxiproxy's API: read the proxies, add and remove toxics."""

    def __init__(self, proxies: Proxies | None = None, timeout_s: float = API_TIMEOUT_S):
        self.proxies = proxies or Proxies.from_env()
        self.timeout_s = timeout_s
        self.session = requests.Session()

    def _call(self, method: str, path: str, toxic: Toxic | None = None) -> Any:
        url, body = f"{self.proxies.api_url}{path}", None if toxic is None else asdict(toxic)
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except requests.RequestException as error:
            raise ToxiproxyError(
                f"toxiproxy's API at {self.proxies.api_url} did not answer {method} {path}: "
                f"{error} (is the stack up? infra/stack.sh up toxiproxy)"
            ) from None
        if response.status_code >= 300:
            raise ToxiproxyError(
                f"toxiproxy refused {method} {path}: {response.status_code} {response.text.strip()}"
            )
        return response.json() if response.content else None

    def version(self) -> str:
        return str(self._call("GET", "/version").get("version", ""))

    def toxics(self) -> dict[str, list[ToxicAnswer]]:
        """Every proxy's toxics, by proxy name."""
        found = self._call("GET", "/proxies")
        return {name: list(proxy.get("toxics") or []) for name, proxy in found.items()}

    def require_hops(self) -> None:
        """Every hop's proxy exists and listens where infra/env.sh says."""
        found = self._call("GET", "/proxies")
        for hop, port in self.proxies.ports.items():
            proxy = found.get(hop)
            if proxy is None:
                raise ToxiproxyError(f"toxiproxy has no proxy '{hop}' (infra/conf/toxiproxy.json)")
            if not str(proxy.get("listen", "")).endswith(f":{port}") or not proxy.get("enabled"):
                raise ToxiproxyError(
                    f"toxiproxy's proxy '{hop}' listens on {proxy.get('listen')} "
                    f"(enabled: {proxy.get('enabled')}), not on port {port} "
                    f"({PROXY_PORTS[hop][0]})"
                )

    def add(self, hop: str, toxic: Toxic) -> None:
        self._call("POST", f"/proxies/{hop}/toxics", toxic)

    def remove(self, hop: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{hop}/toxics/{name}")

    def replace(self, hop: str, toxics: list[Toxic]) -> None:
        """`hop` carries exactly `toxics` afterwards."""
        for toxic in self.toxics().get(hop, []):
            self.remove(hop, toxic["name"])
        for toxic in toxics:
            self.add(hop, toxic)

    def clear(self) -> None:
        """No toxic on any proxy."""
        for hop, toxics in self.toxics().items():
            for toxic in toxics:
                self.remove(hop, toxic["name"])

    def close(self) -> None:
        self.session.close()


@contextmanager
def restored(api: Toxiproxy | None = None) -> Iterator[Toxiproxy]:
    """toxiproxy's API, every toxic removed on the way in and on the way out."""
    api = api or Toxiproxy()
    api.clear()
    try:
        yield api
    finally:
        try:
            api.clear()
        finally:
            api.close()


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@dataclass(frozen=True)
class ProxiedUrls:
    """The environment that sends a service's hops through the proxies."""

    gateway: dict[str, str]
    core: dict[str, str]


def proxied_urls(proxies: Proxies, database_url: str, redis_url: str, core_url: str) -> ProxiedUrls:
    """REDIS_URL, DATABASE_URL and CORE_URL through the proxies, for the gateway and the core."""
    ports = proxies.ports
    return ProxiedUrls(
        gateway={
            "REDIS_URL": with_port(redis_url, ports["redis"]),
            "DATABASE_URL": with_port(database_url, ports["postgres"]),
            "CORE_URL": with_port(core_url, ports["core"]),
        },
        core={
            "REDIS_URL": with_port(redis_url, ports["core-redis"]),
            "DATABASE_URL": with_port(database_url, ports["core-postgres"]),
        },
    )
