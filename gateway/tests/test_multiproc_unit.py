"""gunicorn.conf.py empties PROMETHEUS_MULTIPROC_DIR at start, and deletes no
folder but the native stack's own (prometheus-multiproc inside ASIDE_RUN_DIR)."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
from aside_gateway.config.multiproc import is_stack_dir, reset_multiproc_dir

REPO = Path(__file__).resolve().parents[2]
STALE = ("counter_123.db", "histogram_123.db", "gauge_livesum_9.db")


def _fill(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in STALE:
        (folder / name).write_bytes(b"x")
    (folder / "notes.txt").write_text("keep me")
    (folder / "sub").mkdir()
    (folder / "sub" / "counter_1.db").write_bytes(b"x")


def _left(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


def test_the_stacks_own_folder_is_emptied(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = run / "gateway" / "prometheus-multiproc"
    _fill(folder)
    reset_multiproc_dir(str(folder), str(run))
    assert folder.is_dir() and _left(folder) == set()


@pytest.mark.parametrize("run_dir", [None, "", "elsewhere"])
def test_any_other_folder_loses_only_metric_files(tmp_path: Path, run_dir: str | None) -> None:
    folder = tmp_path / "prometheus-multiproc"
    _fill(folder)
    if run_dir == "elsewhere":
        run_dir = str(tmp_path / "run")
    reset_multiproc_dir(str(folder), run_dir)
    assert _left(folder) == {"notes.txt", "sub", "sub/counter_1.db"}


def test_a_symlink_inside_the_run_dir_is_not_followed(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "precious"
    _fill(outside)
    (run / "gateway").mkdir(parents=True)
    link = run / "gateway" / "prometheus-multiproc"
    link.symlink_to(outside)
    assert not is_stack_dir(str(link), str(run))
    reset_multiproc_dir(str(link), str(run))
    assert outside.is_dir() and "notes.txt" in _left(outside)


@pytest.mark.parametrize(
    "relative",
    [
        "run",
        "run/gateway",
        "run/gateway/metrics",
        "run/../prometheus-multiproc",
        "other/prometheus-multiproc",
    ],
)
def test_only_prometheus_multiproc_strictly_inside_counts(tmp_path: Path, relative: str) -> None:
    (tmp_path / "run").mkdir()
    assert not is_stack_dir(str(tmp_path / relative), str(tmp_path / "run"))
    assert is_stack_dir(str(tmp_path / "run/gateway/prometheus-multiproc"), str(tmp_path / "run"))


def test_gunicorn_conf_keeps_a_foreign_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "not-ours"
    _fill(folder)
    for name, value in {
        "ASIDE_PROFILE": "lab",
        "DATABASE_URL": "postgresql://aside@127.0.0.1:1/aside",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "CORE_URL": "http://127.0.0.1:1",
        "ASIDE_RUN_DIR": str(tmp_path / "run"),
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
    }.items():
        monkeypatch.setenv(name, value)
    conf = runpy.run_path(str(REPO / "gateway" / "gunicorn.conf.py"))
    conf["on_starting"](None)
    assert _left(folder) == {"notes.txt", "sub", "sub/counter_1.db"}
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(folder)
