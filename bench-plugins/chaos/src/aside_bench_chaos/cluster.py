"""The Redis Cluster cases under mixed load: a primary killed (its replica promoted) or migrated."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import NotRequired, TypedDict

import redis
import requests
from aside_bench.load.run import LoadRun
from aside_bench.load.summary import Summary
from aside_bench.stack import gateway_metrics
from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError, connect, wait_for, wait_until_quiet
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench_suite.base import sleep_until
from aside_bench_suite.samples import Check, KindTally, nearest_rank
from redis.cluster import RedisCluster
from redis.crc import key_slot

from aside_bench_chaos.cases import FAILOVER, RESHARD, CaseResult, ChaosParams
from aside_bench_chaos.checks import within
from aside_bench_chaos.faults import kill, under_load
from aside_bench_chaos.verify import check_reads, count_url

PRE_S, POST_S = 5.0, 8.0  # load before the event, and after it ends
EVENT_BUDGET_S = {FAILOVER: 15.0, RESHARD: 40.0}  # the event's length, budgeted into the load
# The most the event may take: the promotion (cluster-node-timeout 5 s, then
# an election) or every slot of a primary moved on a shared 2-core machine.
EVENT_DEADLINE_S = {FAILOVER: 30.0, RESHARD: 180.0}
NEW_OWNER_MAX_S = {FAILOVER: 15.0, RESHARD: 5.0}  # from the event's end (failover: the kill)
RESUBSCRIBED_MAX_S = 15.0
OUTBOX_DEADLINE_S = 30.0
ERROR_SHARE_MAX = 0.05  # of the requests over the event
STALE_PER_MIN = 120
KEY_PREFIX = "aside:v1:"


def cluster_settings(settings: Settings) -> tuple[Settings, dict[str, str]]:
    """The bench's settings on the cluster, and the services' environment for it."""
    url = os.environ.get("ASIDE_REDIS_CLUSTER_URL", "")
    if not url or os.environ.get("ASIDE_REDIS_CLUSTER") != "1":
        raise StackError(
            "the cluster cases need the stack's Redis Cluster: ASIDE_REDIS_CLUSTER=1 make up"
        )
    env = {"REDIS_MODE": "cluster", "REDIS_URL": url, "CACHE_L1_SUBSCRIBER": "thread"}
    return replace(settings, redis_url=url, redis_mode="cluster"), env


def node_names() -> dict[int, str]:
    """Each node's port and its name under .run/pids (infra/cluster.sh)."""
    names = {}
    for prefix, var in (
        ("redis-cluster", "ASIDE_REDIS_CLUSTER_PORTS"),
        ("redis-replica", "ASIDE_REDIS_CLUSTER_REPLICA_PORTS"),
    ):
        for i, port in enumerate(os.environ.get(var, "").split(), 1):
            names[int(port)] = f"{prefix}-{i}"
    return names


def fresh_cluster(control: ServiceControl) -> None:
    """The cluster as infra/cluster.sh makes it: its nodes stopped, then `up` makes it anew."""
    for name in node_names().values():
        with contextlib.suppress(StackError, ProcessLookupError):
            kill(control, name)
    wait_for(lambda: not control.healthy(), 10.0, 0.2)
    control.ensure_up()


def count_key(email: str) -> str:
    return f"{KEY_PREFIX}{{count:{email}}}"


class ClusterNode(TypedDict):  # CLUSTER NODES' reply, as redis-py gives it: what is read
    node_id: str
    master_id: str
    flags: str
    slots: list[list[str]]
    connected: bool


class Topology:
    """The cluster as a fresh client sees it: primaries, their slots and replicas."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def client(self) -> RedisCluster:
        return RedisCluster.from_url(self.settings.redis_url, socket_timeout=2)

    def nodes(self) -> dict[str, ClusterNode]:
        with self.client() as client:
            return {k: v for k, v in client.cluster_nodes().items() if v["connected"]}

    def password(self) -> str:
        with redis.Redis.from_url(self.settings.redis_url) as base:
            return str(base.connection_pool.connection_kwargs.get("password") or "")

    def holds(self, port: int, key: str) -> bool:
        """The node on `port` owns `key`'s slot and holds it (MOVED: not its slot)."""
        password = self.password() or None
        node = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=1)
        with node as client:
            try:
                return bool(client.exists(key))
            except redis.RedisError:
                return False


