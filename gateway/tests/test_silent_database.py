"""A PostgreSQL that takes a statement and never answers (its replies lost on
the way back, the connection still open) is bounded by the gateway's
client-side deadline (misses/deadline.py), not by statement_timeout, which the
server enforces on a statement it runs. The silence is made by the stack's
toxiproxy (docs/stack.md): its `timeout` toxic on the `postgres` proxy.

Behind such a database a cached read answers fast: a lease holder whose read
failed leaves a failure mark that fails the readers waiting on its lease at
once, a miss keeps to its own deadline (DB_POOL_TIMEOUT_MS +
DB_STATEMENT_TIMEOUT_MS) wherever it waits, and after one failure the worker's
breaker answers its misses 503 at once for DB_BREAKER_MS."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import requests
from aside_gateway.contracts import cache_keys
from gateway_helpers import Proc, sample, scrape, unique_email, wait_until

COUNT = "/api/v1/users/count"
API = f"http://127.0.0.1:{os.environ.get('ASIDE_TOXIPROXY_PORT', '28474')}"
PROXY_PORT = int(os.environ.get("ASIDE_TOXIPROXY_POSTGRES_PORT", "25532"))
TOXIC = "silent-postgres"


def _through_proxy(database_url: str) -> str:
    parts = urlsplit(database_url)
    credentials = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{PROXY_PORT}"))


@pytest.fixture
def silence() -> Iterator[None]:
    """The `postgres` proxy drops every reply while the test needs it."""
    yield
    requests.delete(f"{API}/proxies/postgres/toxics/{TOXIC}", timeout=5)


def test_a_silent_database_answers_503_within_its_deadline(start_gateway, database_url, silence):
    gw = start_gateway(
        DATABASE_URL=_through_proxy(database_url),
        DB_STATEMENT_TIMEOUT_MS="300",
        DB_POOL_MIN="1",
        GATEWAY_WORKERS="1",
    )
    email = unique_email()
    first = requests.get(gw.url + COUNT, params={"email": email, "cache": "off"}, timeout=10)
    assert first.status_code == 200, first.text
    added = requests.post(
        f"{API}/proxies/postgres/toxics",
        json={"name": TOXIC, "type": "timeout", "stream": "downstream",
              "attributes": {"timeout": 0}},
        timeout=5,
    )  # fmt: skip
    assert added.status_code == 200, added.text
    started = time.monotonic()
    response = requests.get(gw.url + COUNT, params={"email": email, "cache": "off"}, timeout=10)
    elapsed = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers.get("Retry-After")
    # statement_timeout (0.3 s) plus the client's grace (0.5 s), one try only.
    assert elapsed < 2.0
    requests.delete(f"{API}/proxies/postgres/toxics/{TOXIC}", timeout=5).raise_for_status()
    # Back once the breaker (DB_BREAKER_MS, 1 s) lets a probe through.
    wait_until(
        lambda: _count(gw, email, "off").status == 200, 10, "a read answered again after healing"
    )


# ---- a cached read behind a silent database -------------------------------------------
@dataclass(frozen=True)
class Timed:
    status: int
    code: str | None
    retry_after: str | None
    started: float
    ended: float


def _count(gw: Proc, email: str, cache: str = "on") -> Timed:
    started = time.monotonic()
    response = requests.get(gw.url + COUNT, params={"email": email, "cache": cache}, timeout=20)
    ended = time.monotonic()
    code = response.json().get("error", {}).get("code") if response.status_code != 200 else None
    return Timed(response.status_code, code, response.headers.get("Retry-After"), started, ended)


def _silence_postgres() -> None:
    added = requests.post(
        f"{API}/proxies/postgres/toxics",
        json={"name": TOXIC, "type": "timeout", "stream": "downstream",
              "attributes": {"timeout": 0}},
        timeout=5,
    )  # fmt: skip
    assert added.status_code == 200, added.text


def _warm(*gateways: Proc) -> None:
    """Each gateway's pooled connection open before the silence (DB_POOL_MIN=1)."""
    for gw in gateways:
        assert _count(gw, unique_email(), "off").status == 200


