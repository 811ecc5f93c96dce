"""What an anonymous client can make the tracks route cost, through a real gunicorn,
Redis and core: the tolerance ladder bounds the keys and the simplifications of
a track, and a flood of random tolerances does not slow token-gated compute
(the core simplifies in slots of its own). docs/decisions/064-*.md."""

from __future__ import annotations

import random
import threading
import time
from decimal import Decimal

import pytest
import requests
from aside_gateway.contracts import cache_keys
from gateway_helpers import contract, scrape, wait_until

TRACKS = contract("tracks.json")
LADDER = TRACKS["tolerance"]["ladder"]
SIMPLIFICATIONS = "aside_core_simplify_duration_seconds_count"


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


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(len(ordered) * 0.95) - 1]


def _compute_latencies(base: str, count: int) -> list[float]:
    session = requests.Session()
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        response = session.post(
            base + "/api/v1/compute", json={"kind": "checksum", "complexity": 100}, timeout=30
        )
        latencies.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
    return latencies


def _flood(base: str, track_ids: list[int], stop: threading.Event, statuses: list[int]) -> None:
    """An anonymous client asking random tolerances of random tracks as fast as it can."""
    rng = random.Random(threading.get_ident())
    session = requests.Session()
    while not stop.is_set():
        raw = f"{Decimal(rng.randint(1_000_000, 10_000_000_000)) / Decimal(10**12):f}"[:16]
        track_id = rng.choice(track_ids)
        response = session.get(
            f"{base}/api/v1/tracks/{track_id}", params={"simplify": raw}, timeout=30
        )
        statuses.append(response.status_code)


def test_compute_keeps_its_p95_while_tolerances_flood_the_tracks(gateway, insert_track):
    track_ids = [insert_track(zigzag(5_000, seed=10 + i)) for i in range(4)]
    _compute_latencies(gateway.url, 5)  # warm the connections
    quiet = _p95(_compute_latencies(gateway.url, 60))
    stop = threading.Event()
    statuses: list[int] = []
    flood = [
        threading.Thread(target=_flood, args=(gateway.url, track_ids, stop, statuses))
        for _ in range(1)  # one client: one request at a time, as fast as it can
    ]
    for thread in flood:
        thread.start()
    try:
        wait_until(lambda: len(statuses) >= 30, 10, "the flood to run")
        loud = _p95(_compute_latencies(gateway.url, 60))
    finally:
        stop.set()
        for thread in flood:
            thread.join(timeout=30)
    assert len(statuses) > 100, "the flood did not run"
    assert all(status < 500 or status == 503 for status in statuses), set(statuses)
    assert loud <= 2 * quiet, (
        f"compute p95 {loud * 1000:.1f} ms under the flood, {quiet * 1000:.1f} ms quiet"
    )