def _slots(node: ClusterNode) -> set[int]:
    return {s for lo, hi in node["slots"] for s in range(int(lo), int(hi) + 1)}


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def probe_email(run_id: str, slots: set[int]) -> str:
    """A fresh email (count 0) whose key's slot is among `slots`."""
    for i in range(100_000):
        email = f"probe{i}.{run_id}@cluster.example"
        if key_slot(f"count:{email}".encode()) in slots:
            return email
    raise StackError("no probe email in the slots that move")


def mixed_run(seed: SeedData, params: ChaosParams, case: str) -> LoadRun:
    return LoadRun(
        scenario="mixed",
        run_id=params.run_id,
        arm="l2",
        phase=case,
        rate=params.rate,
        duration_s=math.ceil(PRE_S + EVENT_BUDGET_S[case] + POST_S),
        pool=params.rate * 4,
        timeout_s=3,
        data_dir=seed.data_dir,
        extra={"CACHE": "l2", "WRITE_SHARE": "0.1", "STALE_PER_MIN": str(STALE_PER_MIN)},
        summary_path=params.out_dir / f"load-{case}-summary.json",
        samples_path=params.out_dir / f"load-{case}.jsonl",
    )


class SampleLine(TypedDict):  # a line of the driver's samples file: what is read
    t: float
    ms: float
    status: int  # 0: no answer
    name: str
    ok: bool
    tags: NotRequired[dict[str, str] | None]


# Requests of a window by name: how many, their errors by status, their p99 ms.
Windows = dict[str, dict[str, int | float | dict[str, int]]]


class ClusterFigures(TypedDict):  # report.json's "figures" of a cluster case
    event_s: float
    over_event: Windows
    before: Windows
    after: Windows
    error_share_over_event: float | None
    served_by_new_owner_after_s: float | None
    l1_subscribed_after_s: float | None
    l1_subscriptions_renewed: NotRequired[float]
    stale: NotRequired[dict[str, int]]  # the stale checker's counters


def read_lines(path: Path) -> list[SampleLine]:
    lines = []
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue  # a last line cut short
        if not line.get("dropped"):
            lines.append(line)
    return lines


def _by_name(lines: list[SampleLine]) -> dict[str, list[SampleLine]]:
    names = sorted({str(x.get("name")) for x in lines})
    return {name: [x for x in lines if str(x.get("name")) == name] for name in names}


def window_figures(lines: list[SampleLine], start: float, end: float) -> Windows:
    """Requests sent in [start, end): by name, their count, errors and p99 ms."""
    figures: Windows = {}
    for name, one in _by_name([x for x in lines if start <= float(x["t"]) < end]).items():
        # A request not answered or answered 5xx; the stale checker's verdicts are its own check.
        errors = [x for x in one if x["status"] == 0 or x["status"] >= 500]
        by_status = sorted(Counter(x["status"] for x in errors).items())
        figures[name] = {
            "requests": len(one),
            "errors": len(errors),
            "statuses": {str(status): n for status, n in by_status},
            "p99_ms": round(nearest_rank(sorted(float(x["ms"]) for x in one), 99), 1),
        }
    return figures


def requests_table(lines: list[SampleLine]) -> dict[str, KindTally]:
    """The chaos report's status table, per request name."""
    table = {}
    for name, one in _by_name(lines).items():
        statuses = Counter("no answer" if x["status"] == 0 else str(x["status"]) for x in one)
        ms = sorted(float(x["ms"]) for x in one)
        errors = ((x.get("tags") or {}).get("error") for x in one if not x.get("ok"))
        codes = Counter(code for code in errors if code)
        table[name] = {"requests": len(one), "statuses": dict(statuses), "codes": dict(codes),
                       "max_ms": ms[-1], "p99_ms": nearest_rank(ms, 99)}  # fmt: skip
    return table


