"""The Grafana provisioning: its files are well formed, and every query of the
dashboard answers with data. The InfluxDB panels read what the load driver
(`load_second`, a point a second per scenario, request name and shard) and the
bench (`bench_step`, a point per step) write: fixture points of both, written in
line protocol into a database of this test's own on the real InfluxDB, then
every panel's query with Grafana's macros replaced as Grafana would. The
Prometheus panels are asked of the real Prometheus after the smoke bench."""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import yaml

GRAFANA = Path(__file__).resolve().parents[2] / "infra" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "aside.json"
SCRAPE_INTERVAL_S = 2
TIMEOUT_S = 10
# What the dashboard may read from InfluxDB: the driver's and the bench's points.
MEASUREMENTS = {"load_second", "bench_step"}
# The driver's per-second fields and the bench's per-step ones.
LOAD_FIELDS = {"count", "errors", "drops", "p50", "p95", "p99", "target"}
STEP_FIELDS = {
    "target", "achieved", "p50", "p95", "p99", "max", "p95_from_due", "dropped", "drop_rate",
    "failed", "error_rate", "hit_rate", "l1_hit_rate", "gateway_cpu_ms", "gateway_rss_mb",
    "redis_rss_mb", "machine_busy", "host_steal", "driver_cpu_cores", "driver_cpu_ms",
}  # fmt: skip
XY_TITLE = "p95 and drop rate against target rate, cache off against on"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _targets(source: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{p['title']} [{t['refId']}]", t)
        for p in _panels()
        for t in p["targets"]
        if source is None or t["datasource"]["uid"] == source
    ]


def _panel(title: str) -> dict[str, Any]:
    (panel,) = [p for p in _panels() if p["title"] == title]
    return panel


# ---- the files ---------------------------------------------------------------------------
def test_datasources_are_provisioned_with_the_uids_the_dashboard_uses() -> None:
    provisioned = yaml.safe_load((GRAFANA / "provisioning/datasources/datasources.yml").read_text())
    by_uid = {d["uid"]: d for d in provisioned["datasources"]}
    assert by_uid["influxdb"]["type"] == "influxdb"
    assert by_uid["influxdb"]["url"] == "http://influxdb:8086"
    assert by_uid["influxdb"]["database"] == by_uid["influxdb"]["jsonData"]["dbName"] == "aside"
    assert by_uid["prometheus"]["type"] == "prometheus"
    assert by_uid["prometheus"]["url"] == "http://prometheus:9090"
    used = {t["datasource"]["uid"] for _, t in _targets()}
    used |= {v["datasource"]["uid"] for v in _dashboard()["templating"]["list"]}
    assert used == set(by_uid)


def test_the_dashboard_provider_reads_the_mounted_folder() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/dashboards.yml").read_text())
    (only,) = provider["providers"]
    assert only["type"] == "file"
    assert only["options"]["path"] == "/var/lib/grafana/dashboards"


def test_the_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "aside-bench"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        assert panel["targets"], panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
    (variable,) = dashboard["templating"]["list"]
    assert variable["name"] == "run_id" and variable["datasource"]["uid"] == "influxdb"
    assert '"load_second"' in variable["query"]
    for name, target in _targets("influxdb"):
        # Every InfluxDB query is scoped to the chosen run and to the time range.
        assert "'$run_id'" in target["query"] and "$timeFilter" in target["query"], name
    titles = " ".join(p["title"].lower() for p in _panels())
    for subject in ("latency", "throughput", "dropped", "hit ratio", "quantiles", "cpu", "memory"):
        assert subject in titles


def test_influx_panels_read_only_the_driver_and_bench_measurements() -> None:
    read: set[str] = set()
    for name, target in _targets("influxdb"):
        measurements = set(re.findall(r'\bFROM\s+"(\w+)"', target["query"]))
        assert measurements and measurements <= MEASUREMENTS, (name, measurements)
        # The fields: every quoted name between SELECT and FROM but the aliases.
        selected = re.sub(r'\bAS\s+"\w+"', "", target["query"].split(" FROM ", 1)[0])
        fields = set(re.findall(r'"(\w+)"', selected))
        known = LOAD_FIELDS if measurements == {"load_second"} else STEP_FIELDS
        assert fields and fields <= known, (name, fields - known)
        read |= measurements
    assert read == MEASUREMENTS
    text = DASHBOARD.read_text()
    # Nothing of the former load generator's measurements.
    for gone in ("http_req_duration", "http_reqs", "iterations", "vus", "data_received"):
        assert f'"{gone}"' not in text, gone


def test_step_table_shows_every_step_figure() -> None:
    (table,) = [p for p in _panels() if p["type"] == "table"]
    (target,) = table["targets"]
    assert '"bench_step"' in target["query"] and target["resultFormat"] == "table"
    assert set(re.findall(r'last\("(\w+)"\)', target["query"])) == STEP_FIELDS
    for tag in ("scenario", "arm", "phase", "rate", "repeat"):
        assert f'"{tag}"' in target["query"].split("GROUP BY", 1)[1]


