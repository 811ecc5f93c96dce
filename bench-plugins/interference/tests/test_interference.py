"""Unit tests of the interference scenario: its steps, its driver variables, the
compute requests and their expected answers (against contracts/compute.json),
the compute figures beside each step, its tables and its report files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from aside_bench.load.run import step_run
from aside_bench.plan import compute
from aside_bench.plan.arms import CACHE_ARMS, cache_param
from aside_bench.plan.scenarios import scenario_named
from aside_bench.plan.shape import LoadShape
from aside_bench.plan.steps import PlanError, Step, build_steps, parse_rates, pool_for
from aside_bench.records.results import CacheCounts, Latency, StepResult
from aside_bench.records.runfile import RunRecord
from aside_bench.sweep.collect import compute_beside
from aside_bench.sweep.progress import quick_line
from aside_bench_interference import plan as interference
from aside_bench_interference import report as interference_report

REPO_ROOT = Path(__file__).resolve().parents[3]
COMPUTE = json.loads((REPO_ROOT / "contracts" / "compute.json").read_text())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCENARIO = interference.SCENARIO


# ---- the plan ---------------------------------------------------------------------------


def test_the_scenario_is_registered_with_its_defaults() -> None:
    registered = scenario_named(SCENARIO)
    assert registered.default_rates == (0, 2, 5, 10, 20) and registered.lowest_rate == 0
    assert registered.arms == interference.ARMS == registered.default_arms
    assert set(interference.ARMS) == {
        f"{engine}-{kind}" for engine in ("go", "python") for kind in COMPUTE["kinds"]
    }
    assert LoadShape().read_rate == 500


def test_steps_carry_the_read_rate_and_always_run_warm() -> None:
    steps = build_steps(SCENARIO, [0, 2], ["go-bcrypt", "python-bcrypt"], "both", 30, 500)
    assert [(s.rate, s.arm, s.phase) for s in steps] == [
        (0, "go-bcrypt", "warm"), (0, "python-bcrypt", "warm"),
        (2, "go-bcrypt", "warm"), (2, "python-bcrypt", "warm"),
    ]  # fmt: skip
    assert all(s.read_rate == 500 for s in steps)
    # A step's figures are its reads': 500/s for 30 s, whatever the compute rate.
    assert {s.scheduled for s in steps} == {15_000}


def test_other_scenarios_keep_no_read_rate() -> None:
    (step,) = build_steps("read", [30], ["cache"], "warm", 10, read_rate=500)
    assert step.read_rate == 0 and step.scheduled == 300


def test_the_interference_scenario_needs_reads() -> None:
    with pytest.raises(PlanError, match="read rate"):
        build_steps(SCENARIO, [2], ["go-pbkdf2"], "both", 10, read_rate=0)


def test_its_arms_are_its_own() -> None:
    with pytest.raises(PlanError, match="does not belong"):
        build_steps(SCENARIO, [2], ["cache"], "both", 10, 500)
    with pytest.raises(PlanError, match="does not belong"):
        build_steps("read", [2], ["go-pbkdf2"], "both", 10)


def test_rate_zero_is_only_for_the_scenarios_that_allow_it() -> None:
    assert parse_rates("0 2, 20", lowest=0) == [0, 2, 20]
    with pytest.raises(PlanError, match=">= 1"):
        parse_rates("0 2")


def test_the_reads_beside_the_compute_have_a_pool_of_their_own() -> None:
    shape = LoadShape(read_rate=400)
    step = Step(SCENARIO, "go-pbkdf2", "warm", 5, 10, read_rate=400)
    run = step_run(step, "r", shape, 90, Path("."), max_pool=300)
    assert run.extra["READ_POOL"] == str(pool_for(400, 300)) == "300"
    assert run.extra["READ_RATE"] == "400" and run.scenario == "interference"
    assert run.extra["READ_CACHE"] == "l2" and run.pool == 90


# ---- the nopool arm ----------------------------------------------------------------------


def test_the_nopool_arm_reads_uncached_without_the_pool() -> None:
    assert "nopool" in CACHE_ARMS and "nopool" in scenario_named("read").arms
    assert cache_param("nopool") == "nopool"
    (step,) = build_steps("read", [30], ["nopool"], "both", 10)
    assert step.phase == "none"  # no cache state to prepare


# ---- the compute requests and their answers ---------------------------------------------


def test_checksum_answers_are_the_contracts() -> None:
    for vector in COMPUTE["vectors"]:
        body, expect = compute.compute_request("go-checksum", vector["complexity"], 1, 4)
        assert body == {"kind": "checksum", "engine": "go", "complexity": vector["complexity"]}
        assert expect == {"kind": "checksum", "engine": "go", "checksum": vector["checksum"]}


@pytest.mark.parametrize(
    "vector", COMPUTE["pbkdf2"]["vectors"][:4], ids=lambda v: str(v["iterations"])
)
def test_pbkdf2_answers_are_the_contracts(vector, monkeypatch) -> None:
    monkeypatch.setattr(compute, "PASSWORD", vector["password"])
    monkeypatch.setattr(compute, "SALT", vector["salt"])
    body, expect = compute.compute_request("python-pbkdf2", 10, vector["iterations"], 10)
    assert body == {"kind": "pbkdf2", "engine": "python", "password": vector["password"],
                    "salt": vector["salt"], "iterations": vector["iterations"]}  # fmt: skip
    assert expect["derived_key"] == vector["derived_key"]


def test_the_bench_inputs_fit_the_contract() -> None:
    secrets = COMPUTE["secrets"]
    assert 1 <= len(compute.PASSWORD.encode()) <= secrets["password_max_bytes"]
    assert 1 <= len(compute.SALT.encode()) <= secrets["salt_max_bytes"]
    pbkdf2, bcrypt = COMPUTE["pbkdf2"], COMPUTE["bcrypt"]
    ours = (
        compute.DEFAULT_PBKDF2_ITERATIONS,
        compute.PBKDF2_ITERATIONS_RANGE,
        compute.DEFAULT_BCRYPT_COST,
        compute.BCRYPT_COST_RANGE,
    )
    contract = (
        pbkdf2["iterations_default"],
        (pbkdf2["iterations_min"], pbkdf2["iterations_max"]),
        bcrypt["cost_default"],
        (bcrypt["cost_min"], bcrypt["cost_max"]),
    )
    assert ours == contract


def test_bcrypt_answers_are_checked_for_their_cost_and_format() -> None:
    body, expect = compute.compute_request("go-bcrypt", 10, 1, 6)
    assert body == {"kind": "bcrypt", "engine": "go", "password": compute.PASSWORD, "cost": 6}
    assert expect == {"kind": "bcrypt", "engine": "go", "cost": 6}
    variables = interference.driver_variables("go-bcrypt", 50, 50, (10, 1, 6))
    assert json.loads(variables["COMPUTE_BODY"]) == body
    assert json.loads(variables["COMPUTE_EXPECT"]) == expect
    pattern = re.compile(variables["COMPUTE_HASH_PATTERN"])
    for vector in COMPUTE["bcrypt"]["verify_vectors"]:
        assert pattern.match(vector["hash"])
    assert not pattern.match("$2a$06$short")


def test_bad_arms_and_costs_are_refused() -> None:
    with pytest.raises(compute.ComputeError, match="engine"):
        compute.split_arm("rust-bcrypt")
    with pytest.raises(compute.ComputeError):
        compute.split_arm("go-scrypt")
    with pytest.raises(compute.ComputeError, match="--bcrypt-cost"):
        interference.check_work(600_000, 13)
    with pytest.raises(compute.ComputeError, match="--pbkdf2-iterations"):
        interference.check_work(1_000_001, 10)
    interference.check_work(1, 4)


def test_the_default_key_is_pbkdf2_hmac_sha256_of_the_bench_inputs() -> None:
    _, expect = compute.compute_request("go-pbkdf2", 10, 1000, 10)
    key = hashlib.pbkdf2_hmac("sha256", b"aside-lab-password", b"aside-lab-salt-16", 1000)
    assert expect["derived_key"] == key.hex()


# ---- figures, tables, report -------------------------------------------------------------


def test_the_compute_beside_a_step_comes_from_its_own_scenario_of_the_summary() -> None:
    step = Step(SCENARIO, "python-pbkdf2", "warm", 2, 10, read_rate=500)
    compute = {"p50": 150.0, "p95": 300.0, "p99": 600.0, "answered": 18, "iterations": 20,
               "failed": 2, "dropped": 0}  # fmt: skip
    summary = {"p95": 2.0, "compute": compute}
    beside = compute_beside(step, summary)
    assert beside is not None and beside.step.scenario == interference.COMPUTE_SCENARIO
    assert beside.achieved_rps == pytest.approx(1.8) and beside.drop_rate == pytest.approx(0.1)
    assert beside.latency is not None and beside.latency.p95 == 300
    zero = Step(SCENARIO, "python-pbkdf2", "warm", 0, 10, read_rate=500)
    assert compute_beside(zero, summary) is None
    assert compute_beside(Step("read", "cache", "warm", 2, 10), summary) is None


def _result(arm: str, rate: int, p99: float, compute_p95: float | None) -> StepResult:
    step = Step(SCENARIO, arm, "warm", rate, 10, read_rate=100)
    beside = None
    if rate:
        beside = StepResult(
            Step(interference.COMPUTE_SCENARIO, arm, "warm", rate, 10),
            Latency(1, compute_p95 or 0, compute_p95 or 0, rate * 10), rate * 10, 0, 0, None,
        )  # fmt: skip
    return StepResult(
        step=step,
        latency=Latency(p99 / 4, p99 / 2, p99, 1000),
        iterations=1000,
        failed=10,
        dropped=0,
        cache=CacheCounts(hits=990, misses=10, bypass=0),
        compute=beside,
    )


RESULTS = [
    _result("go-bcrypt", 0, 8.0, None),
    _result("python-bcrypt", 0, 9.0, None),
    _result("go-bcrypt", 5, 12.0, 80.0),
    _result("python-bcrypt", 5, 250.0, 95.0),
]


def test_the_pivot_puts_the_arms_reads_side_by_side() -> None:
    table = interference_report.pivot_table(RESULTS)
    assert table.headers == ["compute /s", "go-bcrypt p99 ms", "python-bcrypt p99 ms"]
    assert table.rows == [["0", "8.00", "9.00"], ["5", "12.0", "250"]]


def test_the_long_table_puts_compute_throughput_next_to_the_reads() -> None:
    table = interference_report.long_table(RESULTS)
    assert table.headers[:2] == ["arm", "compute /s"] and len(table.headers) == 11
    assert table.rows[0] == ["go-bcrypt", "0", "2.00", "4.00", "8.00", "99.0", "1.0%", "99.0%",
                             "0.0", "-", "-"]  # fmt: skip
    assert table.rows[1][:2] == ["go-bcrypt", "5"]
    assert table.rows[1][-3:] == ["5.0", "80.0", "0.0%"]
    assert [row[0] for row in table.rows] == ["go-bcrypt"] * 2 + ["python-bcrypt"] * 2


def test_the_progress_line_shows_the_compute_beside_the_reads() -> None:
    line = quick_line(RESULTS[3])
    assert "p95 125 ms" in line and "compute 5.0/s p95 95.0 ms" in line


def test_the_report_has_its_tables_and_its_chart(tmp_path: Path) -> None:
    run = RunRecord.from_json({
        "run_id": "unit-interference",
        "kind": "run",
        "created": "2026-01-01T00:00:00+00:00",
        "params": {"scenario": SCENARIO, "duration_s": 10, "hot_share": 0.9,
                   "cold_sample_used": 200, "complexity": 10,
                   **interference_report.run_params(LoadShape(read_rate=100))},
        "machine": {"nproc": 2, "cpu": "Test CPU", "memory_gib": 24.0, "kernel": "6.1",
                    "note": "the load driver shares the 2 cores with the services"},
        "seed": {"rows": 1000, "index": False},
        "settings": {"gateway_url": "http://gateway"},
        "steps": [{"scenario": SCENARIO, "arm": "go-bcrypt", "phase": "warm", "rate": 5,
                   "duration_s": 30, "warning": "slow to settle"}],
    })  # fmt: skip
    tables = interference_report.write_interference(run, RESULTS, tmp_path)
    assert [t.title for t in tables] == [
        "reads p99 latency by compute rate",
        "cached reads beside compute, by arm and compute rate",
    ]
    markdown = (tmp_path / "report.md").read_text()
    assert "100/s of the read mix" in markdown and "bcrypt cost 10" in markdown
    assert "go-bcrypt @ 5/s: slow to settle" in markdown
    assert (tmp_path / "interference.png").read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 1
