"""The chaos suite's cases by name and what one case's run gives report.json: one
module below the runner and the cluster cases, which both fill a CaseResult."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from aside_bench_suite.base import SuiteResult
from aside_bench_suite.samples import KindTally

from aside_bench_chaos import gray
from aside_bench_chaos.verify import CheckFigures

KILLS = ("redis", "core", "postgres", "worker")
FAILOVER, RESHARD = "cluster-failover", "cluster-reshard"
CLUSTER_CASES = (FAILOVER, RESHARD)
# The gray failures and the cluster cases run only when named (the cluster
# cases need the stack's Redis Cluster).
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
