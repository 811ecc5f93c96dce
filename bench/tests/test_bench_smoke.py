"""The smoke bench, end to end against the real stack: seed a small table, run
a short sweep (both arms, two rates) and a short mixed step, then check what
reached InfluxDB (a point per step, the driver's points per second), what the
report says and what it is made from."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import psycopg
import pytest
from aside_bench.plan.steps import parse_memory
from aside_bench.records.keytrace import read_key_trace
from aside_bench.records.steprecord import StepRecord
from aside_bench.stack import config, redisclient
from aside_bench.stack.sources import Influx, Prometheus, quote_literal
from aside_bench.sweep.collect import collect

SMOKE_ROWS = 20_000
STEP_TAGS = ("run_id", "arm", "rate", "phase", "scenario", "repeat")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SAMPLE_TRACE = Path(__file__).resolve().parents[1] / "traces" / "sample.trace"


def _influx(settings: config.Settings) -> Influx:
    return Influx(settings.influx_base, settings.influx_db)


def _expected_steps(smoke_run) -> dict[str, set[tuple[str, str, str, str]]]:
    sweep = {("read", arm, phase, rate) for rate in ("5", "10")
             for arm, phase in (("nocache", "none"), ("cache", "warm"))}  # fmt: skip
    return {smoke_run.run_id: sweep, smoke_run.mixed_run_id: {("mixed", "cache", "cold", "10")}}


def test_every_step_has_its_point_in_influxdb(smoke_run, settings: config.Settings) -> None:
    influx = _influx(settings)
    for run_id, expected in _expected_steps(smoke_run).items():
        run = quote_literal(run_id)
        (series,) = influx.query(
            'SELECT "p95", "target", "achieved", "drop_rate", "hit_rate", "driver_cpu_cores" '
            f'FROM "bench_step" WHERE "run_id" = {run} GROUP BY {", ".join(STEP_TAGS[1:])}'
        )
        found = {(s.tags["scenario"], s.tags["arm"], s.tags["phase"], s.tags["rate"])
                 for s in series}  # fmt: skip
        assert found == expected
        for one in series:
            (row,) = one.rows()
            assert row["target"] == float(one.tags["rate"]) and row["achieved"] > 0, row
            assert row["p95"] > 0 and 0 <= row["drop_rate"] < 0.2, row
            assert row["driver_cpu_cores"] > 0, row


def test_the_driver_writes_a_point_a_second_per_step(smoke_run, settings: config.Settings) -> None:
    influx = _influx(settings)
    window = (
        f"time >= {int(smoke_run.started * 1000)}ms AND time <= {int(smoke_run.finished * 1000)}ms"
    )
    run = quote_literal(smoke_run.run_id)
    (series,) = influx.query(
        f'SELECT sum("count"), count("count") FROM "load_second" WHERE "run_id" = {run} '
        f'AND "name" = \'all\' AND {window} GROUP BY "arm", "phase", "rate"'
    )
    found = {(s.tags["arm"], s.tags["phase"], s.tags["rate"]): s.rows()[0] for s in series}
    assert set(found) == {(a, p, r) for _, a, p, r in _expected_steps(smoke_run)[smoke_run.run_id]}
    for (_, _, rate), row in found.items():
        # A 3 s step: about three seconds of points, rate x 3 requests in all.
        assert 2 <= row["count"] <= 5, row
        assert row["sum"] == pytest.approx(int(rate) * 3, rel=0.25), row
    (orphans,) = influx.query(
        f'SELECT count("count") FROM "load_second" WHERE "run_id" = \'\' AND {window}'
    )
    assert orphans == []


def _table_cells(markdown: str) -> list[str]:
    cells = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not re.match(r"^\|[-:|]+\|$", line):
            cells += [cell.strip() for cell in line.strip("|").split("|")]
    return cells


def test_the_report_has_every_cell_and_every_chart(smoke_run) -> None:
    for run_id in (smoke_run.run_id, smoke_run.mixed_run_id):
        folder = smoke_run.reports_dir / run_id
        markdown = (folder / "report.md").read_text()
        cells = _table_cells(markdown)
        assert len(cells) > 20
        for cell in cells:
            assert cell and cell != "n/a" and "nan" not in cell.lower(), f"{run_id}: {cell!r}"
        for chart in ("latency", "throughput", "drop_rate", "hit_rate", "cost", "p95_served"):
            assert (folder / f"{chart}.png").read_bytes().startswith(PNG_MAGIC)
        html = (folder / "report.html").read_text()
        assert html.count("data:image/png;base64,") == 6
        assert "### cost per million requests" in markdown
        assert "the load driver shares the" in markdown and "the load driver shares the" in html
    printed = smoke_run.outputs[smoke_run.run_id].stdout
    assert "p95 latency and drop rate by target rate" in printed
    assert re.search(r"\[4/4\] read cache \(warm\)\s+@\s+10/s\s+p95 .* ETA", printed)


def test_hit_rates_come_from_the_gateways_counters(smoke_run, settings: config.Settings) -> None:
    prom = Prometheus(settings.prometheus_url)
    run = smoke_run.run_json(smoke_run.run_id)
    results = collect(prom, [StepRecord.from_json(step) for step in run["steps"]])
    assert len(results) == 4
    for result in results:
        assert result.cache is not None
        if result.step.arm == "cache":
            assert result.hit_rate > 0.5, result
        else:
            assert result.cache.hits == 0 and result.hit_rate == 0
            # The uncached reads were counted, as bypasses: the zero is measured.
            assert result.cache.bypass >= result.step.scheduled * 0.9
        assert result.latency is not None and result.latency.count > 0
        assert result.drop_rate < 0.2


def test_run_json_records_the_steps_and_the_machine(smoke_run) -> None:
    run = smoke_run.run_json(smoke_run.run_id)
    assert run["machine"]["nproc"] >= 1 and "the load driver shares the" in run["machine"]["note"]
    assert run["params"]["rates"] == [5, 10] and run["interrupted"] is False
    for step in run["steps"]:
        assert step["completed"] is True
        assert step["prom_start"] <= step["start"] < step["end"] <= step["prom_end"]
    warm = [s for s in run["steps"] if s["phase"] == "warm"]
    assert all(s["warm"]["hit_share_after"] == 1.0 for s in warm)


def test_the_mixed_step_leaves_the_table_as_seeded(smoke_run, settings: config.Settings) -> None:
    with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
        rows = conn.execute("SELECT count(*) FROM users").fetchone()[0]
        leftovers = conn.execute(
            "SELECT count(*) FROM users WHERE username LIKE 'load.%'"
        ).fetchone()
    assert rows == SMOKE_ROWS and leftovers[0] == 0
    markdown = (smoke_run.reports_dir / smoke_run.mixed_run_id / "report.md").read_text()
    assert "create p95 ms" in markdown and "delete p95 ms" in markdown


def test_a_mixed_steps_figures_are_the_loads_apart_from_its_checker(
    smoke_run, bench: Callable[..., CompletedProcess[str]]
) -> None:
    # The load's figures (not the checker's), each kind's and the checker's counts,
    # from the driver's summary.
    run_id = f"{smoke_run.mixed_run_id}-summary"
    done = bench(
        "run", "--run-id", run_id, "--scenario", "mixed", "--rates", "10", "--arms", "hybrid",
        "--warm", "warm", "--write-share", "0.5", "--stale-per-min", "60",
        "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir),
        "--duration", "3s", "--cold-sample", "50", "--no-calibrate",
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    (step,) = smoke_run.run_json(run_id)["steps"]
    summary = step["summary"]
    assert summary["iterations"] >= 25 and summary["dropped"] == 0
    assert summary["requests"] > summary["iterations"]  # a writing iteration sends two
    assert set(summary["by_name"]) == {"count", "create", "delete"}
    kinds = sum(kind["requests"] for kind in summary["by_name"].values())
    assert kinds == summary["requests"]  # the checker's own requests are not the load's
    assert summary["stale"]["reads"] > 0 and summary["stale"]["stale"] == 0
    # The writes' invalidations, timed at a subscriber of the bench's own beside the workers.
    floor = step["probe"]["floor"]
    assert floor["count"] > 0, floor
    assert 0 <= floor["p50_ms"] <= floor["p99_ms"] <= floor["max_ms"] < 5000
    markdown = (smoke_run.reports_dir / run_id / "report.md").read_text()
    assert "create p95 ms" in markdown and "checked reads" in markdown
    assert "floor p99 ms" in markdown


def test_the_report_rebuilds_from_run_json_and_prometheus(
    smoke_run, bench: Callable[..., CompletedProcess[str]]
) -> None:
    folder = smoke_run.reports_dir / smoke_run.run_id
    before = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    (folder / "latency.png").unlink()
    done = bench("report", "--run", smoke_run.run_id, "--reports-dir", str(smoke_run.reports_dir))
    assert done.returncode == 0, done.stderr
    assert (folder / "report.md").read_text() == before
    assert (folder / "latency.png").read_bytes().startswith(PNG_MAGIC)


def _driver_child(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def test_ctrl_c_stops_the_driver_keeps_what_it_measured_and_exits_130(
    smoke_run, settings: config.Settings, bench_environ: dict[str, str]
) -> None:
    run_id = f"{smoke_run.run_id}-int"
    process = subprocess.Popen(
        [sys.executable, "-m", "aside_bench", "run", "--run-id", run_id, "--rates", "5",
         "--arms", "nocache", "--duration", "60s", "--no-calibrate",
         "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir)],
        env=bench_environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while (driver := _driver_child(process.pid)) is None:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the driver never started"
            time.sleep(0.1)
        # Let the driver send a second of requests, then press Ctrl-C.
        influx = _influx(settings)
        query = f'SELECT sum("count") FROM "load_second" WHERE "run_id" = {quote_literal(run_id)}'
        while not influx.query(query)[0]:
            assert time.monotonic() < deadline, "no sample reached InfluxDB"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not Path(f"/proc/{driver}").exists()
    run = smoke_run.run_json(run_id)
    assert run["interrupted"] is True
    (step,) = run["steps"]
    assert step["interrupted"] is True and step["completed"] is False
    assert step["end"] - step["start"] < 40
    assert (smoke_run.reports_dir / run_id / "report.md").exists()


def test_the_steps_histograms_in_influxdb_give_the_summarys_percentiles(
    smoke_run, settings: config.Settings, bench: Callable[..., CompletedProcess[str]]
) -> None:
    # One driver a step here; with the chart's Indexed Job several, merged the same way.
    shards = pytest.importorskip("aside_bench_shards.merge")

    merged = shards.merge(shards.read_points(_influx(settings), smoke_run.run_id))
    steps = {(s["arm"], s["phase"], str(s["rate"])): s for s in smoke_run.run_json(
        smoke_run.run_id)["steps"]}  # fmt: skip
    assert {m.key[1:4] for m in merged} == set(steps)
    for one in merged:
        summary = steps[one.key[1:4]]["summary"]
        assert one.shards == 1 and one.counts["requests"] == summary["requests"]
        assert one.p95 == pytest.approx(summary["p95"], rel=0.01), one
    done = bench("shards", "--run", smoke_run.run_id)
    assert done.returncode == 0 and "its shards merged" in done.stdout, done.stderr


def test_zipf_reads_over_the_key_space_miss_a_flushed_cache_then_hit(
    smoke_run, bench: Callable[..., CompletedProcess[str]]
) -> None:
    keys = (smoke_run.data_dir / "emails.txt").read_text().splitlines()
    assert len(keys) > 1000  # the seeder wrote every distinct email of the table
    run_id = f"{smoke_run.run_id}-zipf"
    done = bench(
        "run", "--run-id", run_id, "--rates", "20", "--arms", "cache", "--warm", "cold",
        "--duration", "3s", "--dist", "zipf", "--alpha", "1.1", "--no-calibrate",
        "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = smoke_run.run_json(run_id)
    assert (run["params"]["dist"], run["params"]["alpha"]) == ("zipf", 1.1)
    assert "DIST=zipf" in (smoke_run.reports_dir / run_id / "load.log").read_text()
    (figures,) = json.loads((smoke_run.reports_dir / run_id / "results.json").read_text())
    # A flushed cache: each key's first read misses, a popular key's next reads hit.
    assert 0 < figures["hit"] < 1, figures
    report = (smoke_run.reports_dir / run_id / "report.md").read_text()
    assert "Zipf popularity, exponent 1.1 over every distinct email" in report
    # The step kept its keys: one line per request it sent, in its own folder.
    (step,) = run["steps"]
    assert step["key_trace"] == "step-001-cache-cold-20/keys.trace.gz", step
    sent = read_key_trace(smoke_run.reports_dir / run_id / step["key_trace"])
    assert len(sent) == step["key_trace_lines"] == step["summary"]["requests"] > 0
    assert step["key_trace_lost"] == 0 and set(sent) <= set(keys)


def test_a_trace_step_asks_for_the_traces_first_keys_in_order(
    smoke_run, bench: Callable[..., CompletedProcess[str]]
) -> None:
    run_id = f"{smoke_run.run_id}-trace"
    done = bench(
        "run", "--run-id", run_id, "--rates", "20", "--arms", "cache", "--warm", "cold",
        "--duration", "3s", "--trace", str(SAMPLE_TRACE), "--no-calibrate",
        "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = smoke_run.run_json(run_id)
    assert run["params"]["trace"]["file"] == "sample.trace"
    (step,) = run["steps"]
    summary = step["summary"]
    # The sample is timed at 200/s: scaled to the step's 20/s, its first 60 lines.
    assert summary["dropped"] == 0 and summary["iterations"] == 60, summary
    sent = read_key_trace(smoke_run.reports_dir / run_id / step["key_trace"])
    assert sent == read_key_trace(SAMPLE_TRACE)[:60]
    assert "TRACE_SPEED=0.1 " in (smoke_run.reports_dir / run_id / "load.log").read_text()
    report = (smoke_run.reports_dir / run_id / "report.md").read_text()
    assert "request mix: trace sample.trace (3000 keys" in report


def test_a_cache_smaller_than_the_keys_asked_for_evicts_and_misses(
    smoke_run, settings: config.Settings, bench: Callable[..., CompletedProcess[str]]
) -> None:
    """A memory arm: Redis bounded a little above what it uses empty (its
    clients' buffers count too), Zipf reads of more keys than that holds."""
    # The same load unbounded first, so the gateway's Redis connections (whose
    # buffers count in used_memory) are open before the empty Redis is measured.
    opened = bench(
        "run", "--run-id", f"{smoke_run.run_id}-connections", "--rates", "50", "--arms", "cache",
        "--warm", "cold", "--duration", "3s", "--dist", "zipf", "--no-calibrate",
        "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir),
    )  # fmt: skip
    assert opened.returncode == 0, opened.stderr
    client = redisclient.connect(settings)
    try:
        redisclient.flush(client)
        empty = int(client.info("memory")["used_memory"])
        stack_bound = client.config_get("maxmemory")["maxmemory"]
    finally:
        client.close()
    bound = f"{(empty + 80 * 1024) // 1024}kb"
    run_id = f"{smoke_run.run_id}-memory"
    done = bench(
        "run", "--run-id", run_id, "--rates", "50", "--arms", "cache", "--duration", "6s",
        "--dist", "zipf", "--alpha", "0.9", "--cache-memory", bound, "--no-calibrate",
        "--data-dir", str(smoke_run.data_dir), "--reports-dir", str(smoke_run.reports_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = smoke_run.run_json(run_id)
    cold, warm = run["steps"]
    assert (cold["arm"], cold["phase"], warm["phase"]) == (f"cache@{bound}", "cold", "warm")
    assert cold["cache_memory"] == {"maxmemory": parse_memory(bound), "policy": "allkeys-lru"}
    # The warm step goes on with the cold step's stream over the cache it left.
    assert (
        warm["skip"] == 50 * 6
        and "SKIP=300" in (smoke_run.reports_dir / run_id / "load.log").read_text()
    )
    evicted = warm["redis"]["end"]["evicted_keys"] - warm["redis"]["start"]["evicted_keys"]
    assert evicted > 0, warm["redis"]
    figures = json.loads((smoke_run.reports_dir / run_id / "results.json").read_text())
    # Below 100 %; how far below depends on how much of the bound the clients took.
    assert figures[-1]["hit"] < 1, figures[-1]
    # The warm step's measured hit rate beside the simulated policies at the keys held.
    report = (smoke_run.reports_dir / run_id / "report.md").read_text()
    assert "### Redis hit rate against the simulated policies at the keys it held, 50/s" in report
    assert (smoke_run.reports_dir / run_id / "hit_rate_curve_50.png").read_bytes()[:8] == PNG_MAGIC
    assert "## The answer" in report and "of Redis held" in report
    # The stack's own bound is back after the run.
    client = redisclient.connect(settings)
    try:
        assert client.config_get("maxmemory")["maxmemory"] == stack_bound
    finally:
        client.close()
