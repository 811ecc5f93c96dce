"""`aside-bench chaos`: faults under load, and nothing lost.

Each case runs k6/scripts/chaos.js at a constant arrival rate (cached reads of
hot emails and seeded ids, idempotent creates) against the gateway, injects one
fault a few seconds in, restores the service, keeps the load a few seconds
more, then checks from k6's own samples and from PostgreSQL:

* redis    -- SIGKILL redis-server, `infra/stack.sh up redis`
* core     -- SIGKILL aside-core, `infra/stack.sh up core`
* postgres -- `infra/stack.sh stop postgres` (pg_ctl -m fast), `infra/stack.sh up postgres`
* worker   -- SIGKILL one gunicorn worker; the master replaces it

and after every case: every write that got a 2xx is in PostgreSQL exactly once
with the id k6 was given; every write that did not is retried with its own
Idempotency-Key (a replay if it had committed, a create if not), after which
every write exists exactly once; and reads through the gateway of every hot
email and every id involved equal PostgreSQL. The verdicts are in
chaos_checks.py; the report goes to reports/chaos-<run id>/.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import redis
import requests

from . import chaos_checks as cc
from .config import Settings
from .k6run import K6Run, K6Summary, start_k6
from .machine import describe, summary
from .prepare import StackError, connect, flush_cache, wait_until_quiet
from .report import Doc
from .seeddata import SeedData, load_seed_list
from .services import ServiceControl, wait_for
from .tables import Table

CASES = ("redis", "core", "postgres", "worker")
DESCRIPTIONS = {
    "redis": "Redis killed (SIGKILL) and restarted",
    "core": "the core killed (SIGKILL) and restarted",
    "postgres": "PostgreSQL stopped (fast shutdown) and restarted",
    "worker": "one gunicorn worker killed (SIGKILL)",
}
# Seconds infra/stack.sh takes to bring each service back, budgeted into k6's duration.
RESTORE_BUDGET_S = {"redis": 1.0, "core": 1.0, "postgres": 2.0, "worker": 0.0}
READY_DEADLINE_S = 60.0
LOAD_START_DEADLINE_S = 60.0
QUIET_DEADLINE_S = 60.0
RETRY_DEADLINE_S = 20.0
HTTP_TIMEOUT_S = 10.0
USERNAME_MAX = 64
# Room a username needs after its prefix: ".<vu>.<iteration>".
USERNAME_TAIL = 12


@dataclass(frozen=True)
class Timing:
    pre_s: float  # load before the fault
    down_s: float  # from the fault to the restart
    post_s: float  # load after the service is back

    def k6_duration_s(self, case: str) -> int:
        return int(self.pre_s + self.down_s + RESTORE_BUDGET_S[case] + self.post_s + 0.999)


FULL = Timing(pre_s=8, down_s=6, post_s=12)
SHORT = Timing(pre_s=3, down_s=2, post_s=5)


@dataclass(frozen=True)
class ChaosParams:
    run_id: str
    out_dir: Path
    cases: tuple[str, ...]
    rate: int
    timing: Timing
    write_share: float = 0.2
    user_share: float = 0.5
    id_sample: int = 50

    @property
    def timeout_s(self) -> int:
        return cc.REQUEST_TIMEOUT_S


@dataclass
class CaseResult:
    name: str
    events: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    writes: dict[str, Any] = field(default_factory=dict)
    reads: dict[str, Any] = field(default_factory=dict)
    checks: list[cc.Check] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": DESCRIPTIONS[self.name],
            "passed": self.passed,
            "error": self.error,
            "events": self.events,
            "notes": self.notes,
            "requests": self.kinds,
            "figures": self.figures,
            "writes": self.writes,
            "reads": self.reads,
            "checks": [c.as_dict() for c in self.checks],
        }


def parse_cases(text: str | None) -> tuple[str, ...]:
    if not text or text.strip() == "all":
        return CASES
    names = text.replace(",", " ").split()
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise ValueError(f"unknown case(s) {' '.join(unknown)}; choose from {' '.join(CASES)}")
    return tuple(dict.fromkeys(names))


def user_prefix(run_id: str, case: str) -> str:
    prefix = f"k6.{run_id}.{case}"
    if len(prefix) + USERNAME_TAIL > USERNAME_MAX:
        raise ValueError(f"--run-id {run_id!r} is too long for usernames (at most 40 characters)")
    return prefix


def load_ids(data_dir: Path) -> list[int]:
    """The seeder's sample of existing ids (user_ids.json)."""
    return load_seed_list(data_dir / "user_ids.json", "ids", int)


