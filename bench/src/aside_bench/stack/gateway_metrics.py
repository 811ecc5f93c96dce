"""The gateway's own counters from its /metrics, summed over its workers, dead ones too."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import requests
from prometheus_client.parser import text_string_to_metric_families

from aside_bench.stack.config import Settings
from aside_bench.stack.prepare import StackError

HTTP_TIMEOUT_S = 10.0
# How long a reading of the connection bound waits for workers still starting.
BOUND_WAIT_S = 15.0
BOUND_POLL_S = 0.2
CONNECTIONS_MAX = "aside_gateway_connections_max"
METRICS_ROUTE = "/metrics"  # its scrapes are not load: left out of a step's requests

RequestKey = tuple[str, str, str]  # (route, method, status)
K = TypeVar("K")


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a Prometheus text exposition."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, dict(sample.labels), float(sample.value)


def labelled_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every labelled sample named `name`."""
    return [(labels, value) for found, labels, value in _samples(text) if found == name and labels]


def unlabelled_value(text: str, name: str) -> float | None:
    """The one unlabelled sample named `name`, or None."""
    unlabelled = (v for found, labels, v in _samples(text) if found == name and not labels)
    return next(unlabelled, None)


def values_named_like(text: str, part: str) -> list[float]:
    """Every sample whose name holds `part` (one a worker or a route), no `_created` one."""
    return [v for n, _, v in _samples(text) if part in n and not n.endswith("_created")]


def scrape(settings: Settings) -> str:
    response = requests.get(f"{settings.gateway_url}/metrics", timeout=HTTP_TIMEOUT_S)
    if response.status_code != 200:
        raise StackError(
            f"{settings.gateway_url}/metrics answered {response.status_code}: the suite "
            "reads the gateway's counters there (lab profile)"
        )
    return response.text


def connections_per_worker(text: str) -> int | None:
    """The connections a worker holds before a 503; None when not said or a worker starts."""
    value = unlabelled_value(text, CONNECTIONS_MAX)
    return None if value is None or value < 1 else int(value)


def connection_bound(settings: Settings, within_s: float = BOUND_WAIT_S) -> int | None:
    """connections_per_worker, read again while a worker is still starting, up to `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        text = scrape(settings)
        found = connections_per_worker(text)
        starting = found is None and unlabelled_value(text, CONNECTIONS_MAX) is not None
        if not starting or time.monotonic() >= deadline:
            return found
        time.sleep(BOUND_POLL_S)


def summed_by(text: str, name: str, key: Callable[[dict[str, str]], K]) -> dict[K, float]:
    """The samples named `name`, summed by `key(labels)` (worker and other labels folded)."""
    sums: dict[K, float] = {}
    for labels, value in labelled_samples(text, name):
        k = key(labels)
        sums[k] = sums.get(k, 0.0) + value
    return sums


def summed_by_label(text: str, name: str, label: str) -> dict[str, float]:
    """The samples named `name`, summed by one label's value ("" where absent)."""
    return summed_by(text, name, lambda labels: labels.get(label, ""))


def request_counts(text: str) -> dict[RequestKey, float]:
    """aside_gateway_http_requests_total by (route, method, status)."""

    def key(labels: dict[str, str]) -> RequestKey:
        return labels.get("route", ""), labels.get("method", ""), labels.get("status", "")

    return summed_by(text, "aside_gateway_http_requests_total", key)


def cache_error_counts(text: str) -> dict[str, float]:
    """aside_gateway_cache_errors_total by op (get, lease, store, breaker_open)."""
    return summed_by_label(text, "aside_gateway_cache_errors_total", "op")


def tier_read_counts(text: str) -> dict[str, float]:
    """aside_gateway_cache_tier_reads_total by "<tier> <outcome>" ("l1 hit"), all routes."""
    return summed_by(
        text,
        "aside_gateway_cache_tier_reads_total",
        lambda labels: f"{labels.get('tier', '')} {labels.get('outcome', '')}",
    )


def served_requests(text: str) -> float:
    """Requests the gateway answered, every route but /metrics."""
    return sum(v for (route, _, _), v in request_counts(text).items() if route != METRICS_ROUTE)


def step_counters(text: str) -> dict[str, object]:
    """What a step's probe keeps of one /metrics reading (records/tierstats.py reads it)."""
    return {
        "requests": served_requests(text),
        "tier_reads": tier_read_counts(text),
        "lag_buckets": summed_by_label(
            text, "aside_gateway_l1_invalidation_lag_seconds_bucket", "le"
        ),
        "l1_entries": unlabelled_value(text, "aside_gateway_l1_entries"),
        "l1_bytes": unlabelled_value(text, "aside_gateway_l1_bytes"),
    }
