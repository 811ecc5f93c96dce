"""What an anonymous client can make the tracks route cost, through a real gunicorn,
Redis and core: the tolerance ladder bounds the keys and the simplifications of
a track, and a flood of random tolerances does not take token-gated compute's
CPU (the core simplifies in slots of its own). docs/decisions/064-*.md."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import random
import time
from decimal import Decimal

import pytest
import requests
from aside_gateway.contracts import cache_keys
from gateway_helpers import Flood, contract, run_flood, scrape, wait_until

TRACKS = contract("tracks.json")
LADDER = TRACKS["tolerance"]["ladder"]
SIMPLIFICATIONS = "aside_core_simplify_duration_seconds_count"
COMPUTE_JOB = {"kind": "checksum", "complexity": 100}
COMPUTE_SAMPLES = 80
FLOOD_POINTS = 20_000
FLOOD_THREADS = 32
FLOOD_SECONDS = 15.0
LOUD_WINDOW_SECONDS = 8.0
LOUD_MIN_SAMPLES = 5
FLOOD_MAX_REQUESTS = 100_000
LOUD_FACTOR = 3


def simplifications(core_url: str) -> float:
    return sum(v for (name, _), v in scrape(core_url).items() if name == SIMPLIFICATIONS)


def zigzag(points: int, seed: int) -> str:
    """A path whose simplification differs at every level of the ladder."""
    rng = random.Random(seed)
    pairs = (
        f"[{13.4 + i * 2e-5:.6f},{52.5 + rng.uniform(-1, 1) * 10 ** rng.uniform(-6, -2):.7f}]"
        for i in range(points)
    )
    return "[" + ",".join(pairs) + "]"


def random_tolerances(count: int, seed: int) -> list[str]:
    """`count` distinct plain decimals from 0.000001 to 0.01, at most 16 characters."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while len(seen) < count:
        value = Decimal(rng.randint(1_000_000, 10_000_000_000)) / Decimal(10**12)
        seen.add(f"{value:f}"[:16])
    return sorted(seen)


@pytest.fixture(scope="module")
def insert_track(db):
    def insert(path: str) -> int:
        row = db.execute(
            "INSERT INTO tracks (name, distance_m, path) VALUES ('Bounds', 1, %s::json) "
            "RETURNING id",
            (path,),
        ).fetchone()
        return int(row[0])

    return insert


def test_500_tolerances_make_at_most_a_ladder_of_keys_and_simplifications(
    gateway, core, insert_track, rdb
):
    track_id = insert_track(zigzag(400, seed=1))
    tolerances = random_tolerances(500, seed=2)
    before = simplifications(core.url)
    session = requests.Session()
    answered: set[float] = set()
    for raw in tolerances:
        response = session.get(
            f"{gateway.url}/api/v1/tracks/{track_id}", params={"simplify": raw}, timeout=30
        )
        assert response.status_code == 200, (raw, response.text)
        level = response.json()["tolerance"]
        assert Decimal(str(level)) <= Decimal(raw)  # never coarser than asked
        answered.add(level)
    keys = list(rdb.scan_iter(match=f"{cache_keys.PREFIX}:{{track:{track_id}}}:dp:*", count=1000))
    done = simplifications(core.url) - before
    assert 1 < len(keys) <= len(LADDER), keys
    assert {float(level) for level in LADDER} >= answered
    assert 0 < done <= len(LADDER), done


def straight_with_noise(points: int, seed: int) -> str:
    """A long path whose simplification at every level of the ladder is its two
    ends: each simplification reads and decodes the whole path (the core's
    cost), each answer is a few bytes (a hit's cost)."""
    rng = random.Random(seed)
    pairs = (
        f"[{13.4 + i * 2e-5:.6f},{52.5 + rng.uniform(-4e-7, 4e-7):.7f}]" for i in range(points)
    )
    return "[" + ",".join(pairs) + "]"


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[math.ceil(len(ordered) * 0.95) - 1]


def _compute_latencies(base: str, count: int, until: float = math.inf) -> list[float]:
    """Up to `count` token-gated checksums one after another (none begun after
    `until`, a time.monotonic()), each one's latency in seconds."""
    session = requests.Session()
    latencies = []
    while len(latencies) < count and time.monotonic() < until:
        start = time.perf_counter()
        response = session.post(base + "/api/v1/compute", json=COMPUTE_JOB, timeout=30)
        latencies.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
    return latencies


def _compute_p95_beside(flood: Flood) -> tuple[float, dict[int, int]]:
    """Compute's p95 while `flood` runs from a client process of its own, and
    the flood's answers by status."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    statuses = context.Array("i", 600)
    client = context.Process(target=run_flood, args=(flood, stop, statuses), daemon=True)
    client.start()
    try:
        wait_until(lambda: sum(statuses) >= FLOOD_THREADS, 30, "the flood to run")
        samples = _compute_latencies(
            flood.base_url, COMPUTE_SAMPLES, until=time.monotonic() + LOUD_WINDOW_SECONDS
        )
        flooding = client.is_alive()
    finally:
        stop.set()
        client.join(timeout=60)
        if client.is_alive():
            client.kill()
    answers = {code: count for code, count in enumerate(statuses) if count}
    assert flooding, f"the flood ended before compute's samples did: {answers}"
    assert len(samples) >= LOUD_MIN_SAMPLES, f"{len(samples)} samples"
    assert all(0 < code < 500 or code == 503 for code in answers), answers
    return _p95(samples), answers


def test_compute_keeps_its_p95_while_tolerances_flood_the_tracks(gateway, insert_track):
    """An anonymous client asks random tolerances of large tracks on
    FLOOD_THREADS connections as fast as it can; token-gated compute's p95
    stays within LOUD_FACTOR of its p95 beside the same client asking one
    tolerance (hits only). With the ladder, the random flood is hits too after a ladder
    of misses a track, and past the core's simplification slot, 503s: the
    core's CPU stays compute's. Without them (every tolerance its own key,
    CORE_SIMPLIFY_MAX_CONCURRENCY unbounded) every request is a
    simplification running beside compute in the core.

    The reference is the hits' flood, not a quiet machine: on two cores the
    flood's client and the gateway serving its hits share the CPU with
    compute whatever the bounds, and that is not what the bounds are for.
    LOUD_FACTOR is 3, not 2: with the bounds the ratio stays under 2 but
    close enough to it on a shared machine that 2 would fail now and then;
    without them it is several times 3."""
    paths = [straight_with_noise(FLOOD_POINTS, seed=10 + i) for i in range(4)]
    track_ids = tuple(insert_track(path) for path in paths)
    _compute_latencies(gateway.url, 10)  # warm the connections
    quiet = _p95(_compute_latencies(gateway.url, COMPUTE_SAMPLES))
    flood = Flood(gateway.url, track_ids, FLOOD_THREADS, FLOOD_SECONDS, FLOOD_MAX_REQUESTS)
    hits, hit_answers = _compute_p95_beside(dataclasses.replace(flood, tolerance=LADDER[-1]))
    loud, answers = _compute_p95_beside(flood)
    # The figures, for a run's log (pytest -s).
    print(
        f"\ncompute p95 quiet {quiet * 1000:.1f} ms, beside hits {hits * 1000:.1f} ms "
        f"{hit_answers}, beside random tolerances {loud * 1000:.1f} ms {answers}"
    )
    assert loud <= LOUD_FACTOR * hits, (
        f"compute p95 {loud * 1000:.1f} ms beside random tolerances, "
        f"{hits * 1000:.1f} ms beside hits ({quiet * 1000:.1f} ms quiet)"
    )
