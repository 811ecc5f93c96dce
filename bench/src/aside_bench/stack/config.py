"""Every setting aside-bench reads from the environment (defaults: infra/env.sh's)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULTS = {
    "GATEWAY_URL": "http://127.0.0.1:28000",
    "CORE_URL": "http://127.0.0.1:28080",
    "INFLUXDB_URL": "http://127.0.0.1:28086/aside",
    "PROMETHEUS_URL": "http://127.0.0.1:29090",
    "DATABASE_URL": "postgresql://aside@127.0.0.1:25432/aside",
    "REDIS_URL": "redis://127.0.0.1:26379/0",
}


class ConfigError(Exception):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Settings:
    gateway_url: str
    influx_base: str  # scheme://host:port
    influx_db: str
    prometheus_url: str
    database_url: str
    redis_url: str
    driver_bin: Path  # the load driver, aside-load (bench/driver)
    root: Path
    default_data_dir: Path  # the seeder's files (ASIDE_DATA_DIR, the seeder's too)
    core_url: str = DEFAULTS["CORE_URL"]  # the calibration's other /healthz
    redis_mode: str = "standalone"  # what REDIS_URL names (stack/redisclient.py)
    # The cost model's prices (records/prices.py): a vCPU-hour and a GiB-hour.
    price_vcpu_hour: float = 0.0332
    price_gib_hour: float = 0.00445

    @property
    def default_reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def influx_url(self) -> str:
        return f"{self.influx_base}/{self.influx_db}"


def _http_url(name: str, env: dict[str, str]) -> str:
    return _scheme_url(name, env, ("http", "https"), "an http(s)").rstrip("/")


def _scheme_url(name: str, env: dict[str, str], schemes: tuple[str, ...], what: str = "") -> str:
    value = env.get(name) or DEFAULTS[name]
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.netloc:
        raise ConfigError(f"{name} must be {what or 'a ' + '/'.join(schemes)} URL, got {value!r}")
    return value


def _influx(env: dict[str, str]) -> tuple[str, str]:
    value = _http_url("INFLUXDB_URL", env)
    parts = urlsplit(value)
    db = parts.path.strip("/")
    if not db or "/" in db:
        raise ConfigError(f"INFLUXDB_URL must end with the database name (…/aside), got {value!r}")
    return f"{parts.scheme}://{parts.netloc}", db


def _root(env: dict[str, str]) -> Path:
    if env.get("ASIDE_ROOT"):
        root = Path(env["ASIDE_ROOT"])
        if not (root / "bench" / "driver").is_dir():
            raise ConfigError(f"ASIDE_ROOT must be the Aside repository, got {root}")
        return root
    # bench/src/aside_bench/stack/config.py -> repository root
    return Path(__file__).resolve().parents[4]


def load(env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ) if env is None else env
    root = _root(env)
    bin_dir = Path(env.get("ASIDE_BIN_DIR") or root / "bin")
    influx_base, influx_db = _influx(env)
    return Settings(
        gateway_url=_http_url("GATEWAY_URL", env),
        influx_base=influx_base,
        influx_db=influx_db,
        prometheus_url=_http_url("PROMETHEUS_URL", env),
        database_url=_scheme_url("DATABASE_URL", env, ("postgresql", "postgres")),
        redis_url=_scheme_url("REDIS_URL", env, ("redis",)),
        driver_bin=bin_dir / "aside-load",
        root=root,
        default_data_dir=Path(env.get("ASIDE_DATA_DIR") or root / "bench" / "data"),
        core_url=_http_url("CORE_URL", env),
        redis_mode=_redis_mode(env),
        price_vcpu_hour=_price("ASIDE_PRICE_VCPU_HOUR", env, Settings.price_vcpu_hour),
        price_gib_hour=_price("ASIDE_PRICE_GIB_HOUR", env, Settings.price_gib_hour),
    )


def _price(name: str, env: dict[str, str], default: float) -> float:
    """A price per hour: a number >= 0 (0 leaves that resource out of the cost)."""
    text = (env.get(name) or "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(f"{name} must be a price per hour >= 0, got {text!r}")
    return value


REDIS_MODES = ("standalone", "cluster")


def _redis_mode(env: dict[str, str]) -> str:
    """standalone, or cluster (REDIS_URL one node of it); no Sentinel."""
    value = (env.get("REDIS_MODE") or "").strip() or "standalone"
    if value not in REDIS_MODES:
        raise ConfigError(f"REDIS_MODE must be one of {'|'.join(REDIS_MODES)}, got {value!r}")
    return value
