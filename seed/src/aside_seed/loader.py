"""PostgreSQL side of the seeder: load into users_new, index it, swap it in.

`users` is only touched by the swap, one short transaction at the end, so a
failure (or a kill) at any earlier point leaves the previous data in place. A
users_new left behind by a killed run is dropped by the next run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from tqdm import tqdm

from aside_seed.datagen import Block
from aside_seed.encode import (
    BINARY_HEADER,
    BINARY_TRAILER,
    copy_statement,
    encode_binary,
    encode_text,
    python_rows,
)
from aside_seed.errors import SeedError

TABLE = "users"
NEW_TABLE = "users_new"
IDEMPOTENCY_TABLE = "idempotency_keys"
# The core's outbox: the swap records there, in its own transaction, the cache
# flush it owes (contracts/schema.sql, kind 'flush').
OUTBOX_TABLE = "cache_invalidations"
EMAIL_INDEX = "users_email_idx"
CONNECT_TIMEOUT_S = 5
SWAP_TRIES = 3
# Any other step waits at most this long for a lock instead of hanging.
LOCK_TIMEOUT = "30s"
# One seeder per database: a second one would drop the first one's users_new.
ADVISORY_LOCK_KEY = 0x5EED_A51DE
# The write gate (contracts/seeding.json): held EXCLUSIVE for the whole load,
# while every write of the core needs it SHARED, so no write commits into the
# table the swap drops.
WRITE_GATE_LOCK = 0x5EED_0A7E


@dataclass(frozen=True)
class IndexSpec:
    """An index built on users_new after COPY, renamed to `name` by the swap."""

    name: str
    definition: str  # CREATE ... with {name} and {table} to fill in
    constraint: str | None  # "PRIMARY KEY" / "UNIQUE" when it backs a constraint

    @property
    def build_name(self) -> str:
        return self.name.replace(TABLE, NEW_TABLE, 1)


# The indexes of contracts/schema.sql (a test checks they match a fresh apply),
# longest build first so two builds in parallel finish close together.
SCHEMA_INDEXES = (
    IndexSpec("users_username_key", "UNIQUE INDEX {name} ON {table} (username)", "UNIQUE"),
    IndexSpec("users_pkey", "UNIQUE INDEX {name} ON {table} (id)", "PRIMARY KEY"),
)
EMAIL_INDEX_SPEC = IndexSpec(EMAIL_INDEX, "INDEX {name} ON {table} (email)", None)


def describe_database(url: str) -> str:
    """host:port/dbname without user or password, for messages."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise SeedError(f"DATABASE_URL is not a valid PostgreSQL URL: {first_line(exc)}") from None
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    return f"{host}:{parts.get('port') or 5432}/{parts.get('dbname') or '?'}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(url: str) -> psycopg.Connection:
    where = describe_database(url)
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="aside-seed",
        )
    except psycopg.Error as exc:
        raise SeedError(f"cannot connect to PostgreSQL at {where}: {first_line(exc)}") from None
    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
    return conn


def take_seeder_lock(conn: psycopg.Connection) -> None:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)).fetchone()
    if not row or not row[0]:
        raise SeedError("another aside-seed is loading this database; wait for it to finish")


def close_write_gate(conn: psycopg.Connection) -> None:
    """Takes the gate EXCLUSIVE: from the moment this waits, writes are refused
    (their try lock fails behind a waiting exclusive request); it returns once the
    writes in flight have committed. Released by open_write_gate or disconnection."""
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (WRITE_GATE_LOCK,))
    except psycopg.errors.LockNotAvailable:
        raise SeedError(
            f"writes in flight held the write gate for {LOCK_TIMEOUT}; nothing was changed"
        ) from None


def open_write_gate(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (WRITE_GATE_LOCK,))


def apply_schema(conn: psycopg.Connection, schema_sql: str) -> None:
    conn.execute(schema_sql.encode())


def table_has_rows(conn: psycopg.Connection) -> bool:
    row = conn.execute(sql.SQL("SELECT EXISTS (SELECT FROM {})").format(sql.Identifier(TABLE)))
    return bool(row.fetchone()[0])  # type: ignore[index]