def test_rate_panel_plots_p95_and_drops_against_the_target_one_series_per_arm() -> None:
    panel = _panel(XY_TITLE)
    assert panel["type"] == "xychart"
    (target,) = panel["targets"]
    query = target["query"]
    assert '"bench_step"' in query and '"target" AS "rate"' in query
    assert '"p95"' in query and '"drop_rate"' in query
    assert query.rstrip().endswith('GROUP BY "arm"')
    # The rows of each arm become a frame of their own, joined on the rate: x.
    steps = [t["id"] for t in panel["transformations"]]
    assert steps == ["partitionByValues", "joinByField"]
    assert panel["transformations"][0]["options"]["fields"] == ["arm"]
    assert panel["transformations"][1]["options"]["byField"] == "rate"
    assert panel["options"]["dims"]["x"] == "rate"


# ---- the InfluxDB panels against fixture points -----------------------------------------------
RUN = "dash-run-1"
# Another run's points, under an arm the first run lacks: no panel of RUN shows them.
OTHER_RUN, OTHER_ARM = "dash-run-2", "hybrid"
STEPS = (("nocache", "none"), ("cache", "cold"), ("cache", "warm"))
RATES = (30, 100)
STEP_S = 4
SHARDS = 2


@dataclass(frozen=True)
class InfluxFixture:
    base: str
    db: str
    start: float
    end: float

    def query(self, influxql: str) -> list[dict[str, Any]]:
        response = requests.get(
            f"{self.base}/query",
            params={"db": self.db, "q": influxql, "epoch": "ms"},
            timeout=TIMEOUT_S,
        )
        assert response.status_code == 200, response.text[:500]
        (result,) = response.json()["results"]
        assert "error" not in result, f"{result['error']} in {influxql}"
        return result.get("series", [])


def _line(measurement: str, tags: dict[str, str], fields: dict[str, float | int], ms: int) -> str:
    tag_text = ",".join(f"{k}={v}" for k, v in sorted(tags.items()))
    field_text = ",".join(
        f"{k}={v}i" if isinstance(v, int) else f"{k}={v}" for k, v in fields.items()
    )
    return f"{measurement},{tag_text} {field_text} {ms}"


def _fixture_lines(run_id: str, steps: tuple[tuple[str, str], ...], start_ms: int) -> list[str]:
    """A sweep as the driver and the bench write it: per second, scenario total
    (`all`) and request name, per shard; then the step's point."""
    lines: list[str] = []
    t = start_ms
    for arm, phase in steps:
        for rate in RATES:
            fast = arm != "nocache"
            tags = {"run_id": run_id, "scenario": "read", "arm": arm, "phase": phase,
                    "rate": str(rate), "repeat": "1"}  # fmt: skip
            for second in range(STEP_S):
                for shard in range(SHARDS):
                    for name in ("all", "count"):
                        fields = {
                            "count": rate // SHARDS, "errors": 0 if fast else 1,
                            "drops": second % 2, "p50": 0.8 if fast else 4.1,
                            "p95": 1.5 if fast else 9.7, "p99": 2.9 if fast else 15.2,
                            "target": float(rate),
                        }  # fmt: skip
                        point_tags = {**tags, "name": name, "shard": str(shard)}
                        lines.append(_line("load_second", point_tags, fields, t + second * 1000))
            step = {
                "target": float(rate), "achieved": rate * 0.99, "p50": 0.8 if fast else 4.1,
                "p95": 1.5 if fast else 9.7, "p99": 2.9 if fast else 15.2, "max": 20.5,
                "p95_from_due": 1.7 if fast else 11.0, "dropped": 2, "drop_rate": 0.004,
                "failed": 0 if fast else 4, "error_rate": 0.0 if fast else 0.01,
                "hit_rate": 0.95 if fast else 0.0, "l1_hit_rate": 0.0, "gateway_cpu_ms": 812.5,
                "gateway_rss_mb": 96.2, "redis_rss_mb": 3.1, "machine_busy": 0.62,
                "host_steal": 0.03, "driver_cpu_cores": 0.05,
                "driver_cpu_ms": 190.0,
            }  # fmt: skip
            lines.append(_line("bench_step", tags, step, t + STEP_S * 1000))
            t += (STEP_S + 1) * 1000
    return lines