# ---- the load -------------------------------------------------------------------------
def load_run(
    settings: Settings, params: ChaosParams, seed: SeedData, case: str, out: Path, summary: Path
) -> K6Run:
    """k6/scripts/chaos.js for one case: every request on a fresh connection, each
    recorded in the JSON output `out`, the tallies in `summary`."""
    rate = params.rate
    return K6Run(
        script="chaos.js",
        run_id=params.run_id,
        scenario="chaos",
        arm="cache",
        phase=case,
        rate=rate,
        duration_s=params.timing.k6_duration_s(case),
        # In flight at once: rate x latency; a fault may hold requests up to the timeout.
        vus=(rate * 2, rate * (params.timeout_s + 1)),
        timeout_s=params.timeout_s,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": str(params.write_share),
            "USER_SHARE": str(params.user_share),
            "ID_SAMPLE": str(params.id_sample),
            "USER_PREFIX": user_prefix(params.run_id, case),
            "NO_REUSE": "1",
            "SUMMARY_PATH": str(summary),
        },
        out=f"json={out}",
    )


def _sleep_until(instant: float) -> None:
    remaining = instant - time.time()
    if remaining > 0:
        time.sleep(remaining)


# ---- state around a case ----------------------------------------------------------------
def _get(session: requests.Session, url: str) -> requests.Response:
    return session.get(url, timeout=HTTP_TIMEOUT_S)


def count_url(settings: Settings, email: str) -> str:
    return f"{settings.gateway_url}/api/v1/users/count?email={quote(email, safe='')}"


def prewarm(settings: Settings, hot: list[str], ids: list[int]) -> float:
    """Flush the cache, read every key of the mix once, then again; the share of
    the second round served as HIT."""
    flush_cache(settings)
    urls = [count_url(settings, e) for e in hot]
    urls += [f"{settings.gateway_url}/api/v1/users/{i}" for i in ids]
    hits = 0
    with requests.Session() as session:
        for url in urls:
            _get(session, url).raise_for_status()
        for url in urls:
            response = _get(session, url)
            response.raise_for_status()
            hits += response.headers.get("X-Cache") == "HIT"
    return hits / len(urls)


MetricKey = tuple[str, str, str]


