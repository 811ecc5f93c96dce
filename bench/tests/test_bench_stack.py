"""The bench's checks of the stack against a real PostgreSQL and Redis: a table
that does not match the seeder's files is refused with one clear line."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import psycopg
import pytest
import redis
import requests
from aside_bench.cli.runner_commands import drive
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import gateway_env
from aside_bench.records.documents import RunParams
from aside_bench.stack import config, prepare
from aside_bench.stack.gateway_metrics import connection_bound, connections_per_worker, scrape
from aside_bench.stack.prepare import (
    StackError,
    _read_count,
    expires_within,
    flush_cache,
    gateway_session,
)
from aside_bench.stack.seeddata import SeedData, check_seed
from aside_bench.stack.services import ServiceControl
from aside_bench.sweep.runner import Options, Runner, new_run
from redis.cluster import RedisCluster

BENCH_REDIS_DB = 3


def _write_seed_files(folder: Path, rows: int, index: bool) -> None:
    (folder / "seed_meta.json").write_text(json.dumps({"rows": rows, "index": index, "seed": 1}))
    (folder / "hot_emails.json").write_text(json.dumps(["hot@example.com"]))
    (folder / "cold_emails.json").write_text(json.dumps(["cold@example.com"]))


@pytest.fixture
def seeded(own_db_url: str, settings: config.Settings) -> config.Settings:
    with psycopg.connect(own_db_url, autocommit=True) as conn:
        conn.execute("TRUNCATE users RESTART IDENTITY")
        conn.execute("DROP INDEX IF EXISTS users_email_idx")
        conn.execute(
            "INSERT INTO users (username, email) "
            "SELECT 'user' || i, 'user' || i || '@example.com' FROM generate_series(1, 50) i"
        )
    redis_url = settings.redis_url.rsplit("/", 1)[0] + f"/{BENCH_REDIS_DB}"
    return dataclasses.replace(settings, database_url=own_db_url, redis_url=redis_url)


def test_a_matching_table_passes(seeded: config.Settings, tmp_path: Path) -> None:
    _write_seed_files(tmp_path, rows=50, index=False)
    seed = check_seed(seeded, tmp_path)
    assert seed.meta["rows"] == 50 and seed.hot == ["hot@example.com"] and not seed.indexed


def test_a_row_count_mismatch_is_refused(seeded: config.Settings, tmp_path: Path) -> None:
    _write_seed_files(tmp_path, rows=1_000_000, index=False)
    with pytest.raises(StackError, match=r"has 50 rows but .* says 1000000; run `make seed`"):
        check_seed(seeded, tmp_path)


def test_an_index_mismatch_is_refused(seeded: config.Settings, tmp_path: Path) -> None:
    with psycopg.connect(seeded.database_url, autocommit=True) as conn:
        conn.execute("CREATE INDEX users_email_idx ON users (email)")
    _write_seed_files(tmp_path, rows=50, index=False)
    with pytest.raises(StackError, match="has email index"):
        check_seed(seeded, tmp_path)
    _write_seed_files(tmp_path, rows=50, index=True)
    assert check_seed(seeded, tmp_path).indexed


def test_no_seed_files_means_not_seeded(seeded: config.Settings, tmp_path: Path) -> None:
    with pytest.raises(StackError, match="not seeded; run `make seed`"):
        check_seed(seeded, tmp_path)


def test_users_left_by_an_interrupted_mixed_step_are_removed(
    seeded: config.Settings, tmp_path: Path
) -> None:
    with psycopg.connect(seeded.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO users (username, email) VALUES ('load.run-1.3.7', 'hot@example.com')"
        )
    _write_seed_files(tmp_path, rows=50, index=False)
    check_seed(seeded, tmp_path)
    with psycopg.connect(seeded.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 50


def test_flush_empties_the_redis_database_it_is_given(seeded: config.Settings) -> None:
    client = redis.Redis.from_url(seeded.redis_url, socket_timeout=5)
    client.set("aside:v1:{count:someone@example.com}", "3")
    flush_cache(seeded)
    assert client.dbsize() == 0
    client.close()


@pytest.mark.skipif(
    not os.environ.get("ASIDE_REDIS_CLUSTER_URL"),
    reason="ASIDE_REDIS_CLUSTER_URL is not set (infra/test.sh starts a cluster)",
)
def test_flush_and_expiry_scan_visit_every_primary_of_a_cluster() -> None:
    url = os.environ["ASIDE_REDIS_CLUSTER_URL"]
    settings = config.load({"REDIS_URL": url, "REDIS_MODE": "cluster"})
    client = RedisCluster.from_url(url, socket_timeout=5)
    try:
        client.flushdb(target_nodes=RedisCluster.PRIMARIES)  # other suites' keys lapse too
        keys = [f"aside:v1:{{count:bench{i}@example.com}}" for i in range(30)]
        for key in keys:
            client.set(key, "1", ex=600)
        assert len({client.get_node_from_key(k).name for k in keys}) == 3
        assert not expires_within(settings, 20)
        client.set(keys[-1], "1", ex=15)  # on one primary only
        assert expires_within(settings, 20)
        flush_cache(settings)
        assert client.dbsize() == 0  # summed over every primary
    finally:
        client.close()


def test_expires_within_sees_the_key_that_lapses_first(seeded: config.Settings) -> None:
    client = redis.Redis.from_url(seeded.redis_url, socket_timeout=5)
    try:
        client.flushdb()
        assert expires_within(seeded, 20)  # empty: a step would find nothing cached
        client.set("aside:test:long", "1", ex=600)
        client.set("aside:test:forever", "1")  # no TTL: never lapses
        assert not expires_within(seeded, 20)
        client.set("aside:test:short", "1", ex=15)
        assert expires_within(seeded, 20)
        assert not expires_within(seeded, 5)
    finally:
        client.flushdb()
        client.close()


def test_an_unreachable_database_is_one_clear_line(
    settings: config.Settings, tmp_path: Path
) -> None:
    _write_seed_files(tmp_path, rows=50, index=False)
    dead = dataclasses.replace(settings, database_url="postgresql://aside@127.0.0.1:9/aside")
    with pytest.raises(StackError, match="cannot connect to DATABASE_URL"):
        check_seed(dead, tmp_path)


def _l1_subscribed(settings: config.Settings) -> float | None:
    text = requests.get(settings.gateway_url + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("aside_gateway_l1_subscribed "):
            return float(line.split()[1])
    return None


def test_an_arm_with_its_own_settings_restarts_the_gateway_and_they_go_back(
    settings: config.Settings,
) -> None:
    control = ServiceControl(settings)
    control.verify(("gateway",))
    try:
        control.restart("gateway", gateway_env("l1-ttl"))
        assert requests.get(settings.gateway_url + "/healthz", timeout=5).status_code == 200
        # Invalidation off: no worker subscribes.
        assert _l1_subscribed(settings) == 0.0
    finally:
        control.restart("gateway", {})
    # Read at once, as an arm's first step does: the bound of every worker, not
    # the 0 of one still starting.
    right_after = connection_bound(settings)
    deadline = time.monotonic() + 20
    while _l1_subscribed(settings) != 1.0:
        assert time.monotonic() < deadline, "the gateway's workers did not subscribe again"
        time.sleep(0.1)
    assert right_after is not None
    assert right_after == connections_per_worker(scrape(settings))


class _Door(BaseHTTPRequestHandler):
    """Answers as the gateway's door does: 503 with Retry-After for the first
    `refusals` requests, then a hit."""

    refusals: ClassVar[int] = 0
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Door.seen.append(self.path)
        refused = len(_Door.seen) <= _Door.refusals
        self.send_response(503 if refused else 200)
        self.send_header("Retry-After", "0")
        self.send_header("X-Cache", "MISS" if refused else "HIT")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("refusals", "asked", "answered"), [(2, 3, "HIT"), (3, 3, None)])
def test_a_warm_up_read_the_door_refuses_is_asked_again_twice(refusals, asked, answered) -> None:
    _Door.refusals, _Door.seen = refusals, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Door)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with gateway_session() as session:
            if answered is None:
                with pytest.raises(requests.HTTPError, match="503"):
                    _read_count(session, url, "a@b.co", "l2")
            else:
                assert _read_count(session, url, "a@b.co", "l2") == answered
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Door.seen) == asked


def test_a_step_that_fails_with_a_bug_still_gives_redis_its_bound_back(
    settings: config.Settings, tmp_path: Path
) -> None:
    """A step's unexpected error (not a StepFailed, StackError or SourceError) still
    runs the cleanup: Redis is not left bounded for whatever runs next."""
    seed = SeedData(meta={}, hot=[], cold=[], data_dir=tmp_path)
    run = new_run("sweep", "bug", RunParams(), seed, settings)
    options = Options("bug", tmp_path / "bug", tmp_path, LoadShape(), 10, 5.0)
    runner = Runner(settings, options, seed, run)
    own = prepare.read_bound(settings)
    step_bound = prepare.MemoryBound(64 * 1024 * 1024, "allkeys-lfu")
    assert step_bound != own

    def step_with_a_bug() -> None:
        runner.stack_bound = own  # as a memory arm's preparation keeps it
        prepare.apply_bound(settings, step_bound)
        raise TypeError("a bug in a step's preparation")

    try:
        with pytest.raises(TypeError, match="a bug"):
            drive(runner, step_with_a_bug, lambda *_: [])
        assert prepare.read_bound(settings) == own
    finally:
        prepare.apply_bound(settings, own)
