"""What the /api/v1 routes (web/api.py, web/tracks.py) use of a worker's services.

web/app.py picks these out of `services.Services`; the routes see only them,
not the whole record (so they import the parts, not the module building them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from aside_gateway.backends.core_client import CoreClient
from aside_gateway.config.settings import Settings
from aside_gateway.door.miss_budget import MissBudget
from aside_gateway.misses.db import Database


@dataclass(frozen=True)
class RouteParts:
    """The parts every read and write route shares."""

    settings: Settings
    db: Database
    core: CoreClient
    # Uncached reads at once (LAB_MAX_CONCURRENT_BYPASS); past it, a fast 503.
    bypass_slots: threading.BoundedSemaphore
    # Production's misses a second per route and client (door/miss_budget.py).
    miss_budget: MissBudget
