"""Trustworthy figures, end to end against the real stack: a calibration with
tiny bounds, a two-step sweep run twice over (REPEAT=2) with k6's HTML
reports kept, a one-step uncalibrated run with the live dashboard, and
`compare` between the two: refusing a run nothing measured the machine of
unless told, and a machine measured twice as fast unless normalised."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from aside_bench import cli, config
from aside_bench.sources import Influx, quote_literal

Bench = Callable[..., subprocess.CompletedProcess[str]]
RATE = 5
# One 1 s probe per server: the bounds are the test's, the search is unit-tested.
TINY_CALIBRATION = [
    "--calibration-probe", "1s", "--calibration-start", "20",
    "--calibration-max-rate", "20", "--calibration-budget", "10",
]  # fmt: skip


def _free_port() -> int:
    """A port below the ephemeral range nothing listens on."""
    for port in range(24500, 24700):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free port in 24500-24700 for the live dashboard")


@dataclass(frozen=True)
class TrustRuns:
    a: str
    b: str
    reports_dir: Path
    b_stdout: str
    dashboard_answered: int | None  # the live dashboard's status while B ran

    def run_json(self, run_id: str) -> dict:
        return json.loads((self.reports_dir / run_id / "run.json").read_text())


def _live_run(args: list[str], env: dict[str, str], port: int) -> tuple[str, int | None]:
    """Run B with --live, asking its dashboard for its page while k6 runs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aside_bench", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    answered = None
    deadline = time.monotonic() + 90
    try:
        while process.poll() is None and answered is None and time.monotonic() < deadline:
            try:
                page = requests.get(f"http://127.0.0.1:{port}/", timeout=1, allow_redirects=False)
                answered = page.status_code
            except requests.RequestException:
                time.sleep(0.1)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    return stdout, answered


@pytest.fixture(scope="module")
def trust_runs(
    small_seed: Path, tmp_path_factory: pytest.TempPathFactory, bench: Bench, bench_environ
) -> TrustRuns:
    reports_dir = tmp_path_factory.mktemp("trust-reports")
    stamp = time.strftime("%H%M%S")
    a, b = f"trust-a-{stamp}", f"trust-b-{stamp}"
    common = ["--rates", str(RATE), "--warm", "warm", "--duration", "2s", "--cold-sample", "50"]
    common += ["--data-dir", str(small_seed), "--reports-dir", str(reports_dir)]
    done = bench("run", "--run-id", a, "--arms", "nocache cache", "--repeat", "2",
                 "--keep-html", *TINY_CALIBRATION, *common)  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    port = _free_port()
    env = {**bench_environ, "ASIDE_K6_DASHBOARD_PORT": str(port)}
    live = ["run", "--run-id", b, "--arms", "cache", "--live", "--no-calibrate", *common]
    stdout, answered = _live_run(live, env, port)
    return TrustRuns(a, b, reports_dir, stdout, answered)


def test_the_calibration_is_measured_kept_and_reported(trust_runs: TrustRuns) -> None:
    run = trust_runs.run_json(trust_runs.a)
    targets = run["machine"]["calibration"]["targets"]
    assert set(targets) == {"core", "gateway"}
    for found in targets.values():
        # One probe at the only rate allowed, held: stated as a lower bound.
        assert (found["rate"], found["capped"]) == (20, True), found
        (probe,) = found["probes"]
        assert probe["completed"] and probe["held"] and probe["k6"]["cpu_s"] > 0
    markdown = (trust_runs.reports_dir / trust_runs.a / "report.md").read_text()
    html = (trust_runs.reports_dir / trust_runs.a / "report.html").read_text()
    assert "measurement ceiling): >= 20 req/s" in markdown
    assert "<h2>Calibration</h2>" in html and "measurement ceiling): &gt;= 20 req/s" in html
    assert "| / machine calibration | / gateway /healthz calibration |" in markdown


