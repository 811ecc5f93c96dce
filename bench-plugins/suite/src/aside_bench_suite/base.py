"""What the suites share: an item's result, the run skeleton, the run record
(report.json, versioned) and the page's frame."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypedDict, TypeVar

import psycopg
import redis
import requests
from aside_bench.load.samples import SamplesError
from aside_bench.load.summary import SummaryError
from aside_bench.records.documents import Machine, SeedMeta
from aside_bench.report.doc import Doc
from aside_bench.report.tables import Table
from aside_bench.stack.config import Settings
from aside_bench.stack.machine import describe, summary
from aside_bench.stack.prepare import StackError, connect, flush_cache

from aside_bench_suite.samples import Check, CheckRecord

USERNAME_MAX = 64
# Room a username needs after its prefix: ".<vu>.<iteration>".
USERNAME_TAIL = 12

# What ends one item (recorded as its error) but not the run; an output of the
# driver this bench cannot read among them.
ITEM_ERRORS: tuple[type[Exception], ...] = (
    StackError,
    psycopg.Error,
    requests.RequestException,
    redis.RedisError,
    SamplesError,
    SummaryError,
)


class ItemRecord(TypedDict):
    """An item as report.json holds it (a suite's own figures beside these)."""

    name: str
    passed: bool
    error: str | None
    checks: list[CheckRecord]


@dataclass
class SuiteResult:
    """One item: its events (epoch instants), notes, checks or error; a subclass adds
    its figures (fields written after `notes`) and its items' descriptions."""

    name: str
    events: dict[str, float] = field(default_factory=dict)
    # What the item noted on its way (pids, warm-up shares, counters): report.json's only.
    notes: dict[str, object] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    error: str | None = None

    descriptions: ClassVar[dict[str, str]] = {}

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def as_dict(self) -> ItemRecord:
        base = {f.name for f in dataclasses.fields(SuiteResult)}
        # A subclass's own fields, named in report.json as in the class.
        own = [f.name for f in dataclasses.fields(self) if f.name not in base]
        return {  # type: ignore[typeddict-unknown-key]
            "name": self.name,
            "description": self.descriptions[self.name],
            "passed": self.passed,
            "error": self.error,
            "events": self.events,
            "notes": self.notes,
            **{name: getattr(self, name) for name in own},
            "checks": [c.as_dict() for c in self.checks],
        }


def parse_names(text: str | None, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The names in `text` (each once, in order), or every choice for none or "all"."""
    if not text or text.strip() == "all":
        return choices
    names = text.replace(",", " ").split()
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise ValueError(f"unknown {what}(s) {' '.join(unknown)}; choose from {' '.join(choices)}")
    return tuple(dict.fromkeys(names))


def sleep_until(instant: float) -> None:
    remaining = instant - time.time()
    if remaining > 0:
        time.sleep(remaining)


SUITE_SCHEMA = 1  # report.json's shape; a change of it raises this


class SuiteSchemaError(ValueError):
    """A report.json this bench cannot read: one line naming the file and why."""


# A suite's own parameters: each suite names its record (overload: OverloadRecord).
P = TypeVar("P", bound=Mapping[str, object])


@dataclass
class SuiteRun(Generic[P]):
    """A suite's run record, its report.json: what ran, when, where, on which seed,
    its parameters, limits, items (`ITEMS` names them), own entries and verdict. One
    without `schema` (written before it) reads as schema 1."""

    run_id: str
    kind: str
    seed: SeedMeta
    params: P
    limits: dict[str, float] | None = None  # the checks' limits, by name
    items: list[ItemRecord] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)  # the suite's own entries
    passed: bool | None = None
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    machine: Machine = field(default_factory=lambda: Machine(**describe()))
    schema: int = SUITE_SCHEMA

    ITEMS: ClassVar[dict[str, str]] = {
        "chaos": "cases",
        "hardening": "experiments",
        "overload": "arms",
        "create-rate": "steps",
        "soak": "processes",
    }
    HEADER: ClassVar[tuple[str, ...]] = ("run_id", "kind", "created", "machine", "seed", "params")

    def all_passed(self) -> bool:
        return bool(self.items) and all(item["passed"] for item in self.items)

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {
            "schema": self.schema,
            **{name: getattr(self, name) for name in self.HEADER},
        }
        if self.limits is not None:
            found["limits"] = self.limits
        found[self.ITEMS[self.kind]] = self.items
        found.update(self.extra)
        if self.passed is not None:
            found["passed"] = self.passed
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any], where: Path) -> SuiteRun[Any]:
        schema, kind = data.get("schema", SUITE_SCHEMA), data.get("kind")
        if schema != SUITE_SCHEMA or kind not in cls.ITEMS:
            raise SuiteSchemaError(
                f"{where}: a {kind} record of schema {schema}; this bench reads schema "
                f"{SUITE_SCHEMA} of {', '.join(cls.ITEMS)}"
            )
        items = cls.ITEMS[kind]
        known = {*cls.HEADER, "schema", "limits", "passed", items}
        return cls(
            **{name: data.get(name, {}) for name in cls.HEADER},
            limits=data.get("limits"),
            items=data.get(items, []),
            extra={k: v for k, v in data.items() if k not in known},
            passed=data.get("passed"),
            schema=schema,
        )


def load_suite_run(out_dir: Path) -> SuiteRun[Any]:
    path = out_dir / "report.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SuiteSchemaError(f"{path}: not readable ({error})") from None
    if not isinstance(data, dict):
        raise SuiteSchemaError(f"{path}: not a JSON object")
    return SuiteRun.from_json(data, path)


def save_report(
    doc: Doc, run: SuiteRun, out_dir: Path, tables: list[Table], also: Iterable[str] = ()
) -> list[Table]:
    """report.md and report.json in `out_dir`; the tables, `also` and the path printed."""
    (out_dir / "report.md").write_text(doc.markdown())
    (out_dir / "report.json").write_text(json.dumps(run.to_json(), indent=2, default=str) + "\n")
    print()
    for table in tables:
        print(table.markdown())
    for line in also:
        print(line)
    print(f"report: {out_dir}/report.md")
    return tables


def suite_page(title: str, run: SuiteRun) -> Doc:
    doc = Doc()
    doc.h(1, f"Aside {title} {run.run_id}")
    doc.p(f"Machine: {summary(run.machine)}.", note=True)
    return doc


def item_section(
    doc: Doc, title: str, item: ItemRecord, noun: str, tables: list[Table], notes: Iterable[str]
) -> None:
    """An item's heading, then its error, or its tables, notes and checks."""
    doc.h(2, title)
    if item["error"]:
        doc.p(f"The {noun} could not run to its end: {item['error']}", note=True)
        return
    for table in tables:
        doc.table(table)
    for note in notes:
        doc.p(note)
    doc.ul([f"{'PASS' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}" for c in item["checks"]])


def open_run(kind: str, run_id: str, out_dir: Path, what: str) -> None:
    out_dir.mkdir(parents=True)
    print(f"{kind} {run_id}: {what} -> {out_dir}/", flush=True)


class Item(Protocol):
    def as_dict(self) -> ItemRecord: ...


R = TypeVar("R", bound=Item)


def run_items(
    run: SuiteRun,
    names: Iterable[str],
    run_one: Callable[[str], R],
    failed: Callable[[str, str], R],
    descriptions: dict[str, str],
    one_line: Callable[[R], str] | None = None,
    go_on: Callable[[R], bool] = lambda _: True,
) -> list[R]:
    """Each item in turn, into `run.items`; an ITEM_ERRORS error is the item's (`failed`)
    and the next runs unless `go_on` says no. The run passes when every item did."""
    results: list[R] = []
    for name in names:
        print(" ".join(filter(None, (f"[{name}]", descriptions.get(name), "..."))), flush=True)
        try:
            result = run_one(name)
        except ITEM_ERRORS as error:
            result = failed(name, str(error))
        run.items.append(result.as_dict())
        results.append(result)
        if one_line is not None:
            print(f"[{name}] {one_line(result)}", flush=True)
        if not go_on(result):
            break
    run.passed = run.all_passed()
    return results


def increase(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each counter of `after` gained since `before`, those that moved only."""
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


def user_prefix(run_id: str, case: str) -> str:
    prefix = f"load.{run_id}.{case}"
    if len(prefix) + USERNAME_TAIL > USERNAME_MAX:
        room = USERNAME_MAX - USERNAME_TAIL - len(f"load..{case}")
        raise ValueError(
            f"--run-id {run_id!r} is too long for usernames (at most {room} characters)"
        )
    return prefix


def remove_users(settings: Settings, run_id: str) -> int | None:
    """Remove the users (and their idempotency keys) this run created."""
    pattern = f"load.{run_id}.".replace("_", r"\_") + "%"
    try:
        with connect(settings) as conn:
            removed = conn.execute("DELETE FROM users WHERE username LIKE %s", (pattern,)).rowcount
            conn.execute("DELETE FROM idempotency_keys WHERE key LIKE %s", (pattern,))
        flush_cache(settings)
        return removed
    except (StackError, psycopg.Error, redis.RedisError) as error:
        print(f"warning: could not remove the run's users: {error}", file=sys.stderr, flush=True)
        return None
