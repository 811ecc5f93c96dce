"""Every environment variable aside-seed reads, read here and nowhere else."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aside_seed.errors import UsageError

DEFAULT_DATABASE_URL = "postgresql://aside@127.0.0.1:25432/aside"
DEFAULT_REDIS_URL = "redis://127.0.0.1:26379/0"
# What REDIS_URL names (the gateway's and the core's REDIS_MODE alike).
REDIS_MODES = ("standalone", "cluster", "sentinel")
# ASIDE_PROFILE, as the gateway and the core read it; production unless set
# (infra/env.sh sets lab for the native stack).
PROFILES = ("lab", "production")
# Failure hooks the tests use; refused outside the lab profile.
TEST_HOOKS = ("ASIDE_SEED_FAIL_AFTER_ROWS", "ASIDE_SEED_EXIT_AFTER_SWAP")
# seed/src/aside_seed/config.py -> the repository root is three folders up.
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Config:
    database_url: str
    # The cache the gateways read: flushed after the swap.
    redis_url: str
    # Where hot_emails.json, cold_emails.json, user_ids.json and seed_meta.json go.
    data_dir: Path
    schema_path: Path
    # The cache flush every party runs alike (the core's relay too).
    flush_script_path: Path
    # Test-only: abort the COPY after this many rows (ASIDE_SEED_FAIL_AFTER_ROWS).
    fail_after_rows: int | None
    # Test-only: exit right after the swap, before the cache flush, as a seeder
    # killed there would (ASIDE_SEED_EXIT_AFTER_SWAP=1).
    exit_after_swap: bool = False
    # standalone, cluster (REDIS_URL one node: the flush runs on every
    # primary) or sentinel (REDIS_URL a Sentinel, asked for this master).
    redis_mode: str = "standalone"
    redis_sentinel_master: str | None = None


def load_config(env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    root = Path(env.get("ASIDE_ROOT") or REPO_ROOT)
    data_dir = env.get("ASIDE_DATA_DIR") or str(root / "bench" / "data")
    _refuse_hooks_outside_lab(env)
    return Config(
        database_url=env.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
        redis_url=env.get("REDIS_URL") or DEFAULT_REDIS_URL,
        data_dir=Path(data_dir),
        schema_path=root / "contracts" / "schema.sql",
        flush_script_path=root / "contracts" / "flush_cache.lua",
        fail_after_rows=_optional_count(env, "ASIDE_SEED_FAIL_AFTER_ROWS"),
        exit_after_swap=_flag(env, "ASIDE_SEED_EXIT_AFTER_SWAP"),
        redis_mode=_redis_mode(env),
        redis_sentinel_master=_sentinel_master(env),
    )


def _profile(env: Mapping[str, str]) -> str:
    raw = env.get("ASIDE_PROFILE", "").strip() or "production"
    if raw not in PROFILES:
        raise UsageError(f"ASIDE_PROFILE must be one of {'|'.join(PROFILES)}, got {raw!r}")
    return raw


def _refuse_hooks_outside_lab(env: Mapping[str, str]) -> None:
    """A failure hook that is set outside the lab is an error (EXIT_AFTER_SWAP=0
    is its documented "off"; FAIL_AFTER_ROWS has no such value)."""
    if _profile(env) == "lab":
        return
    off = {"ASIDE_SEED_FAIL_AFTER_ROWS": ("",), "ASIDE_SEED_EXIT_AFTER_SWAP": ("", "0")}
    for name in TEST_HOOKS:
        if env.get(name, "").strip() not in off[name]:
            raise UsageError(f"{name} is a test hook, refused unless ASIDE_PROFILE=lab")


def _redis_mode(env: Mapping[str, str]) -> str:
    raw = env.get("REDIS_MODE", "").strip() or "standalone"
    if raw not in REDIS_MODES:
        raise UsageError(f"REDIS_MODE must be one of {'|'.join(REDIS_MODES)}, got {raw!r}")
    return raw


def _sentinel_master(env: Mapping[str, str]) -> str | None:
    master = env.get("REDIS_SENTINEL_MASTER", "").strip() or None
    if _redis_mode(env) == "sentinel" and master is None:
        raise UsageError("REDIS_SENTINEL_MASTER is required when REDIS_MODE=sentinel")
    return master


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip()
    if raw not in ("", "0", "1"):
        raise UsageError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _optional_count(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise UsageError(f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)
