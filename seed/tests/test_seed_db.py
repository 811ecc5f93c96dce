"""The seeder against a real PostgreSQL (database aside_test_seed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROWS = 20_000
HOT = 100
BASE_ARGS = ("--rows", str(ROWS), "--hot-emails", str(HOT), "--hot-ratio", "0.8")
SCHEMA = Path(__file__).resolve().parents[2] / "contracts" / "schema.sql"


def one_line(stderr: str) -> str:
    """The last line (progress bars come before); asserts it is the seeder's."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert lines and lines[-1].startswith("aside-seed: "), stderr
    assert "Traceback" not in stderr
    return lines[-1]


def index_definitions(conn: psycopg.Connection, schema: str = "public") -> dict[str, str]:
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'users'",
        (schema,),
    ).fetchall()
    return {name: definition.replace(f"{schema}.", "") for name, definition in rows}


def email_counts(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT email, count(*) FROM users GROUP BY email").fetchall())


@pytest.fixture(scope="module")
def seeded(
    test_db_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One default-shaped load (seed 7) shared by the read-only checks below."""
    data_dir = tmp_path_factory.mktemp("keydata")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASIDE_SEED_")}
    env.update(DATABASE_URL=test_db_url, REDIS_URL=redis_url, ASIDE_DATA_DIR=str(data_dir))
    done = subprocess.run(
        [sys.executable, "-m", "aside_seed", *BASE_ARGS, "--seed", "7", "--reset"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with psycopg.connect(test_db_url, autocommit=True) as conn:
        counts = email_counts(conn)
        row_count = conn.execute("SELECT count(*) FROM users").fetchone()[0]
        indexes = index_definitions(conn)
    return {"done": done, "dir": data_dir, "counts": counts, "rows": row_count, "indexes": indexes}


def read_json(directory: Path, name: str) -> Any:
    return json.loads((directory / name).read_text())


class TestOneLoad:
    def test_row_count_and_final_line(self, seeded: dict[str, Any]) -> None:
        assert seeded["rows"] == ROWS
        last = seeded["done"].stdout.strip().splitlines()[-1]
        assert last.startswith(f"aside-seed: {ROWS} rows in ") and "rows/s" in last

    def test_hot_cold_split_is_exact(self, seeded: dict[str, Any]) -> None:
        hot = read_json(seeded["dir"], "hot_emails.json")
        counts = seeded["counts"]
        assert len(hot) == len(set(hot)) == HOT
        assert sum(counts[e] for e in hot) == round(ROWS * 0.8)
        assert sum(c for e, c in counts.items() if e not in hot) == ROWS - round(ROWS * 0.8)

    def test_hot_emails_are_exactly_the_top_h(self, seeded: dict[str, Any]) -> None:
        hot = set(read_json(seeded["dir"], "hot_emails.json"))
        counts = seeded["counts"]
        top = sorted(counts, key=counts.__getitem__, reverse=True)[:HOT]
        assert set(top) == hot
        assert min(counts[e] for e in hot) > max(c for e, c in counts.items() if e not in hot)

    def test_cold_emails_exist_once_each(self, seeded: dict[str, Any]) -> None:
        cold = read_json(seeded["dir"], "cold_emails.json")
        assert len(cold) == len(set(cold)) == 1000
        assert all(seeded["counts"].get(e) == 1 for e in cold)

    def test_the_key_space_is_every_distinct_email_sorted(self, seeded: dict[str, Any]) -> None:
        emails = (seeded["dir"] / "emails.txt").read_text().splitlines()
        assert emails == sorted(seeded["counts"])  # each once, in order

    def test_user_ids_exist(self, seeded: dict[str, Any], db: psycopg.Connection) -> None:
        ids = read_json(seeded["dir"], "user_ids.json")
        assert len(ids) == len(set(ids)) == 1000
        found = db.execute("SELECT count(*) FROM users WHERE id = ANY(%s)", (ids,)).fetchone()
        assert found == (1000,)

    def test_meta_describes_the_table(self, seeded: dict[str, Any]) -> None:
        meta = read_json(seeded["dir"], "seed_meta.json")
        assert meta["rows"] == meta["table_rows"] == seeded["rows"] == ROWS
        assert (meta["seed"], meta["hot_emails"], meta["hot_ratio"]) == (7, HOT, 0.8)
        assert meta["index"] is False
        age = datetime.now(UTC) - datetime.fromisoformat(meta["created_at"])
        assert 0 <= age.total_seconds() < 300
        assert not list(seeded["dir"].glob(".*.tmp"))  # no temp files left

    def test_usernames_unique_and_valid(self, db: psycopg.Connection) -> None:
        row = db.execute(
            """SELECT count(DISTINCT username), count(*) FILTER (
                   WHERE username !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$') FROM users"""
        ).fetchone()
        assert row == (ROWS, 0)

    def test_emails_follow_the_contract(self, db: psycopg.Connection) -> None:
        bad = db.execute(
            r"""SELECT count(*) FROM users WHERE length(email) > 254
                OR email !~ '^[a-z0-9._-]{1,64}@[a-z0-9-]+(\.[a-z0-9-]+)+$'"""
        ).fetchone()
        assert bad == (0,)

    def test_created_at_spreads_over_five_past_years(self, db: psycopg.Connection) -> None:
        first, last, disorder = db.execute(
            """SELECT min(created_at), max(created_at),
                      count(*) FILTER (WHERE created_at < prev)
               FROM (SELECT created_at, lag(created_at) OVER (ORDER BY id) AS prev FROM users) t"""
        ).fetchone()
        assert datetime(2021, 1, 1, tzinfo=UTC) <= first < datetime(2021, 1, 10, tzinfo=UTC)
        assert datetime(2025, 12, 20, tzinfo=UTC) < last < datetime(2026, 1, 1, tzinfo=UTC)
        assert disorder == 0

    def test_indexes_are_the_schemas_and_no_email_index(
        self, seeded: dict[str, Any], db: psycopg.Connection
    ) -> None:
        db.execute("DROP SCHEMA IF EXISTS fresh CASCADE")
        db.execute("CREATE SCHEMA fresh")
        try:
            with db.transaction():
                db.execute("SET LOCAL search_path = fresh")
                db.execute(SCHEMA.read_bytes())
            assert seeded["indexes"] == index_definitions(db, "fresh")
            assert "users_email_idx" not in seeded["indexes"]
            sequence = db.execute("SELECT pg_get_serial_sequence('users', 'id')").fetchone()
            assert sequence == ("public.users_id_seq",)
        finally:
            db.execute("DROP SCHEMA fresh CASCADE")

    def test_pages_are_frozen_so_the_first_scan_writes_nothing(
        self, db: psycopg.Connection
    ) -> None:
        pages, visible = db.execute(
            "SELECT relpages, relallvisible FROM pg_class WHERE relname = 'users'"
        ).fetchone()
        assert pages > 0 and visible == pages
        plan = db.execute(
            "EXPLAIN (ANALYZE, BUFFERS) SELECT count(*) FROM users WHERE email = 'x@y.z'"
        ).fetchall()
        text = "\n".join(line for (line,) in plan)
        assert "Seq Scan" in text and "dirtied" not in text and "written" not in text


def test_same_seed_same_rows_in_every_format(seed, db, hash_table) -> None:
    seed.ok(*BASE_ARGS, "--seed", "11", "--reset")
    first = hash_table(db)
    hot_first = seed.read("hot_emails.json")
    seed.ok(*BASE_ARGS, "--seed", "11", "--reset", "--copy-format", "text")
    assert hash_table(db) == first
    seed.ok(*BASE_ARGS, "--seed", "11", "--reset", "--copy-format", "rows")
    assert hash_table(db) == first
    assert seed.read("hot_emails.json") == hot_first
    seed.ok(*BASE_ARGS, "--seed", "12", "--reset")
    assert hash_table(db) != first
    assert set(seed.read("hot_emails.json")).isdisjoint(hot_first)


def test_non_empty_table_needs_reset(seed, db, hash_table) -> None:
    seed.ok(*BASE_ARGS, "--seed", "7", "--reset")
    before = hash_table(db)
    done = seed(*BASE_ARGS, "--seed", "8")
    assert done.returncode == 1
    assert "already has rows; pass --reset" in one_line(done.stderr)
    assert hash_table(db) == before


def test_index_option_creates_the_email_index(seed, db) -> None:
    seed.ok(*BASE_ARGS, "--seed", "7", "--reset", "--index")
    indexes = index_definitions(db)
    assert indexes["users_email_idx"] == "CREATE INDEX users_email_idx ON users USING btree (email)"
    assert seed.read("seed_meta.json")["index"] is True
    seed.ok(*BASE_ARGS, "--seed", "7", "--reset")
    assert "users_email_idx" not in index_definitions(db)


def test_identity_continues_after_the_seeded_ids(seed, db) -> None:
    seed.ok("--rows", "3000", "--hot-emails", "10", "--seed", "7", "--reset")
    new_id = db.execute(
        "INSERT INTO users (username, email) VALUES ('after_seed', 'a@example.com') RETURNING id"
    ).fetchone()
    assert new_id == (3001,)


def test_failure_mid_copy_keeps_the_previous_data(seed, db, hash_table) -> None:
    seed.ok(*BASE_ARGS, "--seed", "7", "--reset")
    before, meta_before = hash_table(db), seed.read("seed_meta.json")
    done = seed(*BASE_ARGS, "--seed", "8", "--reset", ASIDE_SEED_FAIL_AFTER_ROWS="10000")
    assert done.returncode == 1
    assert "ASIDE_SEED_FAIL_AFTER_ROWS" in one_line(done.stderr)
    assert hash_table(db) == before
    assert seed.read("seed_meta.json") == meta_before
    assert db.execute("SELECT to_regclass('users_new')").fetchone() == (None,)


def test_killed_load_keeps_the_previous_data(seed, db, hash_table, wait_for) -> None:
    seed.ok(*BASE_ARGS, "--seed", "7", "--reset")
    before = hash_table(db)
    process = subprocess.Popen(
        seed.command("--rows", "400000", "--seed", "9", "--reset"),
        env=seed.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def copying() -> bool:
            assert process.poll() is None, "the load finished before it could be killed"
            row = db.execute(
                """SELECT count(*) FROM pg_stat_progress_copy p
                   JOIN pg_stat_activity a USING (pid)
                   WHERE a.application_name = 'aside-seed' AND p.tuples_processed > 0
                     AND a.datname = current_database()"""
            ).fetchone()
            return bool(row and row[0])

        wait_for(copying, 60, "the COPY to start")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def seeder_gone() -> bool:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'aside-seed'"
        ).fetchone()
        return row == (0,)

    wait_for(seeder_gone, 30, "the killed seeder's backend to end")
    assert hash_table(db) == before
    seed.ok("--rows", "3000", "--hot-emails", "10", "--seed", "7", "--reset")
    assert db.execute("SELECT count(*) FROM users").fetchone() == (3000,)


def test_leftover_new_table_is_dropped_by_the_next_run(seed, db) -> None:
    """A run killed after its COPY committed leaves users_new: the next run copes."""
    seed.ok("--rows", "3000", "--hot-emails", "10", "--seed", "7", "--reset")
    db.execute("CREATE TABLE users_new (LIKE users INCLUDING ALL)")
    db.execute("INSERT INTO users_new (username, email) VALUES ('x', 'x@y.z')")
    seed.ok("--rows", "4000", "--hot-emails", "10", "--seed", "7", "--reset")
    assert db.execute("SELECT count(*) FROM users").fetchone() == (4000,)
    assert db.execute("SELECT to_regclass('users_new')").fetchone() == (None,)


def test_swap_gives_up_behind_a_long_reader(seed, db, hash_table, test_db_url) -> None:
    seed.ok("--rows", "3000", "--hot-emails", "10", "--seed", "7", "--reset")
    before, meta_before = hash_table(db), seed.read("seed_meta.json")
    with psycopg.connect(test_db_url) as reader:  # holds ACCESS SHARE until rollback
        reader.execute("SELECT count(*) FROM users").fetchone()
        done = seed("--rows", "3000", "--hot-emails", "10", "--seed", "8", "--reset",
                    "--lock-timeout", "0.3")  # fmt: skip
        reader.rollback()
    assert done.returncode == 1
    assert "could not swap in the new data" in one_line(done.stderr)
    assert hash_table(db) == before
    assert seed.read("seed_meta.json") == meta_before
    assert db.execute("SELECT to_regclass('users_new')").fetchone() == (None,)
