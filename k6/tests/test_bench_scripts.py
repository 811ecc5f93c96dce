"""The k6 scripts, checked by k6 itself (`k6 inspect` runs their init code: the
environment, the data files, the options) without sending a request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from aside_bench import config
from aside_bench.k6run import SUMMARY_SCRIPTS, LoadShape, k6_command, step_run
from aside_bench.plan import Step

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "k6" / "scripts"
STEP_TAGS = {"run_id", "arm", "rate", "phase", "repeat"}


@pytest.fixture(scope="module")
def k6_bin(settings: config.Settings) -> Path:
    if not settings.k6_bin.exists():
        pytest.fail(f"k6 not found at {settings.k6_bin}; run `make install`")
    return settings.k6_bin


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data")
    (path / "hot_emails.json").write_text(json.dumps(["hot@example.com"]))
    (path / "cold_emails.json").write_text(json.dumps([f"c{i}@example.com" for i in range(500)]))
    return path


def _inspect(k6_bin: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    # The bench's own command line, with `run` and its output flags swapped for `inspect`.
    script = command[-1]
    variables = [arg for i, arg in enumerate(command) if i and command[i - 1] == "-e"]
    args = [str(k6_bin), "inspect"] + [x for v in variables for x in ("-e", v)] + [script]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


CASES = [
    Step("read", "nocache", "none", 75, 30),
    Step("read", "cache", "warm", 300, 30, repeat=2),
    Step("mixed", "cache", "cold", 50, 30),
    Step("compute", "python", "none", 5, 30),
    Step("ceiling", "cache", "warm", 1200, 12),
    Step("ceiling", "healthz", "none", 1200, 12),
]


@pytest.mark.parametrize("step", CASES, ids=lambda s: f"{s.scenario}-{s.arm}")
def test_every_script_is_an_open_model_step_with_the_step_tags(
    step: Step, k6_bin: Path, data_dir: Path
) -> None:
    settings = config.load({"ASIDE_ROOT": str(REPO_ROOT)})
    run = step_run(settings, step, "unit-run", LoadShape(timeout_s=10), (7, 90), data_dir)
    command = k6_command(settings, run)
    done = _inspect(k6_bin, command)
    assert done.returncode == 0, done.stderr
    options = json.loads(done.stdout)
    scenario = options["scenarios"][step.scenario]
    assert scenario["executor"] == "constant-arrival-rate"
    assert (scenario["rate"], scenario["timeUnit"]) == (step.rate, "1s")
    assert scenario["duration"] == f"{step.duration_s}s"
    assert (scenario["preAllocatedVUs"], scenario["maxVUs"]) == (7, 90)
    # Every started iteration must end (answered or timed out) before k6 stops.
    assert int(scenario["gracefulStop"].rstrip("s")) > 10
    assert options["tags"] == {"run_id": "unit-run", "arm": step.arm, "rate": str(step.rate),
                               "phase": step.phase, "repeat": str(step.repeat)}  # fmt: skip
    assert set(options["tags"]) == STEP_TAGS
    # The scenario tag comes from the scenario's name; the URL (one series per
    # email) and per-VU tags stay out of InfluxDB's index.
    assert "scenario" in options["systemTags"]
    assert not {"url", "vu", "iter"} & set(options["systemTags"])
    # The read and ceiling scripts keep their samples in k6 unless asked
    # (their figures: the summary); the others' figures need them in InfluxDB.
    streamed = step_run(
        settings, step, "unit-run", LoadShape(), (7, 90), data_dir, samples="influx"
    )
    for one, sends in ((run, run.script not in SUMMARY_SCRIPTS), (streamed, True)):
        line = k6_command(settings, one)
        assert ("--out" in line and f"influxdb={settings.influx_url}" in line) is sends
        assert ("--summary-mode=disabled" in line) is sends
        assert one.from_summary is not sends


def test_a_missing_variable_stops_k6_with_its_name(k6_bin: Path) -> None:
    done = subprocess.run(
        [str(k6_bin), "inspect", "-e", "BASE_URL=http://x", str(SCRIPTS / "read.js")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "RUN_ID is required" in done.stderr


def test_an_empty_email_file_is_refused(k6_bin: Path, tmp_path: Path) -> None:
    (tmp_path / "hot_emails.json").write_text("[]")
    (tmp_path / "cold_emails.json").write_text('["c@example.com"]')
    settings = config.load({"ASIDE_ROOT": str(REPO_ROOT)})
    command = k6_command(
        settings, step_run(settings, CASES[0], "unit-run", LoadShape(), (5, 10), tmp_path)
    )
    done = _inspect(k6_bin, command)
    assert done.returncode != 0
    assert "hot_emails.json holds no list" in done.stderr


@pytest.mark.parametrize("rate", [0, 5])
def test_the_interference_script_runs_reads_and_compute_side_by_side(
    rate: int, k6_bin: Path, data_dir: Path
) -> None:
    settings = config.load({"ASIDE_ROOT": str(REPO_ROOT)})
    step = Step("interference", "python-bcrypt", "warm", rate, 30, read_rate=400)
    run = step_run(settings, step, "unit-run", LoadShape(timeout_s=10), (7, 90), data_dir, 1000)
    done = _inspect(k6_bin, k6_command(settings, run))
    assert done.returncode == 0, done.stderr
    options = json.loads(done.stdout)
    reads = options["scenarios"]["interference"]
    assert (reads["executor"], reads["exec"], reads["rate"]) == (
        "constant-arrival-rate",
        "reads",
        400,
    )
    assert (reads["preAllocatedVUs"], reads["maxVUs"]) == (45, 400)
    compute = options["scenarios"].get("interference_compute")
    if rate == 0:  # the reads alone: no compute scenario at all
        assert set(options["scenarios"]) == {"interference"}
    else:
        assert (compute["exec"], compute["rate"], compute["timeUnit"]) == ("compute", rate, "1s")
        assert (compute["preAllocatedVUs"], compute["maxVUs"]) == (7, 90)
        assert compute["duration"] == reads["duration"] == "30s"
    assert options["tags"] == {"run_id": "unit-run", "arm": "python-bcrypt", "rate": str(rate),
                               "phase": "warm", "repeat": "1"}  # fmt: skip
