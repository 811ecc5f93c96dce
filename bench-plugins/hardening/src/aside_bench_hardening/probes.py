"""What measures the attacks: workers' VmRSS and descriptors, count queries, gateway counters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
from aside_bench.stack import gateway_metrics as metrics
from aside_bench.stack import procs
from aside_bench.stack.config import Settings

from aside_bench_hardening import checks as hc

POLL_S = 0.05  # how often the query counter is read after the flood
RSS_INTERVAL_S = 0.1  # and the workers' RSS beside an attack
# pg_stat_statements' text of the gateway's count queries (db.py): one email, and a batch.
GATEWAY_COUNT_QUERIES = (
    "SELECT count(*) FROM users WHERE email = $1",
    "SELECT email, count(*) FROM users WHERE email = ANY($1) GROUP BY email",
)
FLOOD_DOMAIN = "hardening.invalid"
COUNT_ROUTE = "/api/v1/users/count"
# The shed reasons of the event loop's door (the gateway's loop_admission.py):
# a read it refuses is also counted as a 503 answer of its route.
DOOR_REASONS = ("admission_limit", "loop_late")
# The gateway's counters by name: one value (None: not exported), or values by label.
GatewayCounters = dict[str, float | dict[str, float] | None]


class RssSampler:
    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[hc.RssSample] = []
        self.fds: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            now = time.time()
            for found, read in ((self.samples, procs.rss_kib), (self.fds, procs.fd_count)):
                values = {pid: read(pid) for pid in self.pids}
                found.append((now, {p: v for p, v in values.items() if v is not None}))
            if self._stop.wait(RSS_INTERVAL_S):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_fds(self) -> dict[str, int]:
        return {str(pid): max((s[1].get(pid, 0) for s in self.fds), default=0) for pid in self.pids}


def flood_emails(run_id: str, count: int) -> list[str]:
    """`count` distinct emails in no seeded row (.invalid is a reserved domain)."""
    return [f"flood-{run_id}-{i}@{FLOOD_DOMAIN}" for i in range(count)]


def emails_in_table(conn: psycopg.Connection, run_id: str) -> int:
    # count(1), not count(*): one parsed like the gateway's would share its pg_stat_statements row.
    pattern = f"flood-{run_id}-".replace("\\", "\\\\").replace("_", r"\_") + "%"
    row = conn.execute("SELECT count(1) FROM users WHERE email LIKE %s", (pattern,)).fetchone()
    return int(row[0]) if row else 0


def count_query_calls(conn: psycopg.Connection) -> int:
    """Executions of the gateway's count queries here (a batch of emails is one)."""
    row = conn.execute(
        "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid "
        "WHERE d.datname = current_database() AND s.query = ANY(%s)",
        (list(GATEWAY_COUNT_QUERIES),),
    ).fetchone()
    return int(row[0]) if row else 0


def poll_until_still(
    read: Callable[[], float], quiet_s: float, deadline_s: float, interval_s: float = POLL_S
) -> list[hc.Reading]:
    """A counter read every `interval_s` till still for `quiet_s`, or `deadline_s` passed."""
    readings: list[hc.Reading] = []
    end = time.monotonic() + deadline_s
    while True:
        readings.append((time.time(), float(read())))
        if hc.still_for(readings, quiet_s) or time.monotonic() >= end:
            return readings
        time.sleep(interval_s)  # the polling pace


def gateway_counters(settings: Settings) -> GatewayCounters:
    """The gateway's own counters the flood moves, summed over its workers."""
    text = metrics.scrape(settings)
    hits = metrics.summed_by_label(text, "aside_gateway_cache_hits_total", "route")
    answers = metrics.request_counts(text).items()
    return {
        "db_queries": metrics.summed_by_label(text, "aside_gateway_db_queries_total", "query"),
        "shed": metrics.summed_by_label(text, "aside_gateway_shed_total", "reason"),
        "batched_emails": metrics.unlabelled_value(text, "aside_gateway_miss_batch_size_sum"),
        "count_answers": {status: n for (route, _, status), n in answers if route == COUNT_ROUTE},
        "count_hits": hits.get(COUNT_ROUTE, 0.0),
    }


def counter_increase(before: GatewayCounters, after: GatewayCounters) -> GatewayCounters:
    """What the flood added to each counter, and its reads a Flask thread ran, by answer: every
    count answered but the hits (the driver's) and the door's refusals (503 answers too)."""
    found: GatewayCounters = {}
    for name in ("db_queries", "shed", "count_answers"):
        keys = set(before[name]) | set(after[name])
        found[name] = {k: after[name].get(k, 0) - before[name].get(k, 0) for k in sorted(keys)}
    for name in ("batched_emails", "count_hits"):
        found[name] = (after[name] or 0) - (before[name] or 0)
    ran = dict(found["count_answers"])
    ran["200"] = ran.get("200", 0) - found["count_hits"]
    ran["503"] = ran.get("503", 0) - sum(found["shed"].get(r, 0) for r in DOOR_REASONS)
    found["flood_ran"] = {status: n for status, n in ran.items() if n}
    return found
