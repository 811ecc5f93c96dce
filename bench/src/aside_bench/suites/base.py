"""What the suites share: a named item's result and its record (chaos' cases,
hardening's experiments), the errors that end one item but not the run, the
parsing of the names given, the wait for an instant of the plan, the run
record's header and the first lines of every suite's page."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import psycopg
import redis
import requests

from aside_bench.report.doc import Doc
from aside_bench.stack.machine import describe, summary
from aside_bench.stack.prepare import StackError
from aside_bench.suites.samples import Check

# What ends one case or experiment (recorded as its error) but not the run.
ITEM_ERRORS: tuple[type[Exception], ...] = (
    StackError,
    psycopg.Error,
    requests.RequestException,
    redis.RedisError,
)


@dataclass
class SuiteResult:
    """One case or experiment: what happened (`events`, epoch instants), what was
    noted, its checks, or the error that kept it from its end. A subclass adds
    its own figures (`fields`) and names its items' descriptions."""

    name: str
    events: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    error: str | None = None

    descriptions: ClassVar[dict[str, str]] = {}

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def fields(self) -> dict[str, Any]:
        """The subclass's own entries of the record, between the notes and the checks."""
        return {}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.descriptions[self.name],
            "passed": self.passed,
            "error": self.error,
            "events": self.events,
            "notes": self.notes,
            **self.fields(),
            "checks": [c.as_dict() for c in self.checks],
        }


def parse_names(text: str | None, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The names in `text` (comma- or space-separated, each once, in order), or
    every choice for none or "all"; ValueError names the unknown ones."""
    if not text or text.strip() == "all":
        return choices
    names = text.replace(",", " ").split()
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise ValueError(f"unknown {what}(s) {' '.join(unknown)}; choose from {' '.join(choices)}")
    return tuple(dict.fromkeys(names))


def sleep_until(instant: float) -> None:
    """Wait for an epoch instant of the plan (a fault, an attack); at once if past."""
    remaining = instant - time.time()
    if remaining > 0:
        time.sleep(remaining)


def run_header(run_id: str, kind: str, seed_meta: dict[str, Any]) -> dict[str, Any]:
    """The first entries of a run record: what ran, when, where and on which seed."""
    return {
        "run_id": run_id,
        "kind": kind,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": describe(),
        "seed": seed_meta,
    }


def suite_page(title: str, run: dict[str, Any]) -> Doc:
    """A suite's page begun: its title ("Aside <title> <run id>") and the
    machine it ran on."""
    doc = Doc()
    doc.h(1, f"Aside {title} {run['run_id']}")
    doc.p(f"Machine: {summary(run['machine'])}.", note=True)
    return doc
