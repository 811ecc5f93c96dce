"""A PostgreSQL that takes a statement and never answers (its replies lost on
the way back, the connection still open) is bounded by the gateway's
client-side deadline (misses/deadline.py), not by statement_timeout, which the
server enforces on a statement it runs. The silence is made by the stack's
toxiproxy (docs/stack.md): its `timeout` toxic on the `postgres` proxy."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from gateway_helpers import unique_email

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
    again = requests.get(gw.url + COUNT, params={"email": email, "cache": "off"}, timeout=10)
    assert again.status_code == 200, again.text
