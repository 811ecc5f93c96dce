"""The seeded table and the seeder's files (bench/data), checked to agree."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, connect, flush_cache

# The users the mixed scenario, the fault suite and the soak create.
BENCH_USERNAME_PATTERN = "load.%"


@dataclass(frozen=True)
class SeedData:
    meta: dict[str, Any]
    hot: list[str]
    cold: list[str]
    data_dir: Path
    indexed: bool = field(default=False)

    def read_emails(self, cold_sample: int) -> list[str]:
        """Every email the read mix asks for; hot last, so they are filled and expire last."""
        return self.cold[:cold_sample] + self.hot


def load_seed_list(path: Path, key: str, kind: type) -> list[Any]:
    """A non-empty JSON list the seeder wrote (bare, or under `key` in an object)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise StackError(f"cannot read {path}: {error}; run `make seed`") from error
    if isinstance(value, dict):
        value = value.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, kind) for v in value):
        raise StackError(f"{path} is not a non-empty list of {key}; run `make seed`")
    return value


def email_index_exists(conn: psycopg.Connection) -> bool:
    """True when some index of users leads with the email column."""
    row = conn.execute(
        """
        SELECT EXISTS (
            SELECT 1 FROM pg_index i
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
            WHERE i.indrelid = 'users'::regclass AND a.attname = 'email')
        """
    ).fetchone()
    return bool(row and row[0])


def remove_bench_users(conn: psycopg.Connection) -> int:
    """Delete users an interrupted mixed step left behind; returns how many."""
    cursor = conn.execute("DELETE FROM users WHERE username LIKE %s", (BENCH_USERNAME_PATTERN,))
    return cursor.rowcount


def check_seed(settings: Settings, data_dir: Path) -> SeedData:
    """The table checked against the seeder's files, an interrupted step's users removed."""
    meta_path = data_dir / "seed_meta.json"
    if not meta_path.exists():
        raise StackError(f"{meta_path} not found: the table is not seeded; run `make seed`")
    try:
        meta = json.loads(meta_path.read_text())
        expected_rows = int(meta["rows"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StackError(
            f"{meta_path} has no row count ({error}); run `make seed` again"
        ) from error
    hot = load_seed_list(data_dir / "hot_emails.json", "emails", str)
    cold = load_seed_list(data_dir / "cold_emails.json", "emails", str)
    with connect(settings) as conn:
        try:
            leftovers = remove_bench_users(conn)
            rows = conn.execute("SELECT count(*) FROM users").fetchone()[0]
            indexed = email_index_exists(conn)
        except psycopg.errors.UndefinedTable as error:
            raise StackError("the users table does not exist; run `make seed`") from error
    if leftovers:
        # Their counts may sit in the cache; the first step prepares it anyway.
        flush_cache(settings)
    if rows != expected_rows:
        raise StackError(
            f"the users table has {rows} rows but {meta_path} says {expected_rows}; "
            "run `make seed` again"
        )
    if bool(meta.get("index", False)) != indexed:
        raise StackError(
            f"{meta_path} says index={meta.get('index')} but the table "
            f"{'has' if indexed else 'has no'} email index; run `make seed` again"
        )
    return SeedData(meta=meta, hot=hot, cold=cold, data_dir=data_dir, indexed=indexed)
