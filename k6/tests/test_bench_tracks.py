"""The `tracks` scenario: its plan (pure), its k6 script (k6 inspect), and a
smoke run end to end against the stack (every arm at 5 and 10 req/s, 3 s each)
whose report must carry every figure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aside_bench import config, trackplan
from aside_bench.k6run import LoadShape, k6_command, step_run
from aside_bench.plan import Step, build_steps, scenario_arms

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from conftest import _guard_database, bench_env  # noqa: E402

ARMS = trackplan.ARMS
SMOKE_TRACKS = 60
BENCH_TIMEOUT_S = 300
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def request_name(size: int) -> str:
    """k6's `name` tag of a read (scripts/tracks.js): its size class, so latency
    is read back per size."""
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
    assert scenario_arms("tracks") == ARMS
    steps = build_steps("tracks", [10, 50], list(ARMS), "both", 30)
    assert [(s.arm, s.phase) for s in steps if s.rate == 10] == [
        ("nocache", "none"),
        *((arm, phase) for arm in ARMS[1:] for phase in ("cold", "warm")),
    ]
    assert trackplan.query("nocache") == "cache=off"
    assert trackplan.query("cache-compressed") == "large=compress"


@pytest.fixture(scope="module")
def k6_bin() -> Path:
    path = config.load(bench_env()).k6_bin
    if not path.exists():
        pytest.fail(f"k6 not found at {path}; run `make install`")
    return path


def test_the_script_is_an_open_model_step(k6_bin: Path, tmp_path: Path):
    (tmp_path / "tracks.json").write_text(
        json.dumps({"tracks": [{"id": 1, "points": 3, "bytes": 70}]})
    )
    settings = config.load({"ASIDE_ROOT": str(REPO_ROOT)})
    step = Step("tracks", "cache-compressed", "warm", 50, 30)
    command = k6_command(settings, step_run(settings, step, "u", LoadShape(), (7, 90), tmp_path))
    assert "ARM_QUERY=large=compress" in command
    variables = [arg for i, arg in enumerate(command) if i and command[i - 1] == "-e"]
    done = subprocess.run(
        [str(k6_bin), "inspect", *(x for v in variables for x in ("-e", v)), command[-1]],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    options = json.loads(done.stdout)
    assert options["scenarios"]["tracks"]["executor"] == "constant-arrival-rate"
    assert options["discardResponseBodies"] is True


@pytest.fixture(scope="module")
def tracks_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    settings = config.load(bench_env())
    _guard_database(settings)
    data_dir = tmp_path_factory.mktemp("k6-tracks-data")
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