def _behind_silence(
    rdb: redis.Redis, holder: Proc, waiter: Proc, email: str
) -> tuple[Timed, Timed]:
    """Two reads of one missing key: `holder`'s takes the lease, then, once it
    holds it and PostgreSQL is silent, `waiter`'s (another process) waits on it."""
    lease = cache_keys.lease_key(cache_keys.count_key(email))
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_count, holder, email)
        wait_until(lambda: rdb.exists(lease), 5, "the holder's lease")
        second = pool.submit(_count, waiter, email)
        return first.result(), second.result()


def _proxied(database_url: str, **overrides: str) -> dict[str, str]:
    return {
        "DATABASE_URL": _through_proxy(database_url),
        "DB_POOL_MIN": "1",
        "GATEWAY_WORKERS": "1",
        **overrides,
    }


def test_a_failed_lease_fails_its_waiters_at_once(start_gateway, database_url, rdb, silence):
    env = _proxied(database_url, DB_STATEMENT_TIMEOUT_MS="300")
    holder, waiter = start_gateway(**env), start_gateway(**env)
    _warm(holder, waiter)
    _silence_postgres()
    held, waited = _behind_silence(rdb, holder, waiter, unique_email())
    assert (held.status, held.code) == (503, "database_unavailable")
    assert (waited.status, waited.code) == (503, "database_unavailable")
    assert waited.retry_after
    # The holder's statement is cut at 0.8 s (statement_timeout 0.3 s + 0.5 s):
    # its mark answers the waiter within its next poll (20 ms), not a lease TTL
    # (5 s) nor a read of its own (another cut) later.
    assert waited.ended - held.ended < 0.3, (held, waited)


def test_a_miss_keeps_to_its_own_deadline_on_another_s_lease(
    start_gateway, database_url, rdb, silence
):
    # The holder waits for its statement as long as its own settings say (5.5 s);
    # the waiter's miss may wait DB_POOL_TIMEOUT_MS + DB_STATEMENT_TIMEOUT_MS, 0.5 s.
    holder = start_gateway(**_proxied(database_url, DB_STATEMENT_TIMEOUT_MS="5000"))
    waiter = start_gateway(
        **_proxied(database_url, DB_STATEMENT_TIMEOUT_MS="300", DB_POOL_TIMEOUT_MS="200")
    )
    _warm(holder, waiter)
    _silence_postgres()
    held, waited = _behind_silence(rdb, holder, waiter, unique_email())
    assert (waited.status, waited.code) == (503, "database_unavailable")
    assert waited.retry_after
    # Its deadline (0.5 s) and a slack of 0.3 s for a loaded 2-core machine.
    assert waited.ended - waited.started < 0.8, waited
    assert held.status == 503 and held.ended - held.started > 5.0, held


def test_after_one_failure_the_breaker_answers_misses_at_once(start_gateway, database_url, silence):
    gw = start_gateway(**_proxied(database_url, DB_STATEMENT_TIMEOUT_MS="300"))  # breaker 1 s
    _warm(gw)
    before = scrape(gw.url)
    _silence_postgres()
    first = _count(gw, unique_email())
    assert (first.status, first.code) == (503, "database_unavailable")
    second = _count(gw, unique_email())
    assert (second.status, second.code) == (503, "database_unavailable")
    assert second.retry_after
    assert second.ended - second.started < 0.05, second
    after = scrape(gw.url)
    shed = "aside_gateway_shed_total"
    refused = sample(after, shed, reason="db_breaker_open")
    assert refused - sample(before, shed, reason="db_breaker_open") >= 1
    requests.delete(f"{API}/proxies/postgres/toxics/{TOXIC}", timeout=5).raise_for_status()
    email = unique_email()
    wait_until(lambda: _count(gw, email).status == 200, 10, "a miss answered after healing")