def test_repeats_run_interleaved_and_report_a_spread(
    trust_runs: TrustRuns, settings: config.Settings
) -> None:
    run = trust_runs.run_json(trust_runs.a)
    assert [(s["arm"], s["repeat"]) for s in run["steps"]] == [
        ("nocache", 1), ("cache", 1), ("nocache", 2), ("cache", 2),
    ]  # fmt: skip
    # By default each step's figures are its own k6 summary's: nothing per request in InfluxDB.
    counts = {(s["arm"], s["repeat"]): s["summary"]["requests"] for s in run["steps"]}
    assert set(counts) == {(arm, r) for arm in ("nocache", "cache") for r in (1, 2)}
    assert all(count >= RATE * 2 for count in counts.values()), counts
    influx = Influx(settings.influx_base, settings.influx_db)
    (series,) = influx.query(
        f'SELECT count("value") FROM "http_reqs" WHERE "run_id" = {quote_literal(trust_runs.a)}'
    )
    assert series == []
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


def test_every_step_records_k6s_cpu_and_vus(trust_runs: TrustRuns) -> None:
    for run_id in (trust_runs.a, trust_runs.b):
        run = trust_runs.run_json(run_id)
        for step in run["steps"]:
            assert 0 < step["k6"]["cpu_s"] < 10, step["k6"]
            assert step["k6"]["cpu_limit_cores"] == run["params"]["k6_cpu_limit_cores"] > 0
        markdown = (trust_runs.reports_dir / run_id / "report.md").read_text()
        assert "| k6 CPU cores | k6 VUs busy/max | load generator |" in markdown
        assert "Load generator saturated" not in markdown  # 5 requests/s


def test_k6s_html_reports_are_kept(trust_runs: TrustRuns) -> None:
    for run_id, steps in ((trust_runs.a, 4), (trust_runs.b, 1)):
        run = trust_runs.run_json(run_id)
        names = [step["k6_html"] for step in run["steps"]]
        assert len(names) == steps
        for name in names:
            page = (trust_runs.reports_dir / run_id / name).read_text()
            assert page.lower().startswith("<!doctype html>")


def test_the_live_dashboard_served_the_running_step(trust_runs: TrustRuns) -> None:
    assert "live: http://127.0.0.1:" in trust_runs.b_stdout
    # k6's dashboard answers / with a redirect to its page.
    assert trust_runs.dashboard_answered == 307


def _compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`aside-bench compare` in this process (it reads files only): code, stdout, stderr."""
    code = cli.main(["compare", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _copy_run(trust_runs: TrustRuns, source: str, copy: str, k6_cost_factor: float | None) -> None:
    """A copy of run `source` named `copy`, k6's CPU of every step multiplied
    by `k6_cost_factor` (None: left out, as in runs from before it was kept)."""
    shutil.copytree(trust_runs.reports_dir / source, trust_runs.reports_dir / copy)
    run_path = trust_runs.reports_dir / copy / "run.json"
    run_path.write_text(json.dumps({**json.loads(run_path.read_text()), "run_id": copy}))
    figures_path = trust_runs.reports_dir / copy / "results.json"
    figures = json.loads(figures_path.read_text())
    for one in figures:
        cores = one.get("k6_cpu_cores")
        one["k6_cpu_cores"] = (
            None if k6_cost_factor is None or cores is None else (cores * k6_cost_factor)
        )
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
    assert "B's speed" in markdown and "k6's CPU per request" in markdown
    assert f"| read | cache (warm) | {RATE} |" in markdown
    assert "nocache" not in markdown.split("|---")[1]  # B ran no nocache step
    assert "exceeds the widest spread (max - min)" in markdown
    (step,) = json.loads((folder / "compare.json").read_text())["steps"]
    assert step["changes"]["p95"]["basis"] == "spread" and step["speed"] > 0
    # Nothing measured the machine of a run without k6's CPU per step and
    # without a calibration: refused unless told.
    bare = f"{trust_runs.b}-bare"
    _copy_run(trust_runs, trust_runs.b, bare, None)
    code, _, stderr = _compare(capsys, trust_runs.a, bare, *where)
    assert code == 2
    assert f"run {bare} has neither k6's CPU per step nor a machine calibration" in stderr
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
    # A itself, but its k6 spent half the CPU per request: twice as fast a machine.
    fast = f"{trust_runs.a}-fast"
    _copy_run(trust_runs, trust_runs.a, fast, 0.5)
    where = ["--reports-dir", str(trust_runs.reports_dir)]
    code, _, stderr = _compare(capsys, trust_runs.a, fast, *where)
    assert code == 2
    assert stderr.strip().splitlines() == [
        "aside-bench: the machines differ: by k6's CPU per request in the steps both ran, "
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
