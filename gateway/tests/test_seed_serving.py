"""A seed under traffic: writes and cached reads through real gateways and a
real core while aside-seed replaces the users table (contracts/README.md,
"Coherence when a seed replaces the table").

This module has a database of its own (aside_test_seed_serving) and Redis DB 4,
so the seeds it runs neither replace the suite's users nor flush its cache;
its own core and gateways point at them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import redis
import requests
from gateway_helpers import (
    CONTRACTS,
    REPO,
    Proc,
    cached,
    sample,
    scrape,
    wait_until,
    with_path,
)

DB_NAME = "aside_test_seed_serving"
REDIS_DB = 4
OLD_ROWS, NEW_ROWS = 20_000, 100_000
SEED_TIMEOUT_S = 180
COUNT = "/api/v1/users/count"
USERS = "/api/v1/users"


@dataclass
class Services:
    db_url: str
    redis_url: str
    core: Proc
    gateway: Proc  # CACHE_STRATEGY l2 (Redis)
    hybrid: Proc  # CACHE_STRATEGY hybrid, L1 entries living 60 s
    data_dir: Path


@pytest.fixture(scope="module")
def services(start_core, start_gateway, tmp_path_factory) -> Iterator[Services]:
    base = os.environ.get("DATABASE_URL") or "postgresql://aside@127.0.0.1:25432/aside"
    admin = with_path(base, "/postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    db_url = with_path(base, f"/{DB_NAME}")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute((CONTRACTS / "schema.sql").read_text())
    redis_url = with_path(
        os.environ.get("REDIS_URL") or "redis://127.0.0.1:26379/0", f"/{REDIS_DB}"
    )
    redis.Redis.from_url(redis_url).flushdb()
    core = start_core(DATABASE_URL=db_url, REDIS_URL=redis_url)
    common = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "CORE_URL": core.url}
    gateway = start_gateway(**common)
    hybrid = start_gateway(**common, CACHE_STRATEGY="hybrid", CACHE_L1_TTL_SECONDS="60")
    yield Services(db_url, redis_url, core, gateway, hybrid, tmp_path_factory.mktemp("keydata"))
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def seed_command(s: Services, rows: int, seed: int) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASIDE_SEED_")}
    env.update(DATABASE_URL=s.db_url, REDIS_URL=s.redis_url, ASIDE_DATA_DIR=str(s.data_dir))
    env.update(ASIDE_ROOT=str(REPO), PYTHONUNBUFFERED="1")
    args = ["--rows", str(rows), "--seed", str(seed), "--hot-emails", "50", "--reset"]
    return [sys.executable, "-m", "aside_seed", *args], env


def run_seed(s: Services, rows: int, seed: int) -> None:
    cmd, env = seed_command(s, rows, seed)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=SEED_TIMEOUT_S)
    assert done.returncode == 0, done.stderr


def read_json(s: Services, name: str) -> list:
    return json.loads((s.data_dir / name).read_text())


def count_of(base: str, email: str) -> int:
    answer = requests.get(base + COUNT, params={"email": email}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["count"]


def user_of(base: str, user_id: int) -> dict | None:
    answer = requests.get(f"{base}{USERS}/{user_id}", timeout=10)
    assert answer.status_code in (200, 404), answer.text
    return answer.json() if answer.status_code == 200 else None


def db_counts(s: Services, emails: list[str]) -> dict[str, int]:
    with psycopg.connect(s.db_url) as conn:
        rows = conn.execute(
            "SELECT e, (SELECT count(*) FROM users WHERE email = e) FROM unnest(%s::text[]) e",
            (emails,),
        ).fetchall()
    return dict(rows)


def db_users(s: Services, ids: list[int]) -> dict[int, str]:
    with psycopg.connect(s.db_url) as conn:
        rows = conn.execute("SELECT id, username FROM users WHERE id = ANY(%s)", (ids,)).fetchall()
    return dict(rows)


@dataclass
class Write:
    started: float
    status: int
    body: dict
    headers: dict[str, str]
    username: str


@dataclass
class Traffic:
    """Creates and cached reads through the gateways, until stopped."""

    s: Services
    emails: list[str]
    ids: list[int]
    stop: threading.Event = field(default_factory=threading.Event)
    writes: list[Write] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reads: int = 0

    def writer(self) -> None:
        http = requests.Session()
        while not self.stop.is_set():
            name = f"w_{uuid.uuid4().hex[:16]}"
            started = time.monotonic()
            try:
                answer = http.post(
                    self.s.gateway.url + USERS,
                    json={"username": name, "email": f"{name}@example.com"},
                    timeout=10,
                )
            except requests.RequestException as exc:
                self.failures.append(f"write: {exc}")
                continue
            body = answer.json() if answer.content else {}
            headers = {k: answer.headers.get(k, "") for k in ("Retry-After",)}
            self.writes.append(Write(started, answer.status_code, body, headers, name))

    def reader(self, base: str, offset: int) -> None:
        http = requests.Session()
        i = offset
        while not self.stop.is_set():
            i += 1
            try:
                if i % 2:
                    answer = http.get(
                        base + COUNT,
                        params={"email": self.emails[i % len(self.emails)]},
                        timeout=10,
                    )
                else:
                    answer = http.get(f"{base}{USERS}/{self.ids[i % len(self.ids)]}", timeout=10)
            except requests.RequestException as exc:
                self.failures.append(f"read: {exc}")
                continue
            if answer.status_code not in (200, 404):
                self.failures.append(f"read: {answer.status_code} {answer.text[:200]}")
            self.reads += 1

    def run(self, body: Callable[[], None]) -> None:
        threads = [threading.Thread(target=self.writer) for _ in range(3)]
        threads += [
            threading.Thread(target=self.reader, args=(base, n))
            for n, base in enumerate([self.s.gateway.url, self.s.hybrid.url] * 2)
        ]
        for thread in threads:
            thread.start()
        try:
            body()
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=30)


def warm(s: Services, emails: list[str], ids: list[int]) -> None:
    for base in (s.gateway.url, s.hybrid.url):
        for email in emails:
            count_of(base, email)
        for user_id in ids:
            user_of(base, user_id)


def seed_loading(conn: psycopg.Connection) -> bool:
    """The seeder has begun its COPY into users_new (the query stays in
    pg_stat_activity after it ends, until the seeder's next statement)."""
    row = conn.execute(
        """SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
           AND application_name = 'aside-seed' AND query LIKE 'COPY%%')"""
    ).fetchone()
    return bool(row and row[0])


def test_a_seed_under_traffic_loses_no_write_and_serves_nothing_old(services: Services) -> None:
    s = services
    run_seed(s, OLD_ROWS, seed=1)
    old_hot = read_json(s, "hot_emails.json")
    old_cold = read_json(s, "cold_emails.json")[:100]
    # Ids past the old table are negative entries now and users after the seed.
    ids = read_json(s, "user_ids.json")[:100] + list(range(OLD_ROWS + 1, OLD_ROWS + 101))
    warm(s, old_hot + old_cold, ids)

    cmd, env = seed_command(s, NEW_ROWS, seed=2)
    seed_started: list[float] = []
    seed_result: list[tuple[int, str]] = []
    traffic = Traffic(s, old_hot + old_cold, ids)

    def seed_under_traffic() -> None:
        process = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            with psycopg.connect(s.db_url, autocommit=True) as watch:
                deadline = time.monotonic() + SEED_TIMEOUT_S
                while not seed_started and process.poll() is None:
                    if seed_loading(watch):
                        seed_started.append(time.monotonic())
                    assert time.monotonic() < deadline, "the seeder never began its COPY"
                    traffic.stop.wait(0.005)  # a poll interval
            _, stderr = process.communicate(timeout=SEED_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        seed_result.append((process.returncode, stderr))
        # A little traffic after the seed, against the new table.
        done = time.monotonic()
        while time.monotonic() < done + 0.5 and not traffic.stop.is_set():
            traffic.stop.wait(0.05)

    traffic.run(seed_under_traffic)
    assert seed_started, "the COPY was never seen: the load was too quick to watch"
    assert not traffic.failures, traffic.failures[:5]

    during = [w for w in traffic.writes if w.started >= seed_started[0]]
    acknowledged = [w for w in during if 200 <= w.status < 300]
    refused = [w for w in during if w.status == 503]
    others = [w for w in during if w not in acknowledged and w not in refused]
    assert not others, [(w.status, w.body) for w in others[:5]]
    for w in refused:
        assert w.body["error"]["code"] == "seeding", w.body
        assert w.headers["Retry-After"], w
    # Every acknowledged write is in the table the seed left, under its id.
    with psycopg.connect(s.db_url) as conn:
        stored = dict(
            conn.execute(
                "SELECT username, id FROM users WHERE username = ANY(%s)",
                ([w.username for w in acknowledged],),
            ).fetchall()
        )
    lost = [w.username for w in acknowledged if stored.get(w.username) != w.body["id"]]
    print(
        f"seed of {NEW_ROWS} rows under traffic: {len(during)} writes after the COPY began, "
        f"{len(refused)} refused (503 seeding), {len(acknowledged)} acknowledged, "
        f"{len(lost)} of them lost; {traffic.reads} reads"
    )
    assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged writes lost by the seed"
    assert seed_result and seed_result[0][0] == 0, seed_result
    assert refused, "no write was refused: the traffic missed the seed"
    assert acknowledged, "no write went through after the seed"

    # No read answers from the old table: counts and users, both gateways.
    new_hot = read_json(s, "hot_emails.json")
    emails = old_hot + old_cold + new_hot
    want_counts = db_counts(s, emails)
    want_users = db_users(s, ids)
    for base in (s.gateway.url, s.hybrid.url):
        got_counts = {e: count_of(base, e) for e in emails}
        stale = {
            e: (got_counts[e], want_counts[e]) for e in emails if got_counts[e] != want_counts[e]
        }
        assert not stale, (
            f"{base}: {len(stale)} counts from the old table, e.g. {list(stale.items())[:3]}"
        )
        got_users = {i: user_of(base, i) for i in ids}
        stale_users = [i for i in ids if (got_users[i] or {}).get("username") != want_users.get(i)]
        assert not stale_users, f"{base}: users from the old table: {stale_users[:5]}"


def test_a_count_cached_before_the_seed_is_the_new_tables_after(services: Services) -> None:
    s = services
    run_seed(s, OLD_ROWS, seed=3)
    email = read_json(s, "hot_emails.json")[0]
    before = count_of(s.gateway.url, email)
    assert count_of(s.hybrid.url, email) == before == db_counts(s, [email])[email] > 0
    assert redis.Redis.from_url(s.redis_url).exists(f"aside:v1:{{count:{email}}}")
    run_seed(s, NEW_ROWS, seed=3)  # the same addresses, five times the rows
    after = db_counts(s, [email])[email]
    assert after != before
    assert count_of(s.gateway.url, email) == after
    assert count_of(s.hybrid.url, email) == after


def test_an_idempotency_key_of_the_old_table_is_not_replayed(services: Services) -> None:
    s = services
    run_seed(s, OLD_ROWS, seed=4)
    key = {"Idempotency-Key": f"seed-{uuid.uuid4().hex}"}
    body = {"username": f"k_{uuid.uuid4().hex[:12]}", "email": "k@example.com"}
    first = requests.post(s.gateway.url + USERS, json=body, headers=key, timeout=10)
    assert first.status_code == 201, first.text
    run_seed(s, OLD_ROWS, seed=5)
    again = requests.post(s.gateway.url + USERS, json=body, headers=key, timeout=10)
    assert again.status_code == 201, again.text
    assert again.headers.get("Idempotent-Replayed") is None
    with psycopg.connect(s.db_url) as conn:
        row = conn.execute(
            "SELECT id FROM users WHERE username = %s", (body["username"],)
        ).fetchone()
    assert row == (again.json()["id"],)


def serves_only(s: Services, counts: dict[str, int], users: dict[int, str]) -> bool:
    """Both gateways answer every count and user as the table has it."""
    for base in (s.gateway.url, s.hybrid.url):
        if any(count_of(base, email) != count for email, count in counts.items()):
            return False
        if any((user_of(base, i) or {}).get("username") != users.get(i) for i in users):
            return False
    return True


def test_a_seeder_killed_between_swap_and_flush_leaves_the_flush_to_the_core(
    services: Services,
) -> None:
    """The seeder dies right after its swap committed (the lab-only
    ASIDE_SEED_EXIT_AFTER_SWAP), before its flush: the flush it owed in the same
    transaction as the swap is run by the core's outbox relay, with no seeder."""
    s = services
    run_seed(s, OLD_ROWS, seed=6)
    hot = read_json(s, "hot_emails.json")[:20]
    # Negative entries in the old table, users in the new one.
    ids = list(range(OLD_ROWS + 1, OLD_ROWS + 21))
    warm(s, hot, ids)
    rdb = redis.Redis.from_url(s.redis_url, socket_timeout=5)
    old_key = f"aside:v1:{{count:{hot[0]}}}"
    old_value = rdb.get(old_key)
    assert old_value is not None
    settled = sample(scrape(s.core.url), "aside_core_cache_outbox_settled_total")

    cmd, env = seed_command(s, NEW_ROWS, seed=6)  # the same addresses, five times the rows
    env["ASIDE_SEED_EXIT_AFTER_SWAP"] = "1"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=SEED_TIMEOUT_S)
    assert done.returncode == 3, done.stderr
    # The seeder flushed nothing: the old table's count is still cached.
    assert rdb.get(old_key) == old_value

    counts, users = db_counts(s, hot), db_users(s, ids)
    assert counts[hot[0]] != int(cached(rdb, old_key) or b"") and len(users) == len(ids)
    started = time.monotonic()
    wait_until(lambda: serves_only(s, counts, users), 20, "both gateways to serve the new table")
    print(f"old values gone {time.monotonic() - started:.2f} s after the seeder died")
    assert sample(scrape(s.core.url), "aside_core_cache_outbox_settled_total") > settled
    with psycopg.connect(s.db_url) as conn:
        owed = conn.execute("SELECT count(*) FROM cache_invalidations WHERE kind = 'flush'")
        assert owed.fetchone() == (0,)
