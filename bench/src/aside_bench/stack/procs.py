"""The native stack's processes as infra/stack.sh records them, read, never changed."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple, TypeVar

import psutil

# bench/src/aside_bench/stack/procs.py -> the repository root
ROOT = Path(__file__).resolve().parents[4]
_COLUMNS = ("name", "ports", "url", "probe", "match")


class TableError(ValueError):
    pass


@dataclass(frozen=True)
class Service:
    name: str
    port_vars: tuple[str, ...]  # infra/env.sh variables; the first is the main port
    url: str  # with ${VAR} placeholders, as `make status` shows it once expanded
    probe: str  # "http PATH" or the kind of a probe_<kind> function of services.sh
    match: str  # a piece of the command line recorded with the pid

    @property
    def port_var(self) -> str:
        return self.port_vars[0]


def parse_services(text: str) -> tuple[Service, ...]:
    """The services of a table's text: comment lines (#) and the header skipped."""
    services = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if fields[0] == _COLUMNS[0]:  # the header
            continue
        if len(fields) != len(_COLUMNS) or not all(fields):
            raise TableError(f"infra/services.tsv line {number}: needs 5 tab-separated columns")
        name, ports, url, probe, match = fields
        services.append(Service(name, tuple(ports.split()), url, probe, match))
    if not services:
        raise TableError("infra/services.tsv lists no service")
    return tuple(services)


@cache
def services_table(root: Path = ROOT) -> tuple[Service, ...]:
    """The native stack's services as infra/services.tsv lists them, in start order."""
    return parse_services((root / "infra" / "services.tsv").read_text())


PROC = Path("/proc")
# infra/services.sh ALL_SERVICES, in start order.
SERVICES = tuple(service.name for service in services_table())
T = TypeVar("T")


def _read(read: Callable[[], T]) -> T | None:
    """`read()`, or None when psutil cannot (the process gone, or another user's)."""
    try:
        return read()
    except psutil.Error:
        return None


def _running(pid: int) -> psutil.Process | None:
    """The process `pid` unless it is gone or a zombie."""
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            return process
    except (psutil.Error, ValueError):  # ValueError: a negative pid
        pass
    return None


def recorded_pid(run_dir: Path, service: str) -> int | None:
    """The live pid recorded for `service` (its match and ASIDE_RUN_DIR=`run_dir`), else None."""
    pid_file = run_dir / "pids" / f"{service}.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    process = _running(pid)
    if process is None:
        return None
    match_file = pid_file.with_name(pid_file.name + ".cmd")
    if match_file.exists():
        cmdline = _read(process.cmdline)
        if cmdline is None or match_file.read_text().strip() not in " ".join(cmdline):
            return None
    return pid if environ_value(pid, "ASIDE_RUN_DIR") == str(run_dir) else None


def environ_value(pid: int, name: str) -> str | None:
    """`name` in the environment `pid` started with; None when not set or unreadable."""
    environ = _read(lambda: psutil.Process(pid).environ())
    return None if environ is None else environ.get(name)


def parents() -> dict[int, int]:
    """pid -> parent pid of every running process."""
    return {
        process.pid: process.info["ppid"]
        for process in psutil.process_iter(["ppid", "status"])
        if process.info["status"] not in (psutil.STATUS_ZOMBIE, None)
    }


def children(pid: int, ppids: dict[int, int] | None = None) -> list[int]:
    ppids = parents() if ppids is None else ppids
    return sorted(child for child, parent in ppids.items() if parent == pid)


def tree(pid: int, ppids: dict[int, int] | None = None) -> list[int]:
    """`pid` and all its descendants."""
    ppids = parents() if ppids is None else ppids
    found = [pid]
    for member in found:  # the loop reaches the children it appends
        found += children(member, ppids)
    return found


def _memory_kib(pid: int) -> tuple[int, int] | None:
    """VmRSS and RssAnon (rss less statm's shared) of one process in KiB; None once gone."""
    process = _running(pid)
    memory = None if process is None else _read(process.memory_info)
    if memory is None:
        return None
    return memory.rss // 1024, (memory.rss - memory.shared) // 1024


