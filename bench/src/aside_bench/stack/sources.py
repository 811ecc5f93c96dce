"""Thin clients of InfluxDB 1.x and Prometheus; every call has a timeout."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypedDict

import requests

TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 5.0


class SourceError(RuntimeError):
    """A query failed; the message says which source and why."""


@dataclass(frozen=True)
class Series:
    name: str
    tags: dict[str, str]
    columns: list[str]
    values: list[list[Any]]

    def rows(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.values]


class PromSample(TypedDict):
    """One series of an instant vector: its labels and [time, value as text]."""

    metric: dict[str, str]
    value: tuple[float, str]


def quote_literal(value: str) -> str:
    """An InfluxQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Influx:
    def __init__(self, base_url: str, db: str, session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.db = db
        self.session = session or requests.Session()

    def write(self, lines: list[str], timeout_s: float = WRITE_TIMEOUT_S) -> None:
        """Points in line protocol, millisecond precision."""
        try:
            response = self.session.post(
                f"{self.base_url}/write",
                params={"db": self.db, "precision": "ms"},
                data="\n".join(lines).encode(),
                timeout=timeout_s,
            )
        except requests.RequestException as error:
            raise SourceError(f"InfluxDB write failed: {error}") from error
        if response.status_code != 204:
            detail = response.text[:200]
            raise SourceError(f"InfluxDB write answered {response.status_code}: {detail}")

    def query(self, influxql: str) -> list[list[Series]]:
        """Run one or more ';'-separated statements; one list of series per statement."""
        try:
            response = self.session.get(
                f"{self.base_url}/query",
                params={"db": self.db, "q": influxql, "epoch": "ms"},
                timeout=TIMEOUT_S,
            )
        except requests.RequestException as error:
            raise SourceError(f"InfluxDB query failed: {error}") from error
        if response.status_code != 200:
            raise SourceError(f"InfluxDB answered {response.status_code}: {response.text[:200]}")
        results = response.json().get("results", [])
        statements: list[list[Series]] = []
        for result in results:
            if "error" in result:
                raise SourceError(f"InfluxDB query error: {result['error']} in {influxql[:200]}")
            statements.append(
                [
                    Series(s["name"], s.get("tags") or {}, s["columns"], s["values"])
                    for s in result.get("series", [])
                ]
            )
        return statements


class Prometheus:
    def __init__(self, base_url: str, session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session or requests.Session()

    def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            response = self.session.get(f"{self.base_url}{path}", params=params, timeout=TIMEOUT_S)
        except requests.RequestException as error:
            raise SourceError(f"Prometheus query failed: {error}") from error
        is_json = response.headers.get("content-type", "").startswith("application/json")
        body = response.json() if is_json else {}
        if response.status_code != 200 or body.get("status") != "success":
            detail = body.get("error") or response.text[:200]
            raise SourceError(f"Prometheus answered {response.status_code}: {detail}")
        return body["data"]

    def instant(self, promql: str, at: float | None = None) -> list[PromSample]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", params)["result"]

    def scalar(self, promql: str, at: float | None = None) -> float | None:
        """The single value of an aggregated query, None when it has no series."""
        result = self.instant(promql, at)
        return float(result[0]["value"][1]) if result else None

    def wait_for_scrape_after(self, job: str, instant: float, deadline_s: float) -> float:
        """Poll until the job has been scraped after `instant`; return that scrape's time."""
        deadline = time.monotonic() + deadline_s
        while True:
            scraped = self.scalar(f'max(timestamp(up{{job="{job}"}}))')  # its latest scrape
            if scraped is not None and scraped > instant:
                return scraped
            if time.monotonic() > deadline:
                raise SourceError(
                    f"Prometheus has not scraped job {job!r} within {deadline_s:.0f}s; "
                    "is the gateway a target?"
                )
            time.sleep(0.25)