def drop_new_table(conn: psycopg.Connection) -> None:
    """Drops a users_new left by an earlier run that died (its sequence goes with it)."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NEW_TABLE)))


def copy_blocks(
    conn: psycopg.Connection,
    blocks: Iterable[Block],
    total_rows: int,
    copy_format: str,
    fail_after_rows: int | None = None,
) -> int:
    """Creates users_new and fills it in one transaction, so it exists only if
    every row made it (and COPY FREEZE is allowed). Returns the rows written."""
    written = 0
    create = sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL EXCLUDING INDEXES)").format(
        sql.Identifier(NEW_TABLE), sql.Identifier(TABLE)
    )
    bar = tqdm(
        total=total_rows, desc="aside-seed: copy", unit=" rows", unit_scale=True,
        file=sys.stderr, mininterval=0.5, smoothing=0.1,
    )  # fmt: skip
    with bar, conn.transaction(), conn.cursor() as cur:
        cur.execute(create)
        with cur.copy(copy_statement(NEW_TABLE, copy_format)) as copy:
            write_block = _block_writer(copy, copy_format)
            for block in blocks:
                write_block(block)
                written += len(block)
                bar.update(len(block))
                if fail_after_rows is not None and written >= fail_after_rows:
                    raise SeedError(
                        f"load stopped after {written} rows by ASIDE_SEED_FAIL_AFTER_ROWS"
                        f"={fail_after_rows} (a test hook); the previous data is unchanged"
                    )
            if copy_format == "binary":
                copy.write(BINARY_TRAILER)
    return written


def _block_writer(copy: psycopg.Copy, copy_format: str) -> Callable[[Block], None]:
    if copy_format == "binary":
        copy.write(BINARY_HEADER)
        return lambda block: copy.write(encode_binary(block))
    if copy_format == "text":
        return lambda block: copy.write(encode_text(block))
    # "rows": psycopg formats each row, header and trailer itself (kept to
    # measure it against the others).
    copy.set_types(["int8", "text", "text", "timestamptz"])

    def write_rows(block: Block) -> None:
        for row in python_rows(block):
            copy.write_row(row)

    return write_rows


def build_indexes(conn: psycopg.Connection, url: str, with_email_index: bool) -> None:
    """Builds the indexes two at a time (one per core), each on its own
    connection: CREATE INDEX takes a SHARE lock, which does not block another
    CREATE INDEX on the same table. Then attaches the constraints."""
    specs = [*SCHEMA_INDEXES, *([EMAIL_INDEX_SPEC] if with_email_index else [])]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(_build_index, url, spec) for spec in specs]
        for future in futures:
            future.result()
    with conn.transaction():
        for spec in SCHEMA_INDEXES:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {} USING INDEX {}").format(
                    sql.Identifier(NEW_TABLE),
                    sql.Identifier(spec.build_name),
                    sql.SQL(spec.constraint or ""),
                    sql.Identifier(spec.build_name),
                )
            )


def _build_index(url: str, spec: IndexSpec) -> None:
    statement = sql.SQL("CREATE " + spec.definition).format(
        name=sql.Identifier(spec.build_name), table=sql.Identifier(NEW_TABLE)
    )
    with connect(url) as conn:
        conn.execute(statement)


def analyze_new_table(conn: psycopg.Connection) -> None:
    # COPY FREEZE already left every page frozen and all-visible; ANALYZE
    # gives the planner its statistics and records relallvisible.
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(NEW_TABLE)))


def swap_in(
    conn: psycopg.Connection,
    with_email_index: bool,
    lock_timeout_s: float,
    also: Callable[[psycopg.Connection], None] | None = None,
) -> int:
    """Replaces users by users_new in one short transaction, retried a few times
    when a long reader holds `users`: never hangs, never leaves half a table.
    `also` swaps other tables in the same transaction (the tracks). Returns the
    id of the outbox row that owes the cache flush (run_owed_flush)."""
    for attempt in range(1, SWAP_TRIES + 1):
        try:
            return _swap_once(conn, with_email_index, lock_timeout_s, also)
        except psycopg.errors.LockNotAvailable:
            if attempt == SWAP_TRIES:
                raise SeedError(
                    f"could not swap in the new data: another session held table {TABLE} "
                    f"for {lock_timeout_s:g} s, {SWAP_TRIES} times; the previous data is unchanged"
                ) from None
    raise AssertionError("unreachable")


def _swap_once(
    conn: psycopg.Connection,
    with_email_index: bool,
    lock_timeout_s: float,
    also: Callable[[psycopg.Connection], None] | None = None,
) -> int:
    ident = sql.Identifier
    with conn.transaction():
        timeout = sql.Literal(f"{max(1, round(lock_timeout_s * 1000))}ms")
        conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(timeout))
        constraints = [(spec.build_name, spec.name) for spec in SCHEMA_INDEXES]
        indexes = [(EMAIL_INDEX_SPEC.build_name, EMAIL_INDEX_SPEC.name)] if with_email_index else []
        replace_table(conn, TABLE, NEW_TABLE, constraints, indexes)
        # Idempotency keys answer with ids of the old table, which now belong to
        # other users: they go with it.
        conn.execute(sql.SQL("TRUNCATE {}").format(ident(IDEMPOTENCY_TABLE)))
        # The core inserts without an id: its next one must follow the seeded rows.
        conn.execute(
            sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), max(id)) FROM {}").format(
                sql.Literal(TABLE), ident(TABLE)
            )
        )
        if also is not None:
            also(conn)
        # Owed with the swap itself: if this run dies before its flush, a core's
        # outbox relay runs it (its age counts from here, not from the wait
        # for the table lock).
        owed = conn.execute(
            sql.SQL(
                "INSERT INTO {} (kind, created_at) VALUES ('flush', clock_timestamp()) RETURNING id"
            ).format(ident(OUTBOX_TABLE))
        ).fetchone()
    return int(owed[0])  # type: ignore[index]


def replace_table(
    conn: psycopg.Connection,
    table: str,
    new_table: str,
    constraints: Sequence[tuple[str, str]],
    indexes: Sequence[tuple[str, str]] = (),
) -> None:
    """Drops `table` and gives `new_table`, its constraints, indexes and
    identity sequence the old names ((built name, final name) pairs), inside
    the caller's transaction: readers see the old table or the new one."""
    ident = sql.Identifier
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ident(table)))
    old_sequence = identity_sequence(conn, table)
    new_sequence = identity_sequence(conn, new_table)
    conn.execute(sql.SQL("DROP TABLE {}").format(ident(table)))
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(ident(new_table), ident(table)))
    for built, final in constraints:
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                ident(table), ident(built), ident(final)
            )
        )
    for built, final in indexes:
        conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(ident(built), ident(final)))
    conn.execute(
        sql.SQL("ALTER SEQUENCE {}.{} RENAME TO {}").format(
            ident(new_sequence[0]), ident(new_sequence[1]), ident(old_sequence[1])
        )
    )


