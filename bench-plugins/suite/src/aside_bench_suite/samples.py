"""A request as the driver's samples file records it (a `Sample`): read, counted, searched."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from aside_bench.load.run import DriverProcess
from aside_bench.load.samples import SamplesError, number, sample_lines
from aside_bench.load.summary import Summary
from aside_bench.records.tierstats import nearest_rank
from aside_bench.stack.prepare import StackError

KINDS = ("count", "user", "create")
READS = ("count", "user")
# Requests of each kind as the gateway counts them (route rule, method).
ROUTES = {
    "count": ("/api/v1/users/count", "GET"),
    "user": ("/api/v1/users/<id>", "GET"),
    "create": ("/api/v1/users", "POST"),
}

# An instant noted by the bench and one noted by the load driver (each process
# reads the clock on its own, at its own moment) may differ by this much.
CLOCK_SLACK_S = 0.05
FIRST_REQUEST_POLL_S = 0.05  # how often the wait for the first request reads the file


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


class CheckRecord(TypedDict):
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> CheckRecord:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def _tag_text(value: Any) -> str:
    """A tag as the checks compare it: text, a JSON boolean as "1" or "0"."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def parse_samples(lines: Iterable[str], source: str) -> tuple[list[Sample], int]:
    """A `chaos` samples file's requests by the instant sent, and the iterations dropped."""
    samples: list[Sample] = []
    dropped = 0
    for where, line in sample_lines(lines, source):
        if line.get("dropped"):
            dropped += 1
            continue
        tags = line.get("tags")
        if not isinstance(tags, dict) or not tags.get("kind"):
            raise SamplesError(f"{where}: a request without its tags' kind")
        status = number(line, "status", where)
        samples.append(
            Sample(
                kind=str(tags["kind"]),
                status=int(status),
                start=number(line, "t", where),
                ms=number(line, "ms", where),
                tags={k: _tag_text(v) for k, v in tags.items() if v is not None},
            )
        )
    samples.sort(key=lambda s: s.start)
    return samples, dropped


def read_samples(path: Path) -> tuple[list[Sample], int]:
    with path.open() as handle:
        return parse_samples(handle, path.name)


# ---- figures -----------------------------------------------------------------------
def status_label(sample: Sample) -> str:
    return "no answer" if sample.status == 0 else str(sample.status)


class KindTally(TypedDict):
    """One kind's requests as report.json's "requests" holds them."""

    requests: int
    statuses: dict[str, int]  # by status_label
    codes: dict[str, int]  # error codes of the failed
    max_ms: float
    p99_ms: float


def by_kind(samples: list[Sample]) -> dict[str, KindTally]:
    table: dict[str, KindTally] = {}
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
            "p99_ms": nearest_rank(times, 99),
        }
    return table


def hit_share(samples: list[Sample]) -> float | None:
    reads = [s for s in samples if s.kind in READS and s.status == 200]
    if not reads:
        return None
    return sum(1 for s in reads if s.tag("xcache") == "HIT") / len(reads)


def first_after(
    samples: list[Sample], instant: float, predicate: Callable[[Sample], bool]
) -> float | None:
    """Seconds from `instant` to the first sample from then on that satisfies `predicate`."""
    for sample in samples:
        if sample.start >= instant - CLOCK_SLACK_S and predicate(sample):
            return max(sample.start - instant, 0.0)
    return None


def started_between(samples: list[Sample], lo: float, hi: float) -> list[Sample]:
    return [s for s in samples if lo <= s.start < hi]


def fmt_seconds(value: float | None) -> str:
    return "never" if value is None else fmt_s(value)


def fmt_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def fmt_ms_unit(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def fmt_mib(kib: float | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f}"


def summarize(samples: list[Sample], limit: int = 3) -> str:
    shown = ", ".join(
        f"{s.kind} {status_label(s)} {s.tag('code') or s.tag('error')} {s.ms:.0f} ms".strip()
        for s in samples[:limit]
    )
    more = f" (+{len(samples) - limit} more)" if len(samples) > limit else ""
    return shown + more


# ---- the driver's summary of the suites' request mix ----------------------------------
# The driver's scenario of the suites' mixed requests (reads by email and id, creates).
SCENARIO = "chaos"
LATENCY_KEYS = ("p50", "p95", "p99", "max")
# The counters by name, `<kind>_ms` a kind's latency by key, and `dropped`.
LoadTallies = dict[str, int | dict[str, float | None]]


def load_tallies(summary: Summary) -> LoadTallies:
    """The summary's counters (`<kind>_<class>`: count_2xx...), each kind's latency
    (`<kind>_ms`) and the iterations dropped; empty without a summary."""
    one = summary.scenario(SCENARIO)
    if not one:
        return {}
    by_name = one.get("by_name") or {}
    latency = {
        f"{kind}_ms": {key: (by_name[kind].get("latency") or {}).get(key) for key in LATENCY_KEYS}
        for kind in KINDS
        if kind in by_name
    }
    return {**summary.counters(SCENARIO), **latency, "dropped": int(one.get("dropped") or 0)}


def first_request(driver: DriverProcess, samples: Path, deadline_s: float) -> dict[str, Any]:
    """The first request line (not a drop) of a started driver's samples file, read as it
    is written; StackError when the driver exits first or writes none by `deadline_s`."""
    offset, read, deadline = 0, 0, time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if samples.exists():
            with samples.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            # Whole lines only: the driver may be half-way through the last one.
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            lines = complete.decode().splitlines()
            try:
                for _, one in sample_lines(lines, str(samples), first=read + 1):
                    if not one.get("dropped"):
                        return one
            except SamplesError as error:
                raise StackError(str(error)) from None
            read += len(lines)
        if not driver.running:
            code, log = driver.returncode, driver.log_path
            raise StackError(f"the load driver exited with {code}; see {log}")
        time.sleep(FIRST_REQUEST_POLL_S)  # the polling pace
    driver.stop()
    raise StackError(
        f"the load driver wrote no request to {samples.name} within {deadline_s:.0f} s; "
        f"see {driver.log_path}"
    )
