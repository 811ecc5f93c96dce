"""/readyz under many callers (web/app.py's ReadinessCache) on a real gateway:
its dependency checks stay bounded by the clock, not by how many ask."""

from __future__ import annotations

import threading
import time

import requests
from gateway_helpers import sample, scrape

CALLERS = 64
SECONDS = 2.0
READY_CACHE_MS = 1000


def _checks(base: str) -> float:
    return sample(scrape(base), "aside_gateway_readiness_checks_total")


def test_many_readyz_callers_share_a_bounded_number_of_checks(start_gateway):
    gateway = start_gateway(GATEWAY_READY_CACHE_MS=str(READY_CACHE_MS))
    before = _checks(gateway.url)
    answered: list[int] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + SECONDS

    def caller() -> None:
        with requests.Session() as session:  # keep-alive loops, as a prober would
            while time.monotonic() < stop_at:
                status = session.get(gateway.url + "/readyz", timeout=5).status_code
                with lock:
                    answered.append(status)

    threads = [threading.Thread(target=caller) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 30)
    checks = _checks(gateway.url) - before
    # Each worker checks at most once per READY_CACHE_MS, plus the one in
    # flight at either end.
    bound = 2 * (SECONDS * 1000 / READY_CACHE_MS + 2)
    assert checks <= bound, (checks, len(answered))
    assert len(answered) > 5 * bound  # the callers did ask far more often
    # And none was refused: a fresh verdict takes no place in the ops pool.
    assert set(answered) == {200}, set(answered)
