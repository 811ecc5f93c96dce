"""Emptying PROMETHEUS_MULTIPROC_DIR at the gateway's start, without deleting
what is not ours.

The master runs this as whatever user gunicorn runs as (root, for a stack of
an older version or a hand-started gateway), and the folder comes from the
environment: a typo or a symlink must not remove someone's folder. Only the
native stack's own folder, `prometheus-multiproc` inside ASIDE_RUN_DIR, is
removed and made again; anywhere else only prometheus-client's metric files
(`<kind>_<pid>.db`, directly inside) are removed.

No prometheus-client import here: gunicorn.conf.py calls this before the
directory is settled.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

EXPECTED_NAME = "prometheus-multiproc"
_METRIC_FILE = re.compile(r"[a-z_]+_\d+\.db")


def is_stack_dir(path: str, run_dir: str | None) -> bool:
    """`path` is a folder named prometheus-multiproc strictly inside run_dir, with
    no symlink on the way (resolved paths compared)."""
    if not run_dir:
        return False
    given = Path(path)
    if given.name != EXPECTED_NAME or given.is_symlink():
        return False
    real, root = given.resolve(), Path(run_dir).resolve()
    return real.name == EXPECTED_NAME and root in real.parents


def reset_multiproc_dir(path: str, run_dir: str | None) -> None:
    """Leave `path` an existing folder with no metric file of an earlier run."""
    if is_stack_dir(path, run_dir):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(path, exist_ok=True)
    for entry in os.scandir(path):
        if _METRIC_FILE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
