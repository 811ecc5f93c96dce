"""Unit tests of k6's cost variants and the ceiling's bare-script reference:
the k6 command of each variant, the bare script's options as k6 itself reads
them (`k6 inspect`), its summary turned into a step's figures, the reference's
ratio and verdict, and the tables they make."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest
from aside_bench import cli, config, k6cost
from aside_bench.ceiling import Reference
from aside_bench.collect import summary_result
from aside_bench.k6run import BARE_SCRIPT, K6Summary, LoadShape, k6_command, step_run
from aside_bench.plan import BARE_ARM, Step
from aside_bench.report import ceiling_tables, reference_of
from aside_bench.results import Latency, StepResult
from aside_bench.saturation import LoadGen

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS = config.load({"ASIDE_ROOT": str(REPO_ROOT)})
DATA = Path("/tmp/data")


def _base(rate: int = 1000) -> object:
    step = Step("ceiling", "cache", "warm", rate, 10)
    return step_run(SETTINGS, step, "unit", LoadShape(), (50, 1000), DATA)


def _variables(command: list[str]) -> dict[str, str]:
    pairs = [arg for i, arg in enumerate(command) if i and command[i - 1] == "-e"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize("variant", k6cost.VARIANTS, ids=lambda v: v.name)
def test_each_variant_is_a_switch_of_one_script_not_a_copy(variant: k6cost.Variant) -> None:
    command = k6_command(SETTINGS, k6cost.variant_run(_base(), variant, SETTINGS.influx_url))
    variables = _variables(command)
    assert command[-1].endswith(f"/{variant.script}")
    assert variables["SCENARIO"] == f"k6cost-{variant.name}" and variables["ARM"] == "cache"
    assert variables["RATE"] == "1000" and variables["PHASE"] == "warm"
    assert ("--out" in command) == variant.influx
    if variant.influx:
        assert command[command.index("--out") + 1] == f"influxdb={SETTINGS.influx_url}"
    if variant.script == BARE_SCRIPT:
        on = {name for name in k6cost.SWITCHES if variables[name] == "1"}
        assert on == set(variant.switches)
    else:
        assert not set(k6cost.SWITCHES) & set(variables)
    # Without an output the figures are in the summary its handleSummary writes.
    assert ("--summary-mode=disabled" in command) == variant.influx


def _telemetry(variant: k6cost.Variant) -> set[str]:
    return set(variant.switches) | ({"out"} if variant.influx else set())


def test_each_variant_adds_to_the_one_before() -> None:
    bare = [v for v in k6cost.VARIANTS if v.script == BARE_SCRIPT]
    for before, after in itertools.pairwise(bare):
        assert _telemetry(before) < _telemetry(after), after.name
    assert _telemetry(bare[0]) == set()
    assert _telemetry(bare[-1]) == {*k6cost.SWITCHES, "out"}
    # The read script as the bench runs it: no output, then with every sample.
    assert [(v.script, v.influx) for v in k6cost.VARIANTS[-2:]] == [
        ("read.js", False),
        ("read.js", True),
    ]


def test_variants_parse_in_the_tables_order() -> None:
    assert [v.name for v in k6cost.parse_variants("read bare")] == ["bare", "read"]
    assert k6cost.parse_variants(None) == list(k6cost.VARIANTS)
    with pytest.raises(k6cost.VariantError, match="'nope'"):
        k6cost.parse_variants("bare nope")
    assert k6cost.variant_of("k6cost-tags").name == "tags"
    assert k6cost.variant_of("ceiling") is None


def test_the_ceilings_reference_step_runs_the_bare_script_without_output() -> None:
    run = step_run(
        SETTINGS, Step("ceiling", BARE_ARM, "warm", 800, 12), "unit", LoadShape(), (9, 800), DATA
    )
    command = k6_command(SETTINGS, run)
    assert run.script == BARE_SCRIPT and "--out" not in command
    assert "--summary-mode=disabled" not in command
    assert _variables(command)["ARM"] == BARE_ARM
    args = cli.build_parser().parse_args(["ceiling"])
    assert args.reference is True
    assert cli.build_parser().parse_args(["ceiling", "--no-reference"]).reference is False


def _sample_tags(command: list[str], out: Path, **extra: str) -> list[dict[str, str]]:
    """Run the command for real with a JSON output beside it; every sample's tags."""
    args = [*command[:-1], "--out", f"json={out}"]
    args += [x for name, value in extra.items() for x in ("-e", f"{name}={value}")]
    done = subprocess.run(
        [*args, command[-1]], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return [line["data"].get("tags") or {} for line in lines if line["type"] == "Point"]


def test_the_bare_script_carries_no_tag_unless_told(tmp_path: Path) -> None:
    if not SETTINGS.k6_bin.exists():
        pytest.fail(f"k6 not found at {SETTINGS.k6_bin}; run `make install`")
    (tmp_path / "hot_emails.json").write_text(json.dumps(["hot@example.com"]))
    (tmp_path / "cold_emails.json").write_text(json.dumps(["cold@example.com"]))
    # Nothing listens on port 1: every request fails at once, and still makes samples.
    settings = config.load({"ASIDE_ROOT": str(REPO_ROOT), "GATEWAY_URL": "http://127.0.0.1:1"})
    step = Step("ceiling", BARE_ARM, "warm", 5, 1)
    shape = LoadShape(timeout_s=1)
    command = k6_command(settings, step_run(settings, step, "u", shape, (2, 5), tmp_path))
    bare = _sample_tags(command, tmp_path / "bare.json")
    assert len(bare) > 10 and all(tags == {} for tags in bare)
    tagged = _sample_tags(command, tmp_path / "tagged.json", TAGS="1")
    assert {"arm": BARE_ARM, "run_id": "u", "scenario": "ceiling"}.items() <= tagged[0].items()


SUMMARY = {
    "metrics": {
        "http_req_duration": {"type": "trend", "values": {"med": 0.8, "p(95)": 2.5, "p(99)": 7.0}},
        "http_reqs": {"type": "counter", "values": {"count": 9990, "rate": 999.0}},
        "http_req_failed": {"type": "rate", "values": {"rate": 0.0002, "passes": 2, "fails": 9988}},
        "iterations": {"type": "counter", "values": {"count": 9990}},
        "dropped_iterations": {"type": "counter", "values": {"count": 10}},
        "vus": {"type": "gauge", "values": {"value": 3, "min": 1, "max": 14}},
        "vus_max": {"type": "gauge", "values": {"value": 30, "min": 30, "max": 30}},
    }
}


def test_a_bare_steps_figures_come_from_its_summary(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(SUMMARY))
    found = K6Summary.read(path).step_figures()
    assert found is not None
    assert (found["p95"], found["requests"], found["failed"], found["dropped"]) == (
        2.5,
        9990,
        2,
        10,
    )
    record = {
        "scenario": "ceiling", "arm": BARE_ARM, "phase": "warm", "rate": 1000,
        "duration_s": 10, "vus": [30, 1000], "summary": found,
        "k6": {"cpu_s": 3.0, "cpu_limit_cores": 0.8},
    }  # fmt: skip
    result = summary_result(record, None)
    assert result.latency == Latency(0.8, 2.5, 7.0, 9990)
    assert result.drop_rate == pytest.approx(12 / 10_000)
    assert result.loadgen is not None and result.loadgen.vus_peak == 14
    assert result.verdict(10.0) == "missed"  # dropped and failed requests: not held
    assert K6Summary.read(tmp_path / "absent.json").step_figures() is None


@pytest.mark.parametrize(
    ("ceiling", "reference", "ratio", "agrees"),
    [(900, 1000, 0.9, True), (880, 1000, 0.88, False), (1100, 1000, 1.1, True),
     (1000, 1000, 1.0, True), (1200, 1000, 1.2, False), (500, 0, None, False)],
)  # fmt: skip
def test_the_reference_agrees_within_ten_percent(
    ceiling: int, reference: int, ratio: float | None, agrees: bool
) -> None:
    found = Reference(ceiling, reference)
    assert found.ratio == (None if ratio is None else pytest.approx(ratio))
    assert found.agrees is agrees
    assert found.verdict == ("agrees within 10 %" if agrees else "does not agree within 10 %")


def _result(scenario: str, arm: str, rate: int, p95: float, cpu_s: float = 1.0) -> StepResult:
    gen = LoadGen(cpu_s, 10, 0.8, 1000, rate, None, None)
    return StepResult(
        step=Step(scenario, arm, "warm", rate, 10),
        latency=Latency(1.0, p95, p95, rate * 10),
        iterations=rate * 10,
        failed=0,
        dropped=0,
        cache=None,
        loadgen=gen,
    )


def test_the_ceiling_report_states_both_ceilings_and_their_ratio() -> None:
    results = [
        _result("ceiling", "cache", 800, 4.0),
        _result("ceiling", "cache", 1200, 30.0),
        _result("ceiling", BARE_ARM, 800, 3.0),
        _result("ceiling", BARE_ARM, 1200, 5.0),
        _result("ceiling", BARE_ARM, 1600, 40.0),
    ]
    tables, found = ceiling_tables(results, 10.0)
    rows = {row[0]: row[1] for row in tables[0].rows}
    assert rows["cache (warm)"] == "800" and rows[f"{BARE_ARM} (warm)"] == "1200"
    assert rows[f"cache / {BARE_ARM} (reference)"] == "0.67 (does not agree within 10 %)"
    assert found["reference"] == {"ratio": pytest.approx(800 / 1200), "agrees": False}
    assert reference_of({"cache": found["cache"]}) is None


def test_the_cost_table_prices_each_variant_against_bare() -> None:
    results = [
        _result("k6cost-read", "cache", 1000, 6.0, cpu_s=5.0),
        _result("k6cost-bare", "cache", 1000, 2.0, cpu_s=2.0),
        _result("k6cost-checks", "cache", 1000, 3.0, cpu_s=2.5),
    ]
    rows = k6cost.figures(results)
    assert [row["variant"] for row in rows] == ["bare", "checks", "read"]
    assert [row["k6_cpu_s_per_1000"] for row in rows] == [0.2, 0.25, 0.5]
    assert [row["vs_bare"] for row in rows] == pytest.approx([1.0, 1.25, 2.5])
    table = k6cost.cost_table(rows, 1000)
    assert table.rows[2][2:4] == ["0.500", "2.50x"] and table.rows[0][-1] == "0.0%"
