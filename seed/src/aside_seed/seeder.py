"""One seeding run, start to finish."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg

from aside_seed import cache, keyfiles, loader, tracks
from aside_seed.cli import Options
from aside_seed.config import Config
from aside_seed.datagen import DataShape, LocaleParts, RowMaker, build_parts, make_hot_emails
from aside_seed.errors import SeedError

# The exit status of the ASIDE_SEED_EXIT_AFTER_SWAP test hook.
EXIT_AFTER_SWAP_STATUS = 3


@dataclass
class Summary:
    rows: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class KeyData:
    hot: list[str]
    cold: list[str]
    ids: list[int]
    emails: list[str]  # every distinct email of the table: the key space
    meta: dict[str, Any]


@contextmanager
def _phase(phases: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    phases[name] = time.perf_counter() - started


def run(options: Options, config: Config) -> Summary:
    started = time.perf_counter()
    phases: dict[str, float] = {}
    data_dir = options.data_dir or config.data_dir
    shape = DataShape(options.rows, options.seed, options.hot_emails, options.hot_ratio)
    schema_sql = _read_contract(config.schema_path, "the schema")
    # Read before anything changes: after the swap a missing script would
    # leave the flush to the core.
    flush_script = _read_contract(config.flush_script_path, "the cache flush script")
    with loader.connect(config.database_url) as conn:
        try:
            keys = _load(conn, options, config, shape, schema_sql, flush_script, data_dir, phases)
        except psycopg.Error as exc:
            raise SeedError(f"PostgreSQL error: {loader.first_line(exc)}") from None
    seconds = time.perf_counter() - started
    keys.meta["seconds"] = round(seconds, 3)
    keyfiles.write_key_files(data_dir, keys.hot, keys.cold, keys.ids, keys.emails, keys.meta)
    return Summary(keys.meta["table_rows"], seconds, phases)


def _read_contract(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise SeedError(f"cannot read {what} {path}: {exc.strerror}") from None


def _load(
    conn: psycopg.Connection,
    options: Options,
    config: Config,
    shape: DataShape,
    schema_sql: str,
    flush_script: str,
    data_dir: Path,
    phases: dict[str, float],
) -> KeyData:
    loader.take_seeder_lock(conn)
    loader.apply_schema(conn, schema_sql)
    if not options.reset and loader.table_has_rows(conn):
        raise SeedError(f"table {loader.TABLE} already has rows; pass --reset to replace them")
    with _phase(phases, "faker pools"):
        parts = build_parts(shape.seed)
        hot = make_hot_emails(parts, shape.seed, shape.hot_emails)
    with cache.connect(
        config.redis_url, config.redis_mode, config.redis_sentinel_master
    ) as redis_client:
        gate_closed = time.perf_counter()
        with _phase(phases, "write gate"):
            loader.close_write_gate(conn)
        flush = partial(cache.flush, redis_client, config.redis_url, flush_script)
        _load_gated(conn, flush, options, config, shape, parts, hot, data_dir, phases)
        # Counted before writes resume, which may add rows at once.
        table_rows, max_id = loader.count_rows(conn)
        if table_rows != shape.rows:
            raise SeedError(f"loaded {table_rows} rows instead of {shape.rows}")
        loader.open_write_gate(conn)
        phases["writes refused"] = time.perf_counter() - gate_closed
    with _phase(phases, "samples"):
        cold = keyfiles.sample_cold_emails(conn, shape, set(hot), options.sample_size)
        ids = keyfiles.sample_user_ids(conn, shape, options.sample_size)
        emails = keyfiles.distinct_emails(conn)
    return KeyData(hot, cold, ids, emails, _meta(options, shape, hot, table_rows, max_id))


def _load_gated(
    conn: psycopg.Connection,
    flush_cache: Callable[[], object],
    options: Options,
    config: Config,
    shape: DataShape,
    parts: list[LocaleParts],
    hot: list[str],
    data_dir: Path,
    phases: dict[str, float],
) -> None:
    """The load proper, run with the write gate closed: writes are refused from
    before the COPY until the cache holds nothing of the old table
    (contracts/README.md, "Coherence when a seed replaces the table")."""
    loader.drop_new_table(conn)
    try:
        with _phase(phases, "generate+copy"):
            loader.copy_blocks(
                conn,
                RowMaker(shape, parts, hot).blocks(),
                shape.rows,
                options.copy_format,
                config.fail_after_rows,
            )
        with _phase(phases, "indexes"):
            loader.build_indexes(conn, config.database_url, options.index)
        with _phase(phases, "analyze"):
            loader.analyze_new_table(conn)
        with _phase(phases, "tracks"):
            track_index = tracks.load(conn, shape.seed, options.tracks)
        old_meta = keyfiles.withdraw_meta(data_dir)
        with _phase(phases, "swap"):
            try:
                owed_flush = loader.swap_in(
                    conn, options.index, options.lock_timeout_s, tracks.swap_in
                )
            except BaseException:
                keyfiles.restore_meta(data_dir, old_meta)
                raise
    except BaseException:
        _drop_leftover(conn)
        raise
    tracks.write_key_file(data_dir, shape.seed, track_index)
    if config.exit_after_swap:
        _exit_after_swap()
    with _phase(phases, "cache flush"):
        loader.run_owed_flush(conn, owed_flush, flush_cache)


def _exit_after_swap() -> None:
    """The test hook ASIDE_SEED_EXIT_AFTER_SWAP: die where a kill would leave the
    new table in and the cache unflushed (no cleanup runs, as after SIGKILL)."""
    print(
        "aside-seed: stopped after the swap by ASIDE_SEED_EXIT_AFTER_SWAP (a test hook); "
        "the cache flush is left owed to the core's outbox relay",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_AFTER_SWAP_STATUS)


def _drop_leftover(conn: psycopg.Connection) -> None:
    """Best effort: a failed run should not leave users_new behind (the next run
    drops it anyway, so an error here is not worth hiding the first one)."""
    try:
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            loader.drop_new_table(conn)
            tracks.drop_new_table(conn)
    except psycopg.Error:
        pass


def _meta(
    options: Options,
    shape: DataShape,
    hot: list[str],
    table_rows: int,
    max_id: int,
) -> dict[str, Any]:
    return {
        "rows": shape.rows,
        "seed": shape.seed,
        "hot_emails": len(hot),
        "hot_ratio": shape.hot_ratio,
        "index": options.index,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "table_rows": table_rows,
        "max_id": max_id,
        "hot_rows": shape.hot_rows,
        "cold_rows": shape.rows - shape.hot_rows,
        "files": {
            "hot_emails": keyfiles.HOT_EMAILS_FILE,
            "cold_emails": keyfiles.COLD_EMAILS_FILE,
            "user_ids": keyfiles.USER_IDS_FILE,
            "tracks": tracks.TRACKS_FILE,
        },
        "copy_format": options.copy_format,
        "tracks": options.tracks,
        # The data of a seed is the same only with the same Faker and numpy.
        "faker_version": version("faker"),
        "numpy_version": version("numpy"),
        "python": sys.version.split()[0],
    }
