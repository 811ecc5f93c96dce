"""The chaos suite's cases, parameters and a case's result (below the runner and cluster.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from aside_bench_suite.base import SuiteResult
from aside_bench_suite.samples import KindTally

from aside_bench_chaos import gray
from aside_bench_chaos.checks import REQUEST_TIMEOUT_S
from aside_bench_chaos.verify import CheckFigures

KILLS = ("redis", "core", "postgres", "worker")
FAILOVER, RESHARD = "cluster-failover", "cluster-reshard"
CLUSTER_CASES = (FAILOVER, RESHARD)
# Gray and cluster cases run only when named (the cluster cases need the stack's Redis Cluster).
CASES = (*KILLS, *gray.GRAY_CASES, *CLUSTER_CASES)
DESCRIPTIONS = {
    "redis": "Redis killed (SIGKILL) and restarted",
    "core": "the core killed (SIGKILL) and restarted",
    "postgres": "PostgreSQL stopped (fast shutdown) and restarted",
    "worker": "one gunicorn worker killed (SIGKILL)",
    **{name: case.description for name, case in gray.GRAY_CASES.items()},
    FAILOVER: "a Redis Cluster primary killed (SIGKILL), its replica promoted, under mixed load",
    RESHARD: "every slot of one Redis Cluster primary migrated to another, under mixed load",
}


@dataclass
class CaseResult(SuiteResult):
    requests: dict[str, KindTally] = field(default_factory=dict)  # by kind
    # The case's own: checks.py's, gray.py's or cluster.py's figures.
    figures: Mapping[str, object] = field(default_factory=dict)
    writes: CheckFigures = field(default_factory=dict)
    reads: CheckFigures = field(default_factory=dict)

    descriptions: ClassVar[dict[str, str]] = DESCRIPTIONS


# Seconds infra/stack.sh takes to bring each service back, budgeted into the load's duration.
RESTORE_BUDGET_S = {"redis": 1.0, "core": 1.0, "postgres": 2.0, "worker": 0.0}
RESTORE_BUDGET_S.update(dict.fromkeys(gray.GRAY_CASES, 0.0))  # a toxic removed


@dataclass(frozen=True)
class Timing:  # seconds of load before the fault, from it to the restart, and after
    pre_s: float
    down_s: float
    post_s: float
    gray_s: float = 10  # a gray failure's length

    def fault_s(self, case: str) -> float:
        return self.gray_s if case in gray.GRAY_CASES else self.down_s

    def load_duration_s(self, case: str) -> int:
        return int(self.pre_s + self.fault_s(case) + RESTORE_BUDGET_S[case] + self.post_s + 0.999)


FULL = Timing(pre_s=8, down_s=6, post_s=12, gray_s=10)
SHORT = Timing(pre_s=3, down_s=2, post_s=5, gray_s=3)


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
    timeout_s: ClassVar[int] = REQUEST_TIMEOUT_S