def subscriptions(text: str) -> float:
    """The gateway's confirmed subscriptions to the invalidation channel, so far."""
    return gateway_metrics.unlabelled_value(text, "aside_gateway_l1_subscriptions_total") or 0.0


def subscribed(settings: Settings) -> bool:
    """Every gateway worker's L1 subscribed to the invalidation channel now."""
    text = gateway_metrics.scrape(settings)
    return gateway_metrics.unlabelled_value(text, "aside_gateway_l1_subscribed") == 1


def outbox_rows(settings: Settings) -> int:
    with connect(settings) as conn:
        row = conn.execute("SELECT count(*) FROM cache_invalidations").fetchone()
    return int(row[0]) if row else 0


class Event:
    """One case's event, and the slots and owner it moves to."""

    def __init__(self, topology: Topology, control: ServiceControl, case: str):
        self.topology, self.control, self.case = topology, control, case
        nodes = topology.nodes()
        primaries = {a: n for a, n in nodes.items() if "master" in n["flags"] and n["slots"]}
        seed_port = _port(topology.settings.redis_url.rsplit("/", 1)[0])
        # Never the seed node the services were given: their first map comes from it.
        self.source = source = max(
            (a for a in primaries if _port(a) != seed_port), key=lambda a: len(_slots(primaries[a]))
        )
        self.slots = _slots(primaries[source])
        if case == FAILOVER:
            source_id = primaries[source]["node_id"]
            self.target = next(a for a, n in nodes.items() if n["master_id"] == source_id)
        else:
            self.target = next(a for a in primaries if _port(a) == seed_port)
        self.ids = {a: n["node_id"] for a, n in nodes.items()}

    def run(self, events: dict[str, float], notes: dict[str, object]) -> None:
        events["event"] = time.time()
        notes.update(source=self.source, target=self.target, slots=len(self.slots))
        limit = EVENT_DEADLINE_S[self.case]
        if self.case == FAILOVER:
            notes["killed_pid"] = kill(self.control, node_names()[_port(self.source)])
            at = wait_for(self._promoted, limit, 0.1)
            if at is None:
                raise StackError(f"{self.target} was not promoted within {limit} s")
            events["event_end"] = at
            return
        target = f"127.0.0.1:{_port(self.target)}"
        moves = ("--cluster-from", self.ids[self.source], "--cluster-to", self.ids[self.target])
        argv = ["redis-cli", "--no-auth-warning", "--cluster", "reshard", target, *moves]
        argv += ["--cluster-slots", str(len(self.slots)), "--cluster-yes"]
        env = {**os.environ, "REDISCLI_AUTH": self.topology.password()}
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=limit, check=False
        )
        events["event_end"] = time.time()
        if done.returncode != 0:
            raise StackError(f"redis-cli --cluster reshard failed: {done.stderr.strip()[-300:]}")

    def _promoted(self) -> bool:
        node = self.topology.nodes().get(self.target)
        return node is not None and "master" in node["flags"] and bool(node["slots"])


def new_owner_probe(
    settings: Settings, topology: Topology, email: str, target: str, deadline: float
) -> float | None:
    """The first instant a read of `email` through the gateway fills its key on the new owner
    (its stale copy first deleted through a fresh client, which follows the slot)."""
    key, port = count_key(email), _port(target)
    url = count_url(settings, email) + "&cache=l2"
    while time.time() < deadline:
        try:
            with topology.client() as client:
                client.delete(key)
            requests.get(url, timeout=2)
        except (redis.RedisError, requests.RequestException, IndexError):
            pass
        if topology.holds(port, key):
            return time.time()
        time.sleep(0.1)
    return None


