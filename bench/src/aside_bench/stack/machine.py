"""What the figures were measured on; stated next to every table and chart."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psutil


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> dict[str, Any]:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = psutil.virtual_memory().total  # MemTotal
    return {
        "nproc": nproc,
        "memory_bytes": memory,
        "memory_gib": round(memory / 2**30, 1),
        "kernel": platform.release(),
        "cpu": _cpu_model(),
        "hostname": platform.node(),
        "note": f"the load driver shares the {nproc} cores with the services",
    }


def summary(machine: dict[str, Any]) -> str:
    """One line for captions: '2 cores, 23.4 GiB, Linux 6.1 — the load driver shares ...'."""
    return (
        f"{machine['nproc']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, "
        f"Linux {machine['kernel']}; {machine['note']}"
    )