def rss_kib(pid: int) -> int | None:
    """VmRSS of one process in KiB (None once it is gone)."""
    memory = _memory_kib(pid)
    return None if memory is None else memory[0]


def cpu_ticks(pid: int) -> int | None:
    """utime + stime + cutime + cstime of a process in clock ticks; None once it is gone."""
    times = _read(lambda: psutil.Process(pid).cpu_times())
    if times is None:
        return None
    seconds = times.user + times.system + times.children_user + times.children_system
    return round(seconds * clock_ticks_per_s())  # psutil's seconds back into the kernel's ticks


def tree_cpu_ticks(pid: int, ppids: dict[int, int] | None = None) -> int | None:
    """cpu_ticks summed over `pid`'s tree; None when `pid` is gone."""
    readings = [cpu_ticks(p) for p in tree(pid, ppids)]
    return None if readings[0] is None else sum(r for r in readings if r is not None)


class RunQueue(NamedTuple):
    """Main threads' runnable time with no core free (schedstat, ns) and turns on a core."""

    wait_ns: int
    turns: int
    pids: tuple[int, ...]  # the processes read


def run_queue(pids: list[int]) -> RunQueue | None:
    """The main threads' run-queue wait, summed; None when none could be read."""
    wait = turns = 0
    read: list[int] = []
    for pid in pids:
        try:
            _, waited, ran = (PROC / str(pid) / "schedstat").read_text().split()[:3]
            wait, turns = wait + int(waited), turns + int(ran)
        except (OSError, ValueError):
            continue
        read.append(pid)
    return RunQueue(wait, turns, tuple(read)) if read else None


class MachineTicks(NamedTuple):
    """Clock ticks of every core since boot (/proc/stat's cpu line)."""

    busy: int  # all but idle and iowait
    total: int
    steal: int  # of busy: the hypervisor ran another guest on these cores


def machine_ticks() -> MachineTicks | None:
    """The machine's ticks now; None when unreadable."""
    try:
        times = psutil.cpu_times()  # in seconds: the ticks over the tick rate
    except OSError:
        return None
    # guest time is in user.
    busy = times.user + times.nice + times.system + times.irq + times.softirq + times.steal
    total = busy + times.idle + times.iowait
    per_s = clock_ticks_per_s()
    return MachineTicks(round(busy * per_s), round(total * per_s), round(times.steal * per_s))


def clock_ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def fd_count(pid: int) -> int | None:
    return _read(lambda: psutil.Process(pid).num_fds())


@dataclass(frozen=True)
class TreeSample:
    """A process tree's memory and descriptors summed (VmRSS counts shared pages in each)."""

    processes: int
    rss_kib: int
    anon_kib: int
    fds: int
    sockets: int  # of the fds: connections and listeners


def sample_tree(pid: int, ppids: dict[int, int] | None = None) -> TreeSample | None:
    """RSS and fds summed over `pid`'s tree; None when `pid` is gone."""
    kept: list[tuple[int, int, int, int]] = []
    for member in tree(pid, ppids):
        memory, fds = _memory_kib(member), fd_count(member)
        if memory is None or fds is None:
            if member == pid:
                return None
            continue
        kept.append((*memory, fds, _socket_count(member)))
    rss, anon, fds, sockets = (sum(column) for column in zip(*kept, strict=True))
    return TreeSample(len(kept), rss, anon, fds, sockets)


def _socket_count(pid: int) -> int:
    """The sockets among `pid`'s fds (psutil lists only inet and unix ones)."""
    sockets = set()
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(target)
    return len(sockets)


def listening_ports(pid: int) -> set[int]:
    """TCP ports `pid` itself listens on (IPv4 and IPv6)."""
    connections = _read(lambda: psutil.Process(pid).net_connections(kind="tcp")) or []
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
