"""Trustworthy figures, end to end against the real stack: a calibration with
tiny bounds, a two-step sweep run twice over (REPEAT=2) with every request
kept in a file, a one-step uncalibrated run with the driver's live line, and
`compare` between the two: refusing a run nothing measured the machine of
unless told, and a machine measured twice as fast unless normalised."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aside_bench.cli import app as cli

Bench = Callable[..., subprocess.CompletedProcess[str]]
RATE = 5
# One 1 s probe per server: the bounds are the test's, the search is unit-tested.
TINY_CALIBRATION = [
    "--calibration-probe", "1s", "--calibration-start", "20",
    "--calibration-max-rate", "20", "--calibration-budget", "10",
]  # fmt: skip


@dataclass(frozen=True)
class TrustRuns:
    a: str
    b: str
    reports_dir: Path
    b_stdout: str
    b_stderr: str  # where the driver's live line goes

    def run_json(self, run_id: str) -> dict:
        return json.loads((self.reports_dir / run_id / "run.json").read_text())


@pytest.fixture(scope="module")
def trust_runs(
    small_seed: Path, tmp_path_factory: pytest.TempPathFactory, bench: Bench
) -> TrustRuns:
    reports_dir = tmp_path_factory.mktemp("trust-reports")
    stamp = time.strftime("%H%M%S")
    a, b = f"trust-a-{stamp}", f"trust-b-{stamp}"
    common = ["--rates", str(RATE), "--warm", "warm", "--duration", "2s", "--cold-sample", "50"]
    common += ["--data-dir", str(small_seed), "--reports-dir", str(reports_dir)]
    done = bench("run", "--run-id", a, "--arms", "nocache cache", "--repeat", "2",
                 "--samples-file", *TINY_CALIBRATION, *common)  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    live = bench("run", "--run-id", b, "--arms", "cache", "--live", "--no-calibrate", *common)
    assert live.returncode == 0, f"{live.stderr[-3000:]}\n{live.stdout[-3000:]}"
    return TrustRuns(a, b, reports_dir, live.stdout, live.stderr)


def test_the_calibration_is_measured_kept_and_reported(trust_runs: TrustRuns) -> None:
    run = trust_runs.run_json(trust_runs.a)
    targets = run["machine"]["calibration"]["targets"]
    assert set(targets) == {"core", "gateway"}
    for found in targets.values():
        # One probe at the only rate allowed, held: stated as a lower bound.
        assert (found["rate"], found["capped"]) == (20, True), found
        (probe,) = found["probes"]
        assert probe["completed"] and probe["held"] and probe["driver"]["cpu_s"] > 0
    markdown = (trust_runs.reports_dir / trust_runs.a / "report.md").read_text()
    html = (trust_runs.reports_dir / trust_runs.a / "report.html").read_text()
    assert "measurement ceiling): >= 20 req/s" in markdown
    assert "<h2>Calibration</h2>" in html and "measurement ceiling): &gt;= 20 req/s" in html
    assert "| / machine calibration | / gateway /healthz calibration |" in markdown


def test_repeats_run_interleaved_and_report_a_spread(trust_runs: TrustRuns) -> None:
    run = trust_runs.run_json(trust_runs.a)
    assert [(s["arm"], s["repeat"]) for s in run["steps"]] == [
        ("nocache", 1), ("cache", 1), ("nocache", 2), ("cache", 2),
    ]  # fmt: skip
    # Each step's figures are its own summary's; with --samples-file every request
    # of it is a line of its own file too, as many as the summary counted.
    counts = {(s["arm"], s["repeat"]): s["summary"]["requests"] for s in run["steps"]}
    assert set(counts) == {(arm, r) for arm in ("nocache", "cache") for r in (1, 2)}
    assert all(count >= RATE * 2 for count in counts.values()), counts
    for step in run["steps"]:
        lines = (trust_runs.reports_dir / trust_runs.a / step["samples"]).read_text().splitlines()
        sent = [json.loads(line) for line in lines if '"dropped"' not in line]
        assert len(sent) == step["summary"]["requests"], step["samples"]
        assert all(one["status"] == 200 and one["ms"] > 0 for one in sent)
    figures = json.loads((trust_runs.reports_dir / trust_runs.a / "results.json").read_text())
    assert sorted((f["arm"], f["repeat"]) for f in figures) == sorted(
        (s["arm"], s["repeat"]) for s in run["steps"]
    )
    markdown = (trust_runs.reports_dir / trust_runs.a / "report.md").read_text()
    assert "each step ran 2 times, interleaved" in markdown
    # Two runs' percentiles never all agree to the hundredth of a ms on a shared machine.
    assert " (" in markdown.split("### cache (warm)")[1].splitlines()[4]


def test_an_uncalibrated_run_says_so(trust_runs: TrustRuns) -> None:
    assert trust_runs.run_json(trust_runs.b)["machine"].get("calibration") is None
    assert "calibration: skipped" in trust_runs.b_stdout
    markdown = (trust_runs.reports_dir / trust_runs.b / "report.md").read_text()
    assert "Not calibrated (CALIBRATE=0)" in markdown


def test_every_step_records_the_drivers_cpu_and_pool(trust_runs: TrustRuns) -> None:
    for run_id in (trust_runs.a, trust_runs.b):
        run = trust_runs.run_json(run_id)
        for step in run["steps"]:
            assert 0 < step["driver"]["cpu_s"] < 10, step["driver"]
            limit = run["params"]["driver_cpu_limit_cores"]
            assert step["driver"]["cpu_limit_cores"] == limit > 0
            assert step["summary"]["pool"] == step["pool"] >= step["summary"]["inflight_peak"]
        markdown = (trust_runs.reports_dir / run_id / "report.md").read_text()
        headers = "| p95 from due ms | driver CPU cores | in flight/pool | load generator |"
        assert headers in markdown
        assert "Load generator saturated" not in markdown  # 5 requests/s


def test_the_live_line_showed_the_running_step(trust_runs: TrustRuns) -> None:
    # A line a second from the driver while the step ran: its rate, p95, drops, errors.
    lines = re.findall(r"read cache warm @ 5/s\s+t=\d+s.*", trust_runs.b_stderr)
    assert lines, trust_runs.b_stderr[-2000:]
    assert all(re.search(r"p95 [\d.]+ ms\s+drops \d+\s+errors \d+", line) for line in lines)


def _compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`aside-bench compare` in this process (it reads files only): code, stdout, stderr."""
    code = cli.main(["compare", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _copy_run(trust_runs: TrustRuns, source: str, copy: str, factor: float | None) -> None:
    """A copy of run `source` named `copy`, the driver's CPU of every step
    multiplied by `factor` (None: left out, as in runs from before it was kept)."""
    shutil.copytree(trust_runs.reports_dir / source, trust_runs.reports_dir / copy)
    run_path = trust_runs.reports_dir / copy / "run.json"
    run_path.write_text(json.dumps({**json.loads(run_path.read_text()), "run_id": copy}))
    figures_path = trust_runs.reports_dir / copy / "results.json"
    figures = json.loads(figures_path.read_text())
    for one in figures:
        cores = one.get("driver_cpu_cores")
        one["driver_cpu_cores"] = None if factor is None or cores is None else cores * factor
    figures_path.write_text(json.dumps(figures))


def test_compare_flags_against_the_runs_spread(
    trust_runs: TrustRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--reports-dir", str(trust_runs.reports_dir)]
    code, stdout, stderr = _compare(
        capsys, trust_runs.a, trust_runs.b, "--ignore-calibration", *where
    )
    assert code == 0, stderr
    folder = trust_runs.reports_dir / f"compare-{trust_runs.a}-{trust_runs.b}"
    markdown = (folder / "compare.md").read_text()
    assert markdown in stdout
    assert "B's speed" in markdown and "the driver's CPU per request" in markdown
    assert f"| read | cache (warm) | {RATE} |" in markdown
    assert "nocache" not in markdown.split("|---")[1]  # B ran no nocache step
    assert "exceeds the widest spread (max - min)" in markdown
    (step,) = json.loads((folder / "compare.json").read_text())["steps"]
    assert step["changes"]["p95"]["basis"] == "spread" and step["speed"] > 0
    # Nothing measured the machine of a run without the driver's CPU per step and
    # without a calibration: refused unless told.
    bare = f"{trust_runs.b}-bare"
    _copy_run(trust_runs, trust_runs.b, bare, None)
    code, _, stderr = _compare(capsys, trust_runs.a, bare, *where)
    assert code == 2
    assert f"run {bare} has neither the driver's CPU per step nor a machine calibration" in stderr
    code, _, stderr = _compare(capsys, trust_runs.a, bare, "--ignore-calibration", *where)
    assert code == 0, stderr
    # A baseline of both runs against B: the step B ran pools A's two repeats and B's one.
    code, stdout, stderr = _compare(
        capsys, f"{trust_runs.a},{trust_runs.b}", trust_runs.b, "--ignore-calibration", *where
    )
    assert code == 0, stderr
    assert f"A: a baseline of 2 runs, {trust_runs.a}, {trust_runs.b}" in stdout
    pooled = trust_runs.reports_dir / f"compare-{trust_runs.a}+{trust_runs.b}-{trust_runs.b}"
    (step,) = json.loads((pooled / "compare.json").read_text())["steps"]
    assert step["changes"]["p95"]["a"]["runs"] == 3


def test_compare_refuses_a_side_that_names_no_run(
    trust_runs: TrustRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--reports-dir", str(trust_runs.reports_dir)]
    code, stdout, stderr = _compare(capsys, " , ", trust_runs.b, *where)
    assert (code, stdout) == (2, "")
    assert stderr.strip().splitlines() == ["aside-bench: compare: a side names no run"]


def test_compare_refuses_a_machine_measured_twice_as_fast(
    trust_runs: TrustRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    # A itself, but its driver spent half the CPU per request: twice as fast a machine.
    fast = f"{trust_runs.a}-fast"
    _copy_run(trust_runs, trust_runs.a, fast, 0.5)
    where = ["--reports-dir", str(trust_runs.reports_dir)]
    code, _, stderr = _compare(capsys, trust_runs.a, fast, *where)
    assert code == 2
    assert stderr.strip().splitlines() == [
        "aside-bench: the machines differ: by the driver's CPU per request in the steps both ran, "
        "B ran 2.00x as fast as A (2.00x, more than 1.25x); pass --normalise to compare them "
        "with B put on A's machine, or --ignore-calibration to compare anyway"
    ]
    code, stdout, stderr = _compare(capsys, trust_runs.a, fast, "--normalise", *where)
    assert code == 0, stderr
    assert "B's machine ran 2.00x as fast as A's, beyond the 1.25x allowed (--normalise)" in stdout
    # Its latencies put on A's machine are twice A's own.
    folder = trust_runs.reports_dir / f"compare-{trust_runs.a}-{fast}"
    warm = next(step for step in json.loads((folder / "compare.json").read_text())["steps"]
                if step["key"][1] == "cache")  # fmt: skip
    p50 = warm["changes"]["p50"]
    assert warm["speed"] == pytest.approx(2.0)
    assert p50["b"]["median"] == pytest.approx(2 * p50["a"]["median"])
