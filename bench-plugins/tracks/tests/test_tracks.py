"""The `tracks` scenario: its plan (pure), its driver variables, and a
smoke run end to end against the stack (every arm at 5 and 10 req/s, 3 s each)
whose report must carry every figure."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aside_bench.load.run import step_run
from aside_bench.plan.scenarios import scenario_named
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import Step, build_steps
from aside_bench.stack import config
from aside_bench_tracks import plan as trackplan
from bench_helpers import REPO_ROOT, bench_env, guard_database

ARMS = trackplan.ARMS
SMOKE_TRACKS = 60
BENCH_TIMEOUT_S = 300
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def request_name(size: int) -> str:
    """The name the driver gives a read (its summary's by_name): its size class,
    so latency is read back per size."""
    return f"track {trackplan.size_class(size)}"


def test_size_classes_and_names():
    assert [trackplan.size_class(n) for n in (0, 16_383, 16_384, 65_536, 1_048_575, 10**7)] == [
        0, 0, 1, 2, 3, 4,
    ]  # fmt: skip
    assert request_name(70_000) == "track 2"
    assert trackplan.class_of_name("track 2") == 2
    assert trackplan.class_of_name("count") is None
    assert len(trackplan.SIZE_LABELS) == len(trackplan.SIZE_BOUNDS) + 1


def test_the_plan_runs_every_arm_and_warms_the_cache_arms():
    assert scenario_named("tracks").arms == ARMS
    steps = build_steps("tracks", [10, 50], list(ARMS), "both", 30)
    assert [(s.arm, s.phase) for s in steps if s.rate == 10] == [
        ("nocache", "none"),
        *((arm, phase) for arm in ARMS[1:] for phase in ("cold", "warm")),
    ]
    assert trackplan.query("nocache") == "cache=off"
    assert trackplan.query("cache-compressed") == "large=compress"


def test_a_tracks_step_tells_the_driver_its_query_and_size_classes():
    step = Step("tracks", "cache-compressed", "warm", 50, 30)
    run = step_run(step, "u", LoadShape(), 90, Path("data"))
    found = run.variables(config.load({"ASIDE_ROOT": str(REPO_ROOT)}))
    assert (found["SCENARIO"], found["ARM_QUERY"]) == ("tracks", "large=compress")
    assert found["SIZE_BOUNDS"] == ",".join(map(str, trackplan.SIZE_BOUNDS))


@pytest.fixture(scope="module")
def tracks_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    settings = config.load(bench_env())
    guard_database(settings)
    data_dir = tmp_path_factory.mktemp("tracks-data")
    reports_dir = tmp_path_factory.mktemp("reports")
    seeded = subprocess.run(
        [sys.executable, "-m", "aside_seed", "--rows", "20000", "--seed", "7", "--hot-emails", "20",
         "--tracks", str(SMOKE_TRACKS), "--reset", "--data-dir", str(data_dir)],
        env=bench_env(), capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    run_id = f"smoke-tracks-{time.strftime('%H%M%S')}"
    done = subprocess.run(
        [sys.executable, "-m", "aside_bench", "run", "--scenario", "tracks", "--run-id", run_id,
         "--rates", "5 10", "--duration", "3s", "--arms", " ".join(ARMS), "--warm", "warm",
         "--data-dir", str(data_dir), "--reports-dir", str(reports_dir), "--no-calibrate"],
        env=bench_env(), capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    return reports_dir / run_id, run_id, done.stdout


def _rows(markdown: str, title: str) -> list[list[str]]:
    block = markdown.split(f"### {title}", 1)[1].split("\n\n", 2)[1]
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def test_the_tracks_report_has_every_figure_for_every_step(tracks_run):
    folder, _run_id, _stdout = tracks_run
    markdown = (folder / "report.md").read_text()
    rows = _rows(markdown, "tracks: every step")
    series = {"nocache", *(f"{arm} (warm)" for arm in ARMS[1:])}
    assert {(row[0], row[1]) for row in rows} == {(s, r) for s in series for r in ("5", "10")}
    for row in rows:
        assert "n/a" not in row, row
        assert float(row[8]) > 0  # MB/s on the wire
        assert float(row[9]) > 0  # Redis MiB
        assert row[6] == "0.0%", row  # nothing dropped at these rates
        hit_rate = float(row[7].rstrip("%"))
        assert hit_rate == 0 if row[0] == "nocache" else hit_rate > 0, row
    sizes = _rows(markdown, "tracks: p95 by value size (the whole track's JSON)")
    assert len(sizes) == len(rows) and all(re.match(r"^[\d.]+$", row[2]) for row in sizes)
    assert (folder / "p95_by_size.png").read_bytes()[:8] == PNG_MAGIC
    assert "![p95 by value size](p95_by_size.png)" in markdown


def test_skip_serves_large_tracks_from_postgresql(tracks_run):
    """Under cache-skip a warm step still misses on every large track it asks
    for: its hit rate never exceeds the raw arm's, whose every track is cached.
    (A 3 s step at 5/s may draw no large track at all, so not strictly below.)"""
    folder, _run_id, _stdout = tracks_run
    rows = {(row[0], row[1]): row for row in _rows((folder / "report.md").read_text(),
                                                   "tracks: every step")}  # fmt: skip
    for rate in ("5", "10"):
        raw = float(rows[("cache (warm)", rate)][7].rstrip("%"))
        skip = float(rows[("cache-skip (warm)", rate)][7].rstrip("%"))
        assert raw > 95 and skip <= raw, (raw, skip)
