"""The Grafana provisioning: its files are well formed, and every query of the
dashboard answers with data from the real InfluxDB and Prometheus after the
smoke bench (template variables and Grafana's macros replaced as Grafana would)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aside_bench import config
from aside_bench.sources import Influx, Prometheus

GRAFANA = Path(__file__).resolve().parents[2] / "infra" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "aside.json"
SCRAPE_INTERVAL_S = 2


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{p['title']} [{t['refId']}]", t) for p in _panels() for t in p["targets"]]


def test_datasources_are_provisioned_with_the_uids_the_dashboard_uses() -> None:
    provisioned = yaml.safe_load((GRAFANA / "provisioning/datasources/datasources.yml").read_text())
    by_uid = {d["uid"]: d for d in provisioned["datasources"]}
    assert by_uid["influxdb"]["type"] == "influxdb"
    assert by_uid["influxdb"]["url"] == "http://influxdb:8086"
    assert by_uid["influxdb"]["jsonData"]["dbName"] == "k6"
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
    for name, target in _targets():
        if target["datasource"]["uid"] == "influxdb":
            # Every k6 query is scoped to the chosen run and to the time range.
            assert "'$run_id'" in target["query"] and "$timeFilter" in target["query"], name
    titles = " ".join(p["title"].lower() for p in _panels())
    for subject in ("latency", "throughput", "dropped", "hit ratio", "quantiles", "cpu", "memory"):
        assert subject in titles


def _influx_query(text: str, run_id: str, start: float, end: float) -> str:
    time_filter = f"time >= {int(start * 1000)}ms and time <= {int(end * 1000)}ms"
    return (
        text.replace("$timeFilter", time_filter)
        .replace("$__interval_ms", "1000")
        .replace("$__interval", "1s")
        .replace("$run_id", run_id)
    )


def _prom_query(text: str) -> str:
    # Grafana: $__rate_interval = max($__interval + scrape, 4 x scrape).
    return text.replace("$__rate_interval", f"{4 * SCRAPE_INTERVAL_S}s").replace(
        "$__interval", f"{SCRAPE_INTERVAL_S}s"
    )


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def test_the_run_variable_lists_the_smoke_run(smoke_run, settings: config.Settings) -> None:
    (variable,) = _dashboard()["templating"]["list"]
    influx = Influx(settings.influx_base, settings.influx_db)
    (series,) = influx.query(variable["query"])
    values = {row[1] for s in series for row in s.values}
    assert {smoke_run.run_id, smoke_run.mixed_run_id} <= values


@pytest.mark.parametrize(("name", "target"), _targets(), ids=[n for n, _ in _targets()])
def test_every_panel_query_answers_with_data(
    name: str, target: dict[str, Any], smoke_run, settings: config.Settings
) -> None:
    start, end = smoke_run.started - 5, smoke_run.finished + 5
    if target["datasource"]["uid"] == "influxdb":
        influx = Influx(settings.influx_base, settings.influx_db)
        query = _influx_query(target["query"], smoke_run.run_id, start, end)
        assert "$" not in query, f"unreplaced variable in {query}"
        (series,) = influx.query(query)
        values = [v for s in series for row in s.values for v in row[1:]]
        assert any(_finite(v) for v in values), f"{name}: no data for {query}"
    else:
        prom = Prometheus(settings.prometheus_url)
        query = _prom_query(target["expr"])
        assert not re.search(r"\$\w", query), f"unreplaced variable in {query}"
        result = prom.range(query, start, end, SCRAPE_INTERVAL_S)
        values = [v for series in result for _, v in series["values"]]
        assert any(_finite(v) for v in values), f"{name}: no data for {query}"
