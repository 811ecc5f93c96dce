"""The command line: bad input gives one clear line and exit 2, before anything
is touched; a stack that is not up gives one line and exit 1."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from aside_bench.cli.app import build_parser
from aside_bench.cli.options import default_of
from aside_bench.cli.runner_commands import shape_of
from aside_bench.plan.shape import LoadShape
from aside_bench.stack import config
from aside_bench.sweep.runner import Options

Bench = Callable[..., subprocess.CompletedProcess[str]]
DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there
SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "sample.trace"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--rates", "30 abc"], "rates must be whole numbers"),
        (["run", "--rates", "0"], "rates must be whole numbers"),
        (["run", "--arms", "nocache redis"], "unknown arm 'redis'"),
        (["run", "--scenario", "compute", "--arms", "cache"], "unknown arm 'cache'"),
        (["run", "--scenario", "interference", "--arms", "go"], "unknown arm 'go'"),
        (["run", "--scenario", "interference", "--rates", "0 x"], "rates must be whole numbers"),
        (["run", "--scenario", "interference", "--bcrypt-cost", "13"], "--bcrypt-cost must be"),
        (
            ["run", "--scenario", "interference", "--pbkdf2-iterations", "1000001"],
            "--pbkdf2-iterations must be",
        ),
        (["run", "--duration", "0s"], "duration must be at least 1s"),
        (["run", "--duration", "soon"], "duration must look like"),
        (["run", "--run-id", "../escape"], "--run-id must be"),
        (["report"], "give the run id"),
        (["report", "--run", "no-such-run"], "no readable run.json"),
        (["run", "--calibration-probe", "soon"], "duration must look like"),
        (["ceiling", "--calibration-probe", "0s"], "duration must be at least 1s"),
        (["compare", "no-such-a", "no-such-b"], "no readable run.json"),
        (["run", "--trace", str(SAMPLE), "--dist", "zipf"], "--trace and --dist zipf are"),
        (["run", "--scenario", "mixed", "--trace", str(SAMPLE)], "--trace is for the read"),
    ],
)
def test_bad_arguments_fail_with_one_line(
    args: list[str], message: str, tmp_path: Path, bench: Bench
) -> None:
    done = bench(*args, "--reports-dir", str(tmp_path), GATEWAY_URL=DEAD)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--hot-share", "1.5"],
        ["run", "--warm", "tepid"],
        ["ceiling", "--max-rate", "0"],
        ["run", "--repeat", "0"],
        ["ceiling", "--driver-cpu-share", "0"],
        ["compare", "only-one"],
        ["run", "--trace", "no-such.trace"],
    ],
)
def test_argparse_rejects_out_of_range_options(args: list[str], bench: Bench) -> None:
    done = bench(*args)
    assert done.returncode == 2
    assert "error:" in done.stderr


def test_refuses_to_start_when_the_stack_is_down(tmp_path: Path, bench: Bench) -> None:
    done = bench("run", "--reports-dir", str(tmp_path), GATEWAY_URL=DEAD)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"aside-bench: gateway is not ready at {DEAD}/readyz (ConnectionError); "
        "start the stack with `make up`"
    ]
    assert list(tmp_path.iterdir()) == []


def test_existing_run_folder_is_not_overwritten(tmp_path: Path, bench: Bench) -> None:
    (tmp_path / "taken").mkdir()
    done = bench("run", "--run-id", "taken", "--reports-dir", str(tmp_path), GATEWAY_URL=DEAD)
    assert done.returncode == 2 and "exists already" in done.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GATEWAY_URL", "ftp://gateway"),
        ("INFLUXDB_URL", "http://127.0.0.1:28086"),
        ("PROMETHEUS_URL", "prometheus:9090"),
        ("DATABASE_URL", "mysql://x/y"),
        ("REDIS_URL", "http://redis"),
        ("CORE_URL", "core:8080"),
        ("REDIS_MODE", "sentinel"),
    ],
)
def test_a_bad_setting_is_named(name: str, value: str, bench: Bench) -> None:
    with pytest.raises(config.ConfigError, match=name):
        config.load({name: value})
    done = bench("run", **{name: value})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and name in done.stderr


def test_settings_default_to_the_lab_stack() -> None:
    settings = config.load({})
    assert settings.gateway_url == "http://127.0.0.1:28000"
    assert (settings.influx_base, settings.influx_db) == ("http://127.0.0.1:28086", "aside")
    assert settings.driver_bin.name == "aside-load"
    assert settings.default_data_dir.parts[-2:] == ("bench", "data")


def test_the_seeders_data_dir_variable_is_honoured(tmp_path: Path) -> None:
    assert config.load({"ASIDE_DATA_DIR": str(tmp_path)}).default_data_dir == tmp_path


@pytest.mark.parametrize("command", ["run", "ceiling", "cost"])
def test_the_parsers_alpha_is_the_load_shapes(command: str) -> None:
    assert build_parser().parse_args([command]).alpha == LoadShape().alpha


def test_the_parser_reads_its_defaults_where_they_are_owned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Move LoadShape's and the runner's defaults: the parser and its --help follow."""
    fields = {field.name: field for field in dataclasses.fields(LoadShape)}
    monkeypatch.setattr(fields["alpha"], "default", 0.5)
    monkeypatch.setattr(fields["keys"], "default", 7)
    policy = {field.name: field for field in dataclasses.fields(Options)}["cache_policy"]
    monkeypatch.setattr(policy, "default", "allkeys-lfu")
    parser = build_parser()
    args = parser.parse_args(["run"])
    assert (args.alpha, args.keys, args.cache_policy) == (0.5, 7, "allkeys-lfu")
    assert parser.parse_args(["ceiling"]).alpha == 0.5
    with pytest.raises(LookupError):
        default_of(Options, "run_id")


def test_every_command_that_steps_gets_a_whole_load_shape() -> None:
    """Options a command lacks take the shape's defaults; a command that runs no
    mixed step asks for no read-after-write checks."""
    assert shape_of(build_parser().parse_args(["run"])) == LoadShape()
    for command in ("ceiling", "cost"):
        args = build_parser().parse_args([command])
        assert shape_of(args) == dataclasses.replace(LoadShape(), stale_per_min=0)
        assert args.cache_policy == default_of(Options, "cache_policy")
