"""The core without a plug-in: a fresh virtual environment with aside-bench
alone installed lists only the core's commands and scenarios, runs a short
read sweep against the test stack and passes the core's unit tests. The
plug-ins (bench-plugins/) add to it; nothing of the core needs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import REPO_ROOT, bench_env

CORE_COMMANDS = ["run", "ceiling", "report", "compare"]
# Unit tests of the core that need no service and no plug-in.
CORE_UNIT_TESTS = ["test_bench_plan.py", "test_bench_answer.py", "test_bench_split.py",
                   "test_bench_imports.py"]  # fmt: skip
INSTALL_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def core_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding aside-bench and its dependencies only (the
    lockfile's versions would be the workspace's; any that resolve will do here)."""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    venv = tmp_path_factory.mktemp("core-alone") / "venv"
    python = venv / "bin" / "python"
    for command in (
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        # Editable, as the workspace installs it: the bench reads the checkout's
        # infra/ and contracts/ beside it.
        [uv, "pip", "install", "--quiet", "--python", str(python), "-e", str(REPO_ROOT / "bench"),
         "pytest", "pytest-timeout"],
    ):  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    return venv


def _bench(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**bench_env(), "VIRTUAL_ENV": str(venv)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(venv / "bin" / "aside-bench"), *args], env=env,
                          capture_output=True, text=True, timeout=180, check=False)  # fmt: skip


def test_the_core_alone_lists_its_own_commands_and_scenarios(core_alone: Path) -> None:
    listed = subprocess.run([str(core_alone / "bin" / "python"), "-m", "pip", "list"],
                            capture_output=True, text=True, check=False).stdout  # fmt: skip
    assert "aside-bench-" not in listed.replace("aside-bench ", "")
    done = _bench(core_alone, "--help")
    assert done.returncode == 0, done.stderr
    choices = done.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert choices == CORE_COMMANDS
    done = _bench(core_alone, "run", "--help")
    assert "--scenario {read,mixed,compute}" in done.stdout.replace("\n", " ").replace("  ", " "), (
        done.stdout
    )
    done = _bench(core_alone, "chaos")
    assert done.returncode == 2 and "invalid choice: 'chaos'" in done.stderr


def test_the_core_alone_runs_a_short_read_sweep(
    core_alone: Path, small_seed: Path, tmp_path: Path
) -> None:
    done = _bench(core_alone, "run", "--run-id", "core-alone", "--rates", "5", "--duration",
                  "2s", "--arms", "nocache cache", "--warm", "warm", "--no-calibrate",
                  "--data-dir", str(small_seed), "--reports-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "core-alone" / "report.md").read_text()
    assert "## " in report and "cache (warm)" in report


def test_the_cores_unit_tests_pass_without_a_plug_in(core_alone: Path) -> None:
    tests = [str(REPO_ROOT / "bench" / "tests" / name) for name in CORE_UNIT_TESTS]
    done = subprocess.run(
        [str(core_alone / "bin" / "python"), "-m", "pytest", "--import-mode=importlib", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(REPO_ROOT / "bench"),
         "--confcutdir", str(REPO_ROOT / "bench"), *tests],
        cwd=REPO_ROOT / "bench", env=bench_env(PYTHONPATH=str(REPO_ROOT / "bench" / "tests")),
        capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]
