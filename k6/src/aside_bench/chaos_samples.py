"""The fault suite's raw material: a `Sample` is one request as k6 recorded it
(k6/scripts/chaos.js, trend `chaos_req`): kind, status, the instant it started
and how long the client waited, and the tags the checks need. Read from k6's
`--out json` file, then counted per kind and searched in time (pure, unit-tested)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("count", "user", "create")
READS = ("count", "user")
# Requests of each kind as the gateway counts them (route rule, method).
ROUTES = {
    "count": ("/api/v1/users/count", "GET"),
    "user": ("/api/v1/users/<id>", "GET"),
    "create": ("/api/v1/users", "POST"),
}

# An instant noted by the driver and one noted by k6 (ms resolution) may differ
# by this much.
CLOCK_SLACK_S = 0.05


@dataclass(frozen=True)
class Sample:
    kind: str
    status: int
    start: float  # epoch seconds
    ms: float  # how long the client waited
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.ms / 1000

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def tag(self, name: str) -> str:
        return self.tags.get(name, "")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def parse_k6_json(lines: Iterable[str]) -> tuple[list[Sample], int]:
    """The `chaos_req` samples of a k6 `--out json` file, and how many iterations
    k6 dropped (it had no free VU when one fell due)."""
    samples: list[Sample] = []
    dropped = 0
    for line in lines:
        if '"type":"Point"' not in line:
            continue
        if '"metric":"chaos_req"' in line:
            data = json.loads(line)["data"]
            tags = data["tags"]
            samples.append(
                Sample(
                    kind=tags["kind"],
                    status=int(tags["status"]),
                    start=int(tags["start"]) / 1000,
                    ms=float(data["value"]),
                    tags={k: str(v) for k, v in tags.items()},
                )
            )
        elif '"metric":"dropped_iterations"' in line:
            dropped += int(json.loads(line)["data"]["value"])
    samples.sort(key=lambda s: s.start)
    return samples, dropped


# ---- figures -----------------------------------------------------------------------
def status_label(sample: Sample) -> str:
    return "no answer" if sample.status == 0 else str(sample.status)


def by_kind(samples: list[Sample]) -> dict[str, dict[str, Any]]:
    """Per kind: requests, count by status, max and p99 ms, error codes."""
    table: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [s for s in samples if s.kind == kind]
        if not mine:
            continue
        statuses = Counter(status_label(s) for s in mine)
        codes = Counter(
            s.tag("code") or s.tag("error") for s in mine if not s.ok and s.status != 404
        )
        times = sorted(s.ms for s in mine)
        table[kind] = {
            "requests": len(mine),
            "statuses": dict(sorted(statuses.items())),
            "codes": dict(sorted(codes.items())),
            "max_ms": times[-1],
            "p99_ms": times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)],
        }
    return table


def hit_share(samples: list[Sample]) -> float | None:
    reads = [s for s in samples if s.kind in READS and s.status == 200]
    if not reads:
        return None
    return sum(1 for s in reads if s.tag("xcache") == "HIT") / len(reads)


def first_after(samples: list[Sample], instant: float, predicate: Any) -> float | None:
    """Seconds from `instant` to the start of the first sample started at or after
    it that satisfies `predicate`."""
    for sample in samples:
        if sample.start >= instant - CLOCK_SLACK_S and predicate(sample):
            return max(sample.start - instant, 0.0)
    return None


def started_between(samples: list[Sample], lo: float, hi: float) -> list[Sample]:
    return [s for s in samples if lo <= s.start < hi]


def fmt_seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def summarize(samples: list[Sample], limit: int = 3) -> str:
    """The first few samples in a line, for a failed check's detail."""
    shown = ", ".join(
        f"{s.kind} {status_label(s)} {s.tag('code') or s.tag('error')} {s.ms:.0f} ms".strip()
        for s in samples[:limit]
    )
    more = f" (+{len(samples) - limit} more)" if len(samples) > limit else ""
    return shown + more
