"""A pid file only names a process of its own stack: lib.sh's pid_of and the
bench's procs.recorded_pid accept the same pids, and neither accepts another
stack's process with the same command line (a recycled pid, or a copied file)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aside_bench.stack.procs import recorded_pid
from stack_helpers import ROOT, MiniStack


def _pid_of(run_dir: Path, service: str) -> int | None:
    """lib.sh's pid_of under ASIDE_RUN_DIR=run_dir."""
    done = subprocess.run(
        ["bash", "-c", 'source infra/env.sh && source infra/lib.sh && pid_of "$1"', "-", service],
        cwd=ROOT,
        env={**os.environ, "ASIDE_RUN_DIR": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return int(done.stdout) if done.returncode == 0 else None


def _record(run_dir: Path, service: str, pid: int, match: str) -> None:
    """A pid file as lib.sh's record_pid writes it."""
    (run_dir / "pids").mkdir(parents=True, exist_ok=True)
    (run_dir / "pids" / f"{service}.pid").write_text(f"{pid}\n")
    (run_dir / "pids" / f"{service}.pid.cmd").write_text(match)


@pytest.fixture
def lab_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process started the way the scripts start one: ASIDE_RUN_DIR exported."""
    env = {**os.environ, "ASIDE_RUN_DIR": str(tmp_path / "lab")}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_only_the_stack_whose_environment_the_process_has_may_claim_it(
    tmp_path: Path, lab_process: subprocess.Popen[bytes]
) -> None:
    lab, test, other_dir = tmp_path / "lab", tmp_path / "test", tmp_path / "lab-other"
    pid = lab_process.pid
    # Both stacks record the same pid with the same match: the command lines of
    # the two stacks' processes can be identical (gunicorn's are).
    for run_dir in (lab, test, other_dir):
        _record(run_dir, "gateway", pid, "sleep")

    for read in (_pid_of, recorded_pid):
        assert read(lab, "gateway") == pid, read
        assert read(test, "gateway") is None, read
        # A run dir whose name merely starts with the process's is another one.
        assert read(other_dir, "gateway") is None, read

    # The command line still has to hold the match: a recycled pid of another program.
    _record(lab, "redis", pid, "redis-server")
    assert _pid_of(lab, "redis") is None and recorded_pid(lab, "redis") is None


def test_down_leaves_another_stacks_process_alone(mini_stack: MiniStack, tmp_path: Path) -> None:
    up = mini_stack.run("up", "redis")
    assert up.returncode == 0, up.stderr
    redis = mini_stack.live_pids()["redis"]

    # A second stack on the same ports whose pid file names the first one's Redis,
    # exactly as `up` wrote it for the first stack.
    other = MiniStack(
        tmp_path / "other", {**mini_stack.env, "ASIDE_RUN_DIR": str(tmp_path / "other")}
    )
    (other.run_dir / "pids").mkdir(parents=True)
    for name in ("redis.pid", "redis.pid.cmd"):
        shutil.copy(mini_stack.run_dir / "pids" / name, other.run_dir / "pids" / name)
    assert recorded_pid(mini_stack.run_dir, "redis") == redis
    assert recorded_pid(other.run_dir, "redis") is None

    status = other.run("status", "redis")
    assert status.returncode == 1 and "down" in status.stdout, status.stdout
    down = other.run("down")
    assert down.returncode == 0, down.stderr
    assert Path(f"/proc/{redis}").exists(), "the other stack's down killed this stack's Redis"
    assert not (other.run_dir / "pids" / "redis.pid").exists()
    assert mini_stack.run("status", "redis").returncode == 0
