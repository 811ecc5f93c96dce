"""What a seed does to the services reading and writing the database it
replaces: the write gate, the idempotency keys, the cache and its flush."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from aside_seed import cache, loader
from aside_seed.config import load_config

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
ARGS = ("--rows", "5000", "--hot-emails", "10", "--reset")


@pytest.fixture
def rdb(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    client.flushdb()
    yield client
    client.close()


def gate_holders(db: psycopg.Connection) -> list[str]:
    """Lock modes held on the write gate (key < 2^32: classid 0, objid the key)."""
    rows = db.execute(
        """SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND classid = 0 AND objid = %s""",
        (loader.WRITE_GATE_LOCK,),
    ).fetchall()
    return [row[0] for row in rows]


def test_locks_and_names_are_the_contracts():
    seeding = json.loads((CONTRACTS / "seeding.json").read_text())
    assert seeding["write_gate_lock"] == loader.WRITE_GATE_LOCK
    assert seeding["seeder_lock"] == loader.ADVISORY_LOCK_KEY
    assert seeding["cache_pattern"] == cache.CACHE_PATTERN
    tiers = json.loads((CONTRACTS / "cache.json").read_text())["tiers"]
    assert tiers["invalidation_channel"] == cache.INVALIDATION_CHANNEL
    assert set(json.loads(cache.flush_message())) == set(tiers["flush_message"])
    errors = json.loads((CONTRACTS / "errors.json").read_text())
    assert errors["codes"][seeding["error_code"]] == seeding["status"] == 503


def test_the_gate_is_closed_while_the_seeder_loads(
    seed, db: psycopg.Connection, wait_for: Callable[[Callable[[], bool], float, str], None]
) -> None:
    process = subprocess.Popen(
        seed.command("--rows", "200000", "--reset"),
        env=seed.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: "ExclusiveLock" in gate_holders(db), 60, "the seeder to close the gate")
        # What every write of the core does first: refused, at once.
        with db.transaction():
            refused = db.execute(
                "SELECT pg_try_advisory_xact_lock_shared(%s)", (loader.WRITE_GATE_LOCK,)
            ).fetchone()
        assert refused == (False,)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert gate_holders(db) == []
    assert "writes refused" in stderr and "cache flush" in stderr


def test_the_swap_clears_the_idempotency_keys(seed, db: psycopg.Connection, rdb) -> None:
    seed.ok(*ARGS)
    db.execute(
        "INSERT INTO idempotency_keys (key, request_hash, status, response) "
        "VALUES ('k1', '\\x00', 201, '{\"id\": 7}')"
    )
    seed.ok(*ARGS)
    assert db.execute("SELECT count(*) FROM idempotency_keys").fetchone() == (0,)


def test_the_cache_is_flushed_and_the_l1_tiers_told(seed, db: psycopg.Connection, rdb) -> None:
    seed.ok(*ARGS)
    for key in (
        "aside:v1:{count:a@example.com}",
        "aside:v1:{user:1}",
        "aside:v1:{user:2}",
        "aside:v1:{user:3}:lease",
    ):
        rdb.set(key, "old")
    rdb.set("aside:test:other", "kept")
    pubsub = rdb.pubsub()
    pubsub.subscribe(cache.INVALIDATION_CHANNEL)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    seed.ok(*ARGS)
    assert sorted(rdb.keys("*")) == [b"aside:test:other"]
    # Other suites' cores may publish on the same channel meanwhile: look for ours.
    deadline = time.monotonic() + 5
    flushes = 0
    while not flushes and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message is not None and message["type"] == "message":
            flushes += json.loads(message["data"]).get("flush") is True
    pubsub.close()
    assert flushes == 1
    # The flush the swap owed was run by the seeder itself and cleared.
    assert db.execute("SELECT count(*) FROM cache_invalidations").fetchone() == (0,)


def script_lines(text: str) -> list[str]:
    """The statements of a Lua script: no comments, blank lines or indentation."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("--")]


def test_the_flush_script_is_the_contracts() -> None:
    # The seeder runs the contract's file itself (the core's Go copy is checked
    # against it in core-go/internal/cache).
    assert load_config({}).flush_script_path == CONTRACTS / "flush_cache.lua"
    assert script_lines((CONTRACTS / "flush_cache.lua").read_text())


def test_a_seeder_gone_after_its_swap_leaves_the_flush_owed(
    seed, db: psycopg.Connection, rdb
) -> None:
    """What a kill between the swap and the flush leaves: the new table in, the
    gate open, the cache untouched, and the flush owed in the core's outbox
    (which the core's relay then runs: gateway/tests/test_seed_serving.py)."""
    seed.ok(*ARGS)
    rdb.set("aside:v1:{count:a@example.com}", "old")
    done = seed("--rows", "6000", "--hot-emails", "10", "--reset", ASIDE_SEED_EXIT_AFTER_SWAP="1")
    assert done.returncode == 3, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("aside-seed: stopped after the swap by ASIDE_SEED_EXIT_AFTER_SWAP")
    )
    assert db.execute("SELECT count(*) FROM users").fetchone() == (6000,)
    assert rdb.get("aside:v1:{count:a@example.com}") == b"old"
    owed = db.execute("SELECT kind, user_id FROM cache_invalidations").fetchall()
    assert owed == [("flush", None)]
    assert gate_holders(db) == []
    # The next run flushes the cache and clears its own row; the old one
    # stays for a relay (one more flush of an already empty cache).
    seed.ok(*ARGS)
    assert rdb.get("aside:v1:{count:a@example.com}") is None
    assert db.execute("SELECT count(*) FROM cache_invalidations").fetchone() == (1,)


def test_redis_unreachable_is_refused_before_the_load(seed, db: psycopg.Connection) -> None:
    seed.ok(*ARGS)
    before = db.execute("SELECT count(*), max(id) FROM users").fetchone()
    done = seed("--rows", "3000", "--reset", REDIS_URL="redis://127.0.0.1:1/0")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("aside-seed: cannot reach Redis at 127.0.0.1:1/0 (REDIS_URL): ")
    assert "Traceback" not in done.stderr
    assert db.execute("SELECT count(*), max(id) FROM users").fetchone() == before
    assert gate_holders(db) == []
