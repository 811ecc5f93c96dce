"""Fixtures of the stack tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# --import-mode=importlib does not put test folders on sys.path.
sys.path.insert(0, str(Path(__file__).parent))

from stack_helpers import MiniStack, free_port


@pytest.fixture
def mini_stack(tmp_path: Path) -> Iterator[MiniStack]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_URL")}
    env.update(
        ASIDE_RUN_DIR=str(tmp_path / "run"),
        ASIDE_SKIP_INSTALL="1",
        ASIDE_PG_PORT=str(free_port()),
        ASIDE_REDIS_PORT=str(free_port()),
        ASIDE_INFLUX_PORT=str(free_port()),
        ASIDE_INFLUX_RPC_PORT=str(free_port()),
        # Never the test stack's cluster (infra/test.sh exports its switch and ports).
        ASIDE_REDIS_CLUSTER="0",
        ASIDE_REDIS_CLUSTER_PORTS=f"{free_port()} {free_port()} {free_port()}",
        ASIDE_REDIS_CLUSTER_REPLICA_PORTS=f"{free_port()} {free_port()} {free_port()}",
    )
    for var in ("CORE_LISTEN_ADDR", "GATEWAY_BIND"):
        env.pop(var, None)
    stack = MiniStack(tmp_path / "run", env)
    yield stack
    stack.run("down")