def _metric(settings: Settings, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric on the gateway's own /metrics (summed over its
    workers, dead ones included)."""
    response = requests.get(f"{settings.gateway_url}/metrics", timeout=HTTP_TIMEOUT_S)
    if response.status_code != 200:
        raise StackError(
            f"{settings.gateway_url}/metrics answered {response.status_code}: the suite "
            "reads the gateway's counters there (lab profile)"
        )
    found = []
    for line in response.text.splitlines():
        if line.startswith(name + "{"):
            labels_text, value = line[len(name) + 1 :].rsplit("} ", 1)
            found.append((dict(_labels(labels_text)), float(value)))
    return found


def request_counters(settings: Settings) -> dict[MetricKey, float]:
    """aside_gateway_http_requests_total by (route, method, status)."""
    counters: dict[MetricKey, float] = {}
    for labels, value in _metric(settings, "aside_gateway_http_requests_total"):
        key = (labels.get("route", ""), labels.get("method", ""), labels.get("status", ""))
        counters[key] = counters.get(key, 0.0) + value
    return counters


def cache_errors(settings: Settings) -> dict[str, float]:
    """aside_gateway_cache_errors_total by op (get, lease, store, breaker_open)."""
    errors: dict[str, float] = {}
    for labels, value in _metric(settings, "aside_gateway_cache_errors_total"):
        op = labels.get("op", "")
        errors[op] = errors.get(op, 0.0) + value
    return errors


def _labels(text: str) -> list[tuple[str, str]]:
    pairs = []
    rest = text
    while rest:
        name, rest = rest.split('="', 1)
        value_chars = []
        index = 0
        while rest[index] != '"':
            if rest[index] == "\\":
                index += 1
            value_chars.append(rest[index])
            index += 1
        pairs.append((name.lstrip(","), "".join(value_chars)))
        rest = rest[index + 1 :].lstrip(",")
    return pairs


# ---- the checks that need PostgreSQL and the gateway ----------------------------------------
def _rows(conn: psycopg.Connection, prefix: str) -> dict[str, tuple[int, str]]:
    rows = conn.execute(
        "SELECT username, id, email FROM users WHERE username LIKE %s",
        (prefix.replace("_", r"\_") + ".%",),
    ).fetchall()
    return {username: (int(user_id), email) for username, user_id, email in rows}


def _keys(conn: psycopg.Connection, prefix: str) -> dict[str, int | None]:
    rows = conn.execute(
        "SELECT key, status FROM idempotency_keys WHERE key LIKE %s",
        (prefix.replace("_", r"\_") + ".%",),
    ).fetchall()
    return {key: status for key, status in rows}


def _retry(settings: Settings, session: requests.Session, write: cc.Sample) -> dict[str, Any]:
    """Send a write again with its own Idempotency-Key and body until it gets an
    answer that is not a 5xx (the stack may still be settling)."""
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
                return {
                    "status": response.status_code,
                    "replayed": response.headers.get("Idempotent-Replayed") == "true",
                    "id": body.get("id") if isinstance(body, dict) else None,
                }
        except requests.RequestException as error:
            if time.monotonic() > deadline:
                return {"status": 0, "replayed": False, "id": None, "error": str(error)}
        time.sleep(0.2)


def check_writes(
    settings: Settings, samples: list[cc.Sample], prefix: str
) -> tuple[cc.Check, dict[str, Any]]:
    """Every acknowledged write exactly once with its id; every other write retried
    with its key, then every write exactly once; no row or key nobody asked for."""
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
            problems.append(f"{username}: row {row} but k6 got id {sample.tag('id')}")
    committed_unacked = sorted(u for u in unacked if u in rows)
    strays = sorted(set(rows) - set(by_user))
    if strays:
        problems.append(f"rows nobody was told about: {strays[:3]}")
    retried: dict[str, dict[str, Any]] = {}
    with requests.Session() as session:
        for username, sample in sorted(unacked.items()):
            retried[username] = _retry(settings, session, sample)
    with connect(settings) as conn:
        after = _rows(conn, prefix)
        keys = _keys(conn, prefix)
    for username, answer in retried.items():
        existed = username in rows
        if answer["status"] != 201:
            problems.append(f"retry of {username} answered {answer['status']}")
            continue
        if answer["replayed"] != existed:
            problems.append(
                f"retry of {username}: replayed={answer['replayed']} but the row "
                f"{'existed' if existed else 'did not exist'} before"
            )
        if existed and answer["id"] != rows[username][0]:
            problems.append(f"retry of {username} replayed id {answer['id']}, row {rows[username]}")
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
    figures = {
        "writes": len(writes),
        "acknowledged": len(acked),
        "not_acknowledged": len(unacked),
        "committed_not_acknowledged": len(committed_unacked),
        "committed_not_acknowledged_users": committed_unacked[:20],
        "retried": len(retried),
        "retries_replayed": sum(1 for a in retried.values() if a["replayed"]),
        "retries_created": sum(
            1 for a in retried.values() if a["status"] == 201 and not a["replayed"]
        ),
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
    return cc.Check("every write exactly once", ok, detail if ok else "; ".join(problems[:4])), {
        **figures,
        "ids": sorted(row[0] for row in after.values()),
    }


def _user_json(row: tuple[Any, ...]) -> dict[str, Any]:
    user_id, username, email, created_at = row
    stamp = created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"id": user_id, "username": username, "email": email, "created_at": stamp}


def check_reads(
    settings: Settings, hot: list[str], ids: list[int]
) -> tuple[cc.Check, dict[str, Any]]:
    """Each hot email's count and each user, read twice through the gateway (a
    fill, then most likely a hit), equal PostgreSQL's."""
    with connect(settings) as conn:
        counts = dict(
            conn.execute(
                "SELECT email, count(*) FROM users WHERE email = ANY(%s) GROUP BY email", (hot,)
            ).fetchall()
        )
        users = {
            row[0]: _user_json(row)
            for row in conn.execute(
                "SELECT id, username, email, created_at FROM users WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        }
    mismatches: list[str] = []
    reads = 0
    with requests.Session() as session:
        for email in hot:
            want = counts.get(email, 0)
            for _ in range(2):
                reads += 1
                response = _get(session, count_url(settings, email))
                got = response.json().get("count") if response.status_code == 200 else None
                if got != want:
                    mismatches.append(f"count of {email}: gateway {got}, PostgreSQL {want}")
        for user_id in ids:
            want_user = users.get(user_id)
            for _ in range(2):
                reads += 1
                response = _get(session, f"{settings.gateway_url}/api/v1/users/{user_id}")
                got_user = response.json() if response.status_code == 200 else None
                if got_user != want_user:
                    mismatches.append(f"user {user_id}: gateway {got_user}, PostgreSQL {want_user}")
    figures = {
        "emails": len(hot),
        "ids": len(ids),
        "reads": reads,
        "mismatches": mismatches[:20],
    }
    detail = f"{reads} reads of {len(hot)} hot emails and {len(ids)} users equal PostgreSQL"
    return (
        cc.Check(
            "reads after the faults match PostgreSQL",
            not mismatches,
            detail if not mismatches else f"{len(mismatches)} differ: " + "; ".join(mismatches[:3]),
        ),
        figures,
    )


# ---- the faults -----------------------------------------------------------------------------
class Faults:
    def __init__(self, settings: Settings, control: ServiceControl):
        self.settings = settings
        self.control = control

    def _ready(self, service: str) -> bool:
        if service == "redis":
            client = redis.Redis.from_url(
                self.settings.redis_url, socket_timeout=0.5, socket_connect_timeout=0.5
            )
            try:
                return bool(client.ping())
            finally:
                client.close()
        if service == "core":
            url = f"{self.control.stack.core_url}/readyz"
            return requests.get(url, timeout=0.5).status_code == 200
        if service == "postgres":
            with psycopg.connect(self.settings.database_url, connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        raise ValueError(service)

    def inject(self, case: str, events: dict[str, float], notes: dict[str, Any]) -> None:
        if case in ("redis", "core"):
            events["fault"] = time.time()
            notes["killed_pid"] = self.control.kill(case)
        elif case == "postgres":
            events["fault"] = time.time()
            self.control.stop("postgres")
            events["stopped"] = time.time()
        elif case == "worker":
            before = set(self.control.gateway_workers())
            events["fault"] = time.time()
            killed = self.control.kill_worker()
            notes["killed_pid"] = killed
            notes["workers_before"] = sorted(before)

            def replaced() -> bool:
                now = set(self.control.gateway_workers())
                return len(now) >= len(before) and killed not in now

            at = wait_for(replaced, READY_DEADLINE_S)
            if at is not None:
                events["replaced"] = at
                notes["workers_after"] = sorted(self.control.gateway_workers())

    def restore(self, case: str, events: dict[str, float], notes: dict[str, Any]) -> None:
        if case == "worker":
            return  # gunicorn's master does it
        events["restore"] = time.time()
        process = self.control.start(case)
        at = wait_for(lambda: self._ready(case), READY_DEADLINE_S)
        output, _ = process.communicate(timeout=READY_DEADLINE_S)
        events["restored"] = time.time()
        if at is None or process.returncode != 0:
            raise StackError(f"infra/stack.sh up {case} failed: {output.strip()[-500:]}")
        events["ready"] = at
        notes["restarted_pid"] = self.control.pid(case)


# ---- one case ---------------------------------------------------------------------------------
def run_case(
    settings: Settings,
    params: ChaosParams,
    seed: SeedData,
    control: ServiceControl,
    case: str,
) -> CaseResult:
    result = CaseResult(case)
    faults = Faults(settings, control)
    ids = load_ids(seed.data_dir)[: params.id_sample]
    control.ensure_up()
    control.verify()
    wait_until_quiet(settings, QUIET_DEADLINE_S)
    result.notes["hit_share_after_prewarm"] = round(prewarm(settings, seed.hot, ids), 3)
    counters_before = request_counters(settings) if case == "worker" else {}
    errors_before = cache_errors(settings)
    out = params.out_dir / f"k6-{case}.json"
    summary_path = params.out_dir / f"k6-{case}-summary.json"
    load = start_k6(
        settings,
        load_run(settings, params, seed, case, out, summary_path),
        params.out_dir / "k6.log",
    )
    first = load.first_point(out, "chaos_req", LOAD_START_DEADLINE_S)
    events = result.events
    events["load_start"] = int(first["tags"]["start"]) / 1000
    try:
        _sleep_until(events["load_start"] + params.timing.pre_s)
        faults.inject(case, events, result.notes)
        _sleep_until(events["fault"] + params.timing.down_s)
        faults.restore(case, events, result.notes)
    finally:
        # The load runs its course whatever happened; a broken restore is reported below.
        duration = params.timing.k6_duration_s(case)
        code = load.wait(duration + params.timeout_s + 60)
        events["load_end"] = time.time()
    if code != 0:
        raise StackError(f"k6 exited with {code} in case {case}; see {params.out_dir}/k6.log")
    with out.open() as handle:
        samples, dropped = cc.parse_k6_json(handle)
    _compress(out)
    if "ready" in events:
        result.notes["post_window_s"] = round(events["load_end"] - events["ready"], 1)
    result.kinds = cc.by_kind(samples)
    errors = {
        op: n - errors_before.get(op, 0.0)
        for op, n in cache_errors(settings).items()
        if n - errors_before.get(op, 0.0)
    }
    result.notes["gateway_cache_errors"] = errors
    redis_errors = sum(n for op, n in errors.items() if op != "breaker_open")
    result.notes["k6_summary"] = K6Summary.read(summary_path).counts("chaos_")
    if case == "worker":
        delta = cc.counter_delta(counters_before, request_counters(settings))
        checks, figures = cc.worker_checks(samples, events, delta)
        figures["counter_delta"] = {" ".join(k): v for k, v in sorted(delta.items())}
    elif case == "postgres":
        checks, figures = cc.postgres_checks(samples, events, redis_errors)
    else:
        evaluate = {"redis": cc.redis_checks, "core": cc.core_checks}
        checks, figures = evaluate[case](samples, events)
    result.figures = figures
    tallies = result.notes["k6_summary"]
    tallied = sum(tallies.values()) if tallies else None
    result.checks = cc.common_checks(samples, dropped, case == "worker", tallied) + checks
    writes_check, result.writes = check_writes(settings, samples, user_prefix(params.run_id, case))
    written_ids = result.writes.pop("ids")
    reads_check, result.reads = check_reads(settings, seed.hot, sorted(set(ids) | set(written_ids)))
    result.checks += [writes_check, reads_check]
    return result


def _compress(path: Path) -> None:
    with path.open("rb") as source, gzip.open(path.with_suffix(".json.gz"), "wb") as target:
        shutil.copyfileobj(source, target)
    path.unlink()


def cleanup(settings: Settings, run_id: str) -> int:
    """Remove the users (and their idempotency keys) this run created."""
    pattern = f"k6.{run_id}.".replace("_", r"\_") + "%"
    with connect(settings) as conn:
        removed = conn.execute("DELETE FROM users WHERE username LIKE %s", (pattern,)).rowcount
        conn.execute("DELETE FROM idempotency_keys WHERE key LIKE %s", (pattern,))
    flush_cache(settings)
    return removed


# ---- the run -------------------------------------------------------------------------------
def run_chaos(settings: Settings, params: ChaosParams, seed: SeedData) -> dict[str, Any]:
    control = ServiceControl(settings)
    control.verify()
    params.out_dir.mkdir(parents=True)
    run: dict[str, Any] = {
        "run_id": params.run_id,
        "kind": "chaos",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": describe(),
        "seed": seed.meta,
        "params": {
            "cases": list(params.cases),
            "rate": params.rate,
            "pre_s": params.timing.pre_s,
            "down_s": params.timing.down_s,
            "post_s": params.timing.post_s,
            "timeout_s": params.timeout_s,
            "write_share": params.write_share,
            "user_share": params.user_share,
            "id_sample": params.id_sample,
            "hot_emails": len(seed.hot),
            "gateway_url": settings.gateway_url,
            "run_dir": str(control.stack.run_dir),
        },
        "limits": {
            "read_max_ms": cc.READ_MAX_MS,
            "core_down_max_ms": cc.CORE_DOWN_MAX_MS,
            "db_down_max_ms": cc.DB_DOWN_MAX_MS,
            "recover_s": cc.RECOVER_S,
            "hit_ratio_back": cc.HIT_RATIO_BACK,
            "replace_s": cc.REPLACE_S,
        },
        "cases": [],
    }
    print(
        f"chaos {params.run_id}: {' '.join(params.cases)} at {params.rate} req/s "
        f"-> {params.out_dir}/",
        flush=True,
    )
    try:
        for case in params.cases:
            print(f"[{case}] {DESCRIPTIONS[case]} ...", flush=True)
            try:
                result = run_case(settings, params, seed, control, case)
            except (
                StackError,
                psycopg.Error,
                requests.RequestException,
                redis.RedisError,
            ) as error:
                result = CaseResult(case, error=str(error))
            run["cases"].append(result.as_dict())
            print(f"[{case}] {_one_line(result)}", flush=True)
            if result.error is not None and not _restore_all(control):
                print(
                    "aside-bench: the stack did not come back; stopping the suite", file=sys.stderr
                )
                break
    finally:
        _restore_all(control)
        try:
            run["removed_users"] = cleanup(settings, params.run_id)
        except (StackError, psycopg.Error, redis.RedisError) as error:
            print(f"warning: could not remove the run's users: {error}", file=sys.stderr)
        run["passed"] = bool(run["cases"]) and all(c["passed"] for c in run["cases"])
        write_report(run, params.out_dir)
    return run


def _restore_all(control: ServiceControl) -> bool:
    try:
        control.ensure_up()
        return True
    except StackError as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return False


def _one_line(result: CaseResult) -> str:
    if result.error:
        return f"ERROR: {result.error}"
    failed = [c.name for c in result.checks if not c.ok]
    verdict = "passed" if not failed else "FAILED: " + "; ".join(failed)
    return f"{_recovery(result.as_dict())}  {verdict}"


# ---- the report -----------------------------------------------------------------------------
def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _recovery(case: dict[str, Any]) -> str:
    f = case["figures"]
    name = case["name"]
    if name == "redis":
        return (
            f"first HIT {_s(f.get('first_hit_after_ready_s'))}, hit ratio back "
            f"{_s(f.get('hit_ratio_back_after_ready_s'))} after Redis ready"
        )
    if name == "core":
        return f"first 2xx write {_s(f.get('first_2xx_write_after_ready_s'))} after core ready"
    if name == "postgres":
        return (
            f"first write {_s(f.get('first_2xx_write_after_ready_s'))}, first miss "
            f"{_s(f.get('first_miss_after_ready_s'))} after PostgreSQL ready"
        )
    return f"worker replaced in {_s(f.get('worker_replaced_after_s'))}"


def status_table(case: dict[str, Any]) -> Table:
    kinds = case["requests"]
    statuses = sorted(
        {s for k in kinds.values() for s in k["statuses"]},
        key=lambda s: (s == "no answer", s),
    )
    headers = ["kind", "requests", *statuses, "max ms", "p99 ms", "error codes"]
    rows = []
    for kind, k in kinds.items():
        codes = ", ".join(f"{code} {n}" for code, n in k["codes"].items()) or "-"
        rows.append(
            [
                kind,
                str(k["requests"]),
                *(str(k["statuses"].get(s, 0)) for s in statuses),
                f"{k['max_ms']:.0f}",
                f"{k['p99_ms']:.0f}",
                codes,
            ]
        )
    return Table(f"{case['name']}: requests by status", headers, rows)


def _timeline(case: dict[str, Any]) -> str:
    events = case["events"]
    start = events.get("load_start")
    if start is None:
        return ""
    parts = [
        f"{name} +{events[name] - start:.2f} s"
        for name in ("fault", "stopped", "replaced", "restore", "ready", "restored", "load_end")
        if name in events
    ]
    return "timeline from the first request: " + ", ".join(parts)


def summary_table(run: dict[str, Any]) -> Table:
    headers = [
        "case",
        "requests",
        "non-2xx / no answer",
        "max read ms",
        "recovery",
        "writes checked",
        "reads checked",
        "verdict",
    ]
    rows = []
    for case in run["cases"]:
        kinds = case["requests"]
        total = sum(k["requests"] for k in kinds.values())
        failed = sum(
            n
            for k in kinds.values()
            for status, n in k["statuses"].items()
            if not status.startswith("2")
        )
        max_read = max((kinds[k]["max_ms"] for k in cc.READS if k in kinds), default=0)
        writes = case["writes"]
        rows.append(
            [
                case["name"],
                str(total),
                str(failed),
                f"{max_read:.0f}",
                _recovery(case) if not case["error"] else "-",
                (
                    f"{writes.get('writes', 0)} ({writes.get('committed_not_acknowledged', 0)} "
                    f"committed unacked, {writes.get('retried', 0)} retried)"
                )
                if writes
                else "-",
                str(case["reads"].get("reads", "-")),
                "pass" if case["passed"] else "FAIL",
            ]
        )
    return Table("Chaos: every case", headers, rows)


def write_report(run: dict[str, Any], out_dir: Path) -> list[Table]:
    params = run["params"]
    doc = Doc()
    doc.h(1, f"Aside chaos {run['run_id']}")
    doc.p(f"Machine: {summary(run['machine'])}.", note=True)
    doc.ul(
        [
            f"load: k6 constant arrival rate {params['rate']} req/s through the gateway "
            f"{params['gateway_url']}: {params['write_share']:.0%} creates with an "
            f"Idempotency-Key, the rest cached reads ({params['user_share']:.0%} by id of "
            f"{params['id_sample']} seeded ids, the others counts of the "
            f"{params['hot_emails']} hot emails); request timeout {params['timeout_s']} s; "
            "a new connection per request",
            f"each case: {params['pre_s']:g} s of load, the fault, {params['down_s']:g} s "
            f"down, the restart, then about {params['post_s']:g} s more load",
            f"table: {run['seed'].get('rows')} rows; stack under {params['run_dir']}",
        ]
    )
    tables = [summary_table(run)]
    doc.table(tables[0])
    for case in run["cases"]:
        doc.h(2, f"{case['name']}: {case['description']}")
        if case["error"]:
            doc.p(f"The case could not run to its end: {case['error']}", note=True)
        if case["requests"]:
            table = status_table(case)
            tables.append(table)
            doc.table(table)
        if case["events"]:
            doc.p(_timeline(case))
        doc.ul(
            [f"{'PASS' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}" for c in case["checks"]]
        )
    doc.h(2, "What each case asserts")
    doc.ul(ASSERTIONS)
    (out_dir / "report.md").write_text(doc.markdown())
    (out_dir / "report.json").write_text(json.dumps(run, indent=2, default=str) + "\n")
    print()
    for table in tables:
        print(table.markdown())
    print(f"report: {out_dir}/report.md")
    return tables


ASSERTIONS = [
    "every case: no read takes more than half the 3 s request timeout; every 2xx body is right "
    "and every error a JSON error body; k6 drops no iteration; every request gets an answer "
    "(but in the worker case); every acknowledged write is in PostgreSQL once with its id, every "
    "other write is retried with its Idempotency-Key (a replay exactly when it had committed), "
    "after which every write exists once and has its key; every hot email's count and every "
    "user involved, read twice through the gateway, equal PostgreSQL",
    "redis: reads answer only 200 (served from PostgreSQL as X-Cache: BYPASS while Redis is "
    "down) or 503 with Retry-After; writes succeed; the first HIT and a hit ratio of 80% of the "
    f"one before the fault come within {cc.RECOVER_S:g} s of Redis answering, without a gateway "
    "restart",
    f"core: reads all 200; writes sent while it is down answer 503 core_unavailable within "
    f"{cc.CORE_DOWN_MAX_MS} ms; every write after it answers again succeeds",
    "postgres: cached reads (by id) all 200, but after a Redis error in the gateway (its "
    "breaker then sends reads to PostgreSQL) fast 503s with Retry-After, counted; failed "
    f"misses and writes are 503/504 JSON within "
    f"{cc.DB_DOWN_MAX_MS} ms; the first successful write and miss come within {cc.RECOVER_S:g} s "
    "of PostgreSQL accepting connections, and nothing fails after that",
    f"worker: gunicorn replaces it within {cc.REPLACE_S:g} s; only requests in flight on it at "
    "the kill go unanswered; the increase of aside_gateway_http_requests_total per route and "
    "status equals k6's answered requests, plus at most the unanswered ones the killed worker "
    "had already counted",
]
