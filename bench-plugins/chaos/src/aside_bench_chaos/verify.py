"""The checks that need the stack: the cache warmed, every write against PostgreSQL, reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import quote

import psycopg
import requests
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import connect, flush_cache
from aside_bench_suite.samples import Check, Sample

HTTP_TIMEOUT_S = 10.0
RETRY_DEADLINE_S = 20.0


def count_url(settings: Settings, email: str) -> str:
    return f"{settings.gateway_url}/api/v1/users/count?email={quote(email, safe='')}"


def user_url(settings: Settings, user_id: int) -> str:
    return f"{settings.gateway_url}/api/v1/users/{user_id}"


def prewarm(settings: Settings, hot: list[str], ids: list[int]) -> float:
    """Flush the cache, read every key of the mix twice; the second round's HIT share."""
    flush_cache(settings)
    urls = [count_url(settings, e) for e in hot] + [user_url(settings, i) for i in ids]
    hits = 0
    with requests.Session() as session:
        for round_ in range(2):
            for url in urls:
                response = session.get(url, timeout=HTTP_TIMEOUT_S)
                response.raise_for_status()
                hits += round_ == 1 and response.headers.get("X-Cache") == "HIT"
    return hits / len(urls)


def _like(prefix: str) -> tuple[str]:
    return (prefix.replace("_", r"\_") + ".%",)


def _rows(conn: psycopg.Connection, prefix: str) -> dict[str, tuple[int, str]]:
    query = "SELECT username, id, email FROM users WHERE username LIKE %s"
    rows = conn.execute(query, _like(prefix))
    return {username: (int(user_id), email) for username, user_id, email in rows}


@dataclass(frozen=True)
class RetryAnswer:  # what a write sent again got; status 0: no answer
    status: int
    replayed: bool
    id: int | None


def _retry(settings: Settings, session: requests.Session, write: Sample) -> RetryAnswer:
    """The write sent again with its key until an answer not a 5xx (the stack may be settling)."""
    username, email = write.tag("username"), write.tag("email")
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        try:
            response = session.post(
                f"{settings.gateway_url}/api/v1/users",
                json={"username": username, "email": email},
                headers={"Idempotency-Key": username},
                timeout=HTTP_TIMEOUT_S,
            )
            if response.status_code < 500 or time.monotonic() > deadline:
                try:
                    body = response.json()
                except ValueError:
                    body = {}
                return RetryAnswer(
                    response.status_code,
                    response.headers.get("Idempotent-Replayed") == "true",
                    body.get("id") if isinstance(body, dict) else None,
                )
        except requests.RequestException:
            if time.monotonic() > deadline:
                return RetryAnswer(0, False, None)
        time.sleep(0.2)


# report.json's "writes" or "reads": counts and what went wrong; empty for a case cut short.
CheckFigures = dict[str, int | list[str]]