def run_cluster_case(
    settings: Settings, seed: SeedData, control: ServiceControl, params: ChaosParams, case: str
) -> CaseResult:
    result = CaseResult(case)
    on_cluster, env = cluster_settings(settings)
    control.ensure_up()
    for service in ("core", "gateway"):
        control.restart(service, env)
    wait_until_quiet(settings, 60.0)
    topology = Topology(on_cluster)
    event = Event(topology, control, case)
    email = probe_email(params.run_id, event.slots)
    metrics_before = gateway_metrics.scrape(settings)
    run = mixed_run(seed, params, case)
    events = result.events
    with under_load(settings, run, params.out_dir / "load.log", events):
        sleep_until(events["load_start"] + PRE_S)
        event.run(events, result.notes)
        since = events["event"] if case == FAILOVER else events["event_end"]
        served = new_owner_probe(
            settings, topology, email, event.target, since + NEW_OWNER_MAX_S[case] + 5
        )
        if served is not None:
            events["served_by_new_owner"] = served
        resubscribed = wait_for(lambda: subscribed(settings), RESUBSCRIBED_MAX_S, 0.2)
    lines = read_lines(run.samples_path)
    result.requests = requests_table(lines)
    result.checks, figures = judge(case, lines, events, served, resubscribed, since)
    renewed = subscriptions(gateway_metrics.scrape(settings)) - subscriptions(metrics_before)
    figures["l1_subscriptions_renewed"] = renewed
    figures["stale"] = stale = Summary.read(run.summary_path).counters("stale")
    result.figures = figures
    checked, seen = stale.get("stale_checked", 0), stale.get("stale_reads", 0)
    errors = stale.get("stale_check_errors", 0)
    pending = wait_for(lambda: outbox_rows(settings) == 0, OUTBOX_DEADLINE_S, 0.5)
    reads_check, result.reads = check_reads(settings, seed.hot, [])
    result.checks += [
        Check(
            "no stale read afterwards (the mixed scenario's checker)",
            checked > 0 and seen == 0,
            f"{seen} stale of {checked} checked reads, {errors} errors",
        ),
        Check(
            "no invalidation lost (the outbox drained; every hot count equals PostgreSQL)",
            pending is not None and reads_check.ok,
            ("outbox empty; " if pending is not None else f"{outbox_rows(settings)} rows left; ")
            + reads_check.detail,
        ),
    ]
    return result


def judge(
    case: str,
    lines: list[SampleLine],
    events: dict[str, float],
    served: float | None,
    resubscribed: float | None,
    since: float,
) -> tuple[list[Check], ClusterFigures]:
    """The checks on the samples and the instants noted."""
    start, end = events["event"], events["event_end"] + 1.0
    over = window_figures(lines, start, end)
    before = window_figures(lines, events["load_start"], start)
    after = window_figures(lines, end, events["load_end"])
    total = sum(f["requests"] for f in over.values())
    errors = sum(f["errors"] for f in over.values())
    served_s = None if served is None else round(served - since, 2)
    resub_s = None if resubscribed is None else round(resubscribed - events["event"], 2)
    late_errors = sum(f["errors"] for f in after.values())
    figures: ClusterFigures = {
        "event_s": round(events["event_end"] - events["event"], 2),
        "over_event": over, "before": before, "after": after,
        "error_share_over_event": round(errors / total, 4) if total else None,
        "served_by_new_owner_after_s": served_s,
        "l1_subscribed_after_s": resub_s,
    }  # fmt: skip
    owner = "the promoted replica" if case == FAILOVER else "the new primary"
    since_what = "the kill" if case == FAILOVER else "the migration"
    checks = [
        Check(
            "reads served from the new owner",
            within(served_s, NEW_OWNER_MAX_S[case]),
            f"a key of the moved slots filled on {owner} {served_s} s after {since_what} "
            f"(at most {NEW_OWNER_MAX_S[case]} s)",
        ),
        Check(
            "errors over the event bounded, none after",
            total > 0 and errors / total <= ERROR_SHARE_MAX and late_errors == 0,
            f"{errors} of {total} requests failed over the event (at most {ERROR_SHARE_MAX:.0%}), "
            f"{late_errors} after it",
        ),
        Check(
            "every L1 subscribed again",
            resub_s is not None,
            f"every worker subscribed {resub_s} s after the event (within {RESUBSCRIBED_MAX_S} s)",
        ),
    ]
    return checks, figures
