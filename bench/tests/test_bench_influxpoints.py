"""No InfluxDB point lost without a word: an InfluxDB that refuses (503) or
hangs (accepts, never answers) for 10 s in the middle of a step costs the
step no more than a few seconds; the points it did not take are spooled in
the run's folder, counted in the driver's summary, the step's line and the
report, and reach the real InfluxDB (the test stack's) once resent; the
shards' step points then merge exactly, and a shard left out is refused by
its index.

The fake InfluxDB is a proxy in front of the real one, on 127.0.0.1: outside
its window it forwards each write; it also answers the driver's /healthz."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from aside_bench.records.runfile import RunRecord
from aside_bench.report.sweep import influx_notes
from aside_bench.stack import influxpoints
from aside_bench.stack.config import Settings
from aside_bench.stack.influxpoints import InfluxPoints
from aside_bench.stack.sources import Influx, quote_literal
from aside_bench.sweep.progress import not_written
from report_samples import step_record

DURATION_S = 14
WINDOW_S = (2.0, 12.0)  # from the proxy's start: InfluxDB refuses or hangs in between
SHARDS = 2
# The driver's end may take CloseBudget (5 s) beyond its load, and it starts in about one.
SLACK_S = 8.0
# The shards' common start (START_AT), this far after they are launched.
START_LEAD_S = 2.0


@dataclass
class Proxy:
    mode: str  # "refuse", "hang" or "forward"
    target: str  # the real InfluxDB, scheme://host:port
    began: float = 0.0

    def failing(self) -> bool:
        since = time.monotonic() - self.began
        return self.mode != "forward" and WINDOW_S[0] <= since < WINDOW_S[1]


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _answer(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # the driver's load: /healthz
            self._answer(200, b'{"status":"ok"}')

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if proxy.failing() and proxy.mode == "hang":
                # Accept, never answer: hold the request until the window ends.
                time.sleep(max(WINDOW_S[1] - (time.monotonic() - proxy.began), 0))
                self.close_connection = True
                return
            if proxy.failing():
                self._answer(503, b'{"error":"refused"}')
                return
            sent = requests.post(f"{proxy.target}{self.path}", data=body, timeout=5)
            self._answer(sent.status_code, sent.content)

    return Handler


@pytest.fixture
def proxy_for(settings: Settings) -> Iterator[callable]:
    servers: list[ThreadingHTTPServer] = []

    def start(mode: str) -> tuple[Proxy, str]:
        proxy = Proxy(mode, settings.influx_base, time.monotonic())
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return proxy, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _drivers(settings: Settings, url: str, run_id: str, out: Path) -> list[float]:
    """The step's SHARDS drivers at once; each one's time from start to exit."""
    began = time.monotonic()
    start_at = str(round((time.time() + START_LEAD_S) * 1000))
    procs = []
    for shard in range(SHARDS):
        env = {
            "BASE_URL": url, "SCENARIO": "healthz", "RUN_ID": run_id, "ARM": "cache",
            "PHASE": "warm", "RATE": "40", "DURATION": f"{DURATION_S}s",
            "SHARDS": str(SHARDS), "SHARD": str(shard), "TIMEOUT_S": "2",
            "SUMMARY_PATH": str(out / f"summary-{shard}.json"),
            "INFLUX_URL": f"{url}/{settings.influx_db}", "START_AT": start_at,
        }  # fmt: skip
        procs.append(subprocess.Popen([str(settings.driver_bin)], env=env, stdout=subprocess.PIPE))
    took = []
    for proc in procs:
        proc.wait(timeout=DURATION_S + 60)
        assert proc.returncode == 0
        took.append(time.monotonic() - began)
    return took


def _count(influx: Influx, measurement: str, field: str, run_id: str) -> int:
    (series,) = influx.query(
        f'SELECT count("{field}") FROM "{measurement}" WHERE "run_id" = {quote_literal(run_id)}'
    )
    return int(series[0].values[0][1]) if series else 0


@pytest.mark.parametrize("mode", ["refuse", "hang"])
def test_influxdb_failing_mid_run_spools_and_the_points_arrive_later(
    mode: str, settings: Settings, proxy_for: callable, tmp_path: Path
) -> None:
    run_id = f"spool-{mode}-{int(time.time() * 1000)}"
    _, url = proxy_for(mode)
    took = _drivers(settings, url, run_id, tmp_path)
    assert max(took) <= START_LEAD_S + DURATION_S + SLACK_S, f"the drivers took {took}"

    summaries = [json.loads((tmp_path / f"summary-{s}.json").read_text()) for s in range(SHARDS)]
    points = [InfluxPoints.of(s["influx"]) for s in summaries]
    total = sum(points, InfluxPoints())
    assert total.spooled > 0 and total.lost == 0, points
    spool = tmp_path / influxpoints.SPOOL_DIR
    assert {Path(s["influx"]["spool"]).parent for s in summaries if s["influx"]["spooled"]} == {
        spool
    }

    # The report and the run's last lines say so.
    run = RunRecord(run_id, "run", "", {}, {}, {}, {})
    run.steps = [step_record(rate=40, influx=total.as_record())]
    assert influx_notes(run) == [
        f"cache warm @ 40/s: InfluxDB points: {total.spooled} spooled (the run's influx-spool/)"
    ]
    assert not_written(run, tmp_path) == total

    influx = Influx(settings.influx_base, settings.influx_db)
    before = _count(influx, "load_second", "count", run_id) + _count(
        influx, "load_step", "due", run_id
    )
    assert before == total.written
    resent = influxpoints.resend(influx, tmp_path)
    assert resent.points == total.spooled and not list(spool.glob("*.lp"))
    after = _count(influx, "load_second", "count", run_id)
    assert after + _count(influx, "load_step", "due", run_id) == total.written + total.spooled

    # Every shard's step point is there: the merge (the shards plug-in's) is
    # the step's, exactly.
    shards = pytest.importorskip("aside_bench_shards.merge")
    (step,) = shards.merge(shards.read_points(influx, run_id))
    assert step.shards == SHARDS and not step.missing
    # Given one START_AT, the shards began together.
    assert step.start_spread_ms is not None and not step.spread_too_wide, step.start_spread_ms
    for name in ("due", "dropped", "failed", "requests"):
        assert step.counts[name] == sum(s["scenarios"]["healthz"][name] for s in summaries)

    # A shard left out is refused by its index.
    influx.query(
        f'DROP SERIES FROM "load_step" WHERE "run_id" = {quote_literal(run_id)} AND "shard" = \'1\''
    )
    with pytest.raises(shards.ShardsError, match=r"1 of its 2 shards .* missing shard 1 "):
        shards.merge(shards.read_points(influx, run_id))


def test_the_benchs_own_point_is_spooled_within_its_budget(
    settings: Settings, proxy_for: callable, tmp_path: Path
) -> None:
    proxy, url = proxy_for("hang")
    proxy.began -= WINDOW_S[0]  # the window is open now
    spool = tmp_path / influxpoints.SPOOL_DIR / influxpoints.BENCH_SPOOL
    began = time.monotonic()
    kept = influxpoints.write_or_spool(Influx(url, settings.influx_db), ["m,a=b f=1 1"], spool)
    assert time.monotonic() - began <= influxpoints.BUDGET_S + 1
    assert kept == InfluxPoints(spooled=1) and spool.read_text() == "m,a=b f=1 1\n"