def check_writes(
    settings: Settings, samples: list[Sample], prefix: str
) -> tuple[Check, CheckFigures, list[int]]:
    """Every acknowledged write once with its id; every other retried with its key, then
    every write once; no row or key nobody asked for. Also the ids of the users written."""
    writes = [s for s in samples if s.kind == "create"]
    by_user = {s.tag("username"): s for s in writes}
    problems: list[str] = []
    if len(by_user) != len(writes):
        problems.append(f"{len(writes) - len(by_user)} usernames sent twice")
    with connect(settings) as conn:
        rows = _rows(conn, prefix)
    acked = {u: s for u, s in by_user.items() if s.ok}
    unacked = {u: s for u, s in by_user.items() if not s.ok}
    for username, sample in acked.items():
        row = rows.get(username)
        if row is None:
            problems.append(f"acknowledged {username} is not in PostgreSQL")
        elif str(row[0]) != sample.tag("id") or row[1] != sample.tag("email"):
            problems.append(f"{username}: row {row} but the driver got id {sample.tag('id')}")
    committed_unacked = sorted(u for u in unacked if u in rows)
    strays = sorted(set(rows) - set(by_user))
    if strays:
        problems.append(f"rows nobody was told about: {strays[:3]}")
    with requests.Session() as session:
        retried = {u: _retry(settings, session, s) for u, s in sorted(unacked.items())}
    with connect(settings) as conn:
        after = _rows(conn, prefix)
        query = "SELECT key, status FROM idempotency_keys WHERE key LIKE %s"
        keys: dict[str, int | None] = dict(conn.execute(query, _like(prefix)).fetchall())
    for username, answer in retried.items():
        existed = username in rows
        if answer.status != 201:
            problems.append(f"retry of {username} answered {answer.status}")
            continue
        if answer.replayed != existed:
            problems.append(
                f"retry of {username}: replayed={answer.replayed} but the row "
                f"{'existed' if existed else 'did not exist'} before"
            )
        if existed and answer.id != rows[username][0]:
            problems.append(f"retry of {username} replayed id {answer.id}, row {rows[username]}")
    missing = sorted(set(by_user) - set(after))
    if missing:
        problems.append(f"writes missing after the retries: {missing[:3]}")
    if set(after) - set(by_user):
        problems.append("rows appeared that no write asked for")
    bad_keys = sorted(u for u in after if keys.get(u) != 201)
    orphan_keys = sorted(set(keys) - set(after))
    if bad_keys or orphan_keys:
        problems.append(
            f"idempotency keys out of step with users: {bad_keys[:3]} without a stored 201, "
            f"{orphan_keys[:3]} without a user"
        )
    figures: CheckFigures = {
        "writes": len(writes),
        "acknowledged": len(acked),
        "not_acknowledged": len(unacked),
        "committed_not_acknowledged": len(committed_unacked),
        "committed_not_acknowledged_users": committed_unacked[:20],
        "retried": len(retried),
        "retries_replayed": sum(1 for a in retried.values() if a.replayed),
        "retries_created": sum(1 for a in retried.values() if a.status == 201 and not a.replayed),
        "rows_after": len(after),
        "problems": problems,
    }
    detail = (
        f"{len(writes)} writes: {len(acked)} acknowledged, all in PostgreSQL once with their id; "
        f"{len(unacked)} not ({len(committed_unacked)} had committed), retried with their key: "
        f"{figures['retries_replayed']} replayed, {figures['retries_created']} created; "
        f"{len(after)} rows, one per write"
    )
    ok = not problems and bool(writes)
    check = Check("every write exactly once", ok, detail if ok else "; ".join(problems[:4]))
    return check, figures, sorted(row[0] for row in after.values())


def _user_json(row: tuple[Any, ...]) -> dict[str, int | str]:
    user_id, username, email, created_at = row
    stamp = created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"id": user_id, "username": username, "email": email, "created_at": stamp}


COUNTS_SQL = "SELECT email, count(*) FROM users WHERE email = ANY(%s) GROUP BY email"
USERS_SQL = "SELECT id, username, email, created_at FROM users WHERE id = ANY(%s)"


def check_reads(settings: Settings, hot: list[str], ids: list[int]) -> tuple[Check, CheckFigures]:
    """Each hot email's count and each user, read twice (a fill, then a hit), equal PostgreSQL's."""
    with connect(settings) as conn:
        counts = dict(conn.execute(COUNTS_SQL, (hot,)).fetchall())
        users = {row[0]: _user_json(row) for row in conn.execute(USERS_SQL, (ids,)).fetchall()}
    # (what, url, PostgreSQL's answer, the gateway's 200 as compared)
    wanted: list[tuple[str, str, Any, Callable[[Any], Any]]] = [
        (f"count of {e}", count_url(settings, e), counts.get(e, 0), lambda b: b.get("count"))
        for e in hot
    ]
    wanted += [(f"user {i}", user_url(settings, i), users.get(i), lambda b: b) for i in ids]
    mismatches: list[str] = []
    reads = 2 * len(wanted)
    with requests.Session() as session:
        for what, url, want, answer in wanted:
            for _ in range(2):
                response = session.get(url, timeout=HTTP_TIMEOUT_S)
                got = answer(response.json()) if response.status_code == 200 else None
                if got != want:
                    mismatches.append(f"{what}: gateway {got}, PostgreSQL {want}")
    figures: CheckFigures = {"emails": len(hot), "ids": len(ids), "reads": reads}
    figures["mismatches"] = mismatches[:20]
    detail = f"{reads} reads of {len(hot)} hot emails and {len(ids)} users equal PostgreSQL"
    if mismatches:
        detail = f"{len(mismatches)} differ: " + "; ".join(mismatches[:3])
    return Check("reads after the faults match PostgreSQL", not mismatches, detail), figures