def _influx_base(bench_environ: dict[str, str]) -> str:
    url = os.environ.get("INFLUXDB_URL") or bench_environ["INFLUXDB_URL"]
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="module")
def influx(bench_environ: dict[str, str]) -> Iterator[InfluxFixture]:
    """Fixture points in a database of this test's own, dropped afterwards: the
    bench's database and whatever runs beside this test are left alone."""
    base = _influx_base(bench_environ)
    db = f"aside_test_dashboard_{os.getpid()}"
    try:
        requests.get(f"{base}/ping", timeout=3).raise_for_status()
    except requests.RequestException as error:
        pytest.fail(f"no InfluxDB at {base} (INFLUXDB_URL; make test starts one): {error}")
    created = requests.post(
        f"{base}/query", data={"q": f'CREATE DATABASE "{db}"'}, timeout=TIMEOUT_S
    )
    created.raise_for_status()
    try:
        start_ms = (int(time.time()) - 600) * 1000
        lines = _fixture_lines(RUN, STEPS, start_ms)
        lines += _fixture_lines(OTHER_RUN, ((OTHER_ARM, "warm"),), start_ms)
        response = requests.post(
            f"{base}/write", params={"db": db, "precision": "ms"},
            data="\n".join(lines).encode(), timeout=TIMEOUT_S,
        )  # fmt: skip
        assert response.status_code == 204, response.text[:500]
        end_ms = start_ms + len(STEPS) * len(RATES) * (STEP_S + 1) * 1000
        yield InfluxFixture(base, db, start_ms / 1000 - 5, end_ms / 1000 + 5)
    finally:
        requests.post(f"{base}/query", data={"q": f'DROP DATABASE "{db}"'}, timeout=TIMEOUT_S)


def _influx_query(text: str, run_id: str, start: float, end: float) -> str:
    time_filter = f"time >= {int(start * 1000)}ms and time <= {int(end * 1000)}ms"
    return (
        text.replace("$timeFilter", time_filter)
        .replace("$__interval_ms", "1000")
        .replace("$__interval", "1s")
        .replace("$run_id", run_id)
    )


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def test_the_run_variable_lists_the_runs(influx: InfluxFixture) -> None:
    (variable,) = _dashboard()["templating"]["list"]
    (series,) = influx.query(variable["query"])
    assert {row[1] for row in series["values"]} == {RUN, OTHER_RUN}


@pytest.mark.parametrize(
    ("name", "target"), _targets("influxdb"), ids=[n for n, _ in _targets("influxdb")]
)
def test_every_influx_panel_query_answers_with_rows(
    name: str, target: dict[str, Any], influx: InfluxFixture
) -> None:
    query = _influx_query(target["query"], RUN, influx.start, influx.end)
    assert "$" not in query, f"unreplaced variable in {query}"
    series = influx.query(query)
    assert series, f"{name}: no rows for {query}"
    values = [v for s in series for row in s["values"] for v in row[1:]]
    assert any(_finite(v) for v in values), f"{name}: no data for {query}"
    # Scoped to the run: the other run's arm is nowhere.
    assert all(s.get("tags", {}).get("arm") != OTHER_ARM for s in series), name
    arms = {s["tags"]["arm"] for s in series if "arm" in s.get("tags", {})}
    assert arms == {"nocache", "cache"}, (name, arms)


def test_rate_panel_has_one_series_per_arm_at_every_rate(influx: InfluxFixture) -> None:
    (target,) = _panel(XY_TITLE)["targets"]
    series = influx.query(_influx_query(target["query"], RUN, influx.start, influx.end))
    by_arm = {
        s["tags"]["arm"]: [dict(zip(s["columns"], row, strict=True)) for row in s["values"]]
        for s in series
    }
    assert set(by_arm) == {"nocache", "cache"}
    for arm, rows in by_arm.items():
        # The cold steps are left out: one point per rate.
        assert sorted(row["rate"] for row in rows) == [float(r) for r in RATES], arm
        assert all(_finite(row["p95"]) and _finite(row["drop_rate"]) for row in rows), arm


def test_throughput_sums_the_shards(influx: InfluxFixture) -> None:
    panel = next(p for p in _panels() if "throughput" in p["title"].lower())
    query = _influx_query(panel["targets"][0]["query"], RUN, influx.start, influx.end)
    for series in influx.query(query):
        rate = int(series["tags"]["rate"])
        values = [row[1] for row in series["values"] if row[1] is not None]
        # Every shard's share together: the step's rate, not a shard's.
        assert values and all(v == rate // SHARDS * SHARDS for v in values), series


# ---- the Prometheus panels after the smoke bench ----------------------------------------------
def _prom_query(text: str) -> str:
    # Grafana: $__rate_interval = max($__interval + scrape, 4 x scrape).
    return text.replace("$__rate_interval", f"{4 * SCRAPE_INTERVAL_S}s").replace(
        "$__interval", f"{SCRAPE_INTERVAL_S}s"
    )


@pytest.mark.parametrize(
    ("name", "target"), _targets("prometheus"), ids=[n for n, _ in _targets("prometheus")]
)
def test_every_prometheus_panel_query_answers_with_data(
    name: str, target: dict[str, Any], smoke_run, bench_environ: dict[str, str]
) -> None:
    start, end = smoke_run.started - 5, smoke_run.finished + 5
    query = _prom_query(target["expr"])
    assert not re.search(r"\$\w", query), f"unreplaced variable in {query}"
    base = (os.environ.get("PROMETHEUS_URL") or bench_environ["PROMETHEUS_URL"]).rstrip("/")
    response = requests.get(
        f"{base}/api/v1/query_range",
        params={"query": query, "start": start, "end": end, "step": SCRAPE_INTERVAL_S},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 200, response.text[:500]
    result = response.json()["data"]["result"]
    values = [v for series in result for _, v in series["values"]]
    assert any(_finite(v) for v in values), f"{name}: no data for {query}"