def run_owed_flush(conn: psycopg.Connection, owed_id: int, flush: Callable[[], object]) -> None:
    """Runs the flush the swap owes and deletes its outbox row, in one
    transaction holding the row's lock, so no core's relay runs it meanwhile.
    If flush fails the row stays, and a relay runs it once Redis answers; if a
    relay has run it already (this run was slow to get here), nothing is left
    to do."""
    with conn.transaction():
        owed = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(
                sql.Identifier(OUTBOX_TABLE)
            ),
            (owed_id,),
        ).fetchone()
        if owed is None:
            return
        flush()
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE id = %s").format(sql.Identifier(OUTBOX_TABLE)),
            (owed_id,),
        )


def identity_sequence(conn: psycopg.Connection, table: str) -> tuple[str, str]:
    """(schema, name) of the identity sequence of `table` (users, tracks and their new tables)."""
    row = conn.execute(
        """
        SELECT n.nspname, s.relname
        FROM pg_depend d
        JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
        JOIN pg_namespace n ON n.oid = s.relnamespace
        WHERE d.refobjid = %s::regclass AND d.deptype = 'i'
        """,
        (table,),
    ).fetchone()
    if row is None:
        raise SeedError(f"table {table} has no identity sequence; is contracts/schema.sql applied?")
    return row[0], row[1]


def count_rows(conn: psycopg.Connection) -> tuple[int, int]:
    row = conn.execute(
        sql.SQL("SELECT count(*), coalesce(max(id), 0) FROM {}").format(sql.Identifier(TABLE))
    ).fetchone()
    return int(row[0]), int(row[1])  # type: ignore[index]
