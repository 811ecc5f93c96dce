"""matplotlib takes about a second to import: `--help` and the commands that
draw nothing (chaos) must not pay for it, nor must importing the modules the
drawing commands are built from (the charts load when a report is drawn)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from aside_bench.cli import app

NOT_DRAWING = [
    "aside_bench.cli",
    "aside_bench.cli.app",
    "aside_bench.cli.runner_commands",
    "aside_bench.cli.report_and_compare",
    "aside_bench_chaos.run",
    "aside_bench_chaos.report",
    "aside_bench_soak.run",
    "aside_bench_soak.report",
    "aside_bench_hardening.run",
    "aside_bench_hardening.report",
    "aside_bench.sweep.runner",
    "aside_bench.report.sweep",
    "aside_bench.report.doc",
    "aside_bench.ceiling.report",
    "aside_bench.calibration.calibrate",
    "aside_bench.compare.steps",
]


def _loads_matplotlib(code: str) -> subprocess.CompletedProcess[str]:
    check = "import sys; print('matplotlib' in sys.modules)"
    return subprocess.run(
        [sys.executable, "-c", f"{code}\n{check}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [[], ["run"], ["ceiling"], ["report"], ["compare"], ["chaos"], ["soak"], ["hardening"]],
)
def test_help_does_not_import_matplotlib(args: list[str]) -> None:
    if args and args[0] not in {command.name for command in app.commands()}:
        pytest.skip(f"the plug-in of {args[0]} is not installed")
    code = (
        "from aside_bench import cli\n"
        "try:\n"
        f"    cli.main({[*args, '--help']!r})\n"
        "except SystemExit as stop:\n"
        "    assert stop.code == 0, stop.code"
    )
    done = _loads_matplotlib(code)
    assert done.returncode == 0, done.stderr
    assert "usage: aside-bench" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("module", NOT_DRAWING)
def test_modules_import_without_matplotlib(module: str) -> None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"the plug-in {module.split('.')[0]} is not installed")
    done = _loads_matplotlib(f"import {module}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_charts_do_import_it() -> None:
    # The check above would pass vacuously if matplotlib never showed in sys.modules.
    done = _loads_matplotlib("import aside_bench.report.charts")
    assert done.stdout.strip() == "True", done.stderr
