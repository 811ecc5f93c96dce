"""The native stack's processes as infra/stack.sh records them: which pid is which
service, its process tree, its memory and open file descriptors, and the ports it
listens on (the proof that a pid belongs to the stack we were pointed at).

Everything is read from /proc; nothing here changes a process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from aside_bench.stack import stacktable

PROC = Path("/proc")
# infra/services.sh ALL_SERVICES, in start order.
SERVICES = stacktable.names()
# TCP state LISTEN in /proc/net/tcp.
_LISTEN = "0A"


def _stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command's name (state, ppid, ...); None when gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    """True for a running process (not a zombie, not gone)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def recorded_pid(run_dir: Path, service: str) -> int | None:
    """The live pid infra/stack.sh recorded for `service`, else None. Like
    lib.sh's pid_of, a pid does not count unless its command line holds the
    recorded match (else the pid was recycled) and its environment holds
    ASIDE_RUN_DIR=`run_dir` (else it is another stack's process: the lab and
    the test stack run the same command lines)."""
    pid_file = run_dir / "pids" / f"{service}.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not _alive(pid):
        return None
    match_file = pid_file.with_name(pid_file.name + ".cmd")
    if match_file.exists():
        try:
            cmdline = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return None
        if match_file.read_text().strip() not in cmdline:
            return None
    return pid if environ_value(pid, "ASIDE_RUN_DIR") == str(run_dir) else None


def environ_value(pid: int, name: str) -> str | None:
    """The value of `name` in the environment `pid` started with; None when it
    is not set there or the environment cannot be read (another user's process)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = os.fsencode(name) + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return os.fsdecode(entry[len(prefix) :])
    return None


def parents() -> dict[int, int]:
    """pid -> parent pid of every running process."""
    result: dict[int, int] = {}
    for entry in PROC.iterdir():
        fields = _stat_fields(entry.name) if entry.name.isdigit() else None
        if fields is not None and fields[0] != "Z":
            result[int(entry.name)] = int(fields[1])
    return result


def children(pid: int, ppids: dict[int, int] | None = None) -> list[int]:
    ppids = parents() if ppids is None else ppids
    return sorted(child for child, parent in ppids.items() if parent == pid)


def tree(pid: int, ppids: dict[int, int] | None = None) -> list[int]:
    """`pid` and all its descendants (a gunicorn master and its workers, the
    postmaster and its backends)."""
    ppids = parents() if ppids is None else ppids
    found = [pid]
    index = 0
    while index < len(found):
        found += children(found[index], ppids)
        index += 1
    return found


def kib_field(path: Path, field: str) -> int | None:
    """The KiB a /proc file of `field: N kB` lines (status, meminfo) gives
    `field`; None when it cannot be read or has none."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_kib(pid: int) -> int | None:
    """VmRSS of one process in KiB (None once it is gone)."""
    return kib_field(PROC / str(pid) / "status", "VmRSS")


def anon_kib(pid: int) -> int | None:
    """RssAnon of one process in KiB: its private memory (heap, stacks), without
    the shared or file-backed pages that VmRSS also counts."""
    return kib_field(PROC / str(pid) / "status", "RssAnon")


def cpu_ticks(pid: int) -> int | None:
    """utime + stime + cutime + cstime of one process, in clock ticks (None once
    it is gone). The children's part holds the workers the process reaped, so a
    worker that exits between two readings of its tree is still counted."""
    fields = _stat_fields(pid)  # fields[0] is the state (field 3 of proc(5)); utime is field 14
    return None if fields is None else sum(int(value) for value in fields[11:15])


def tree_cpu_ticks(pid: int, ppids: dict[int, int] | None = None) -> int | None:
    """cpu_ticks summed over `pid`'s tree; None when `pid` is gone."""
    readings = [cpu_ticks(p) for p in tree(pid, ppids)]
    if readings[0] is None:
        return None
    return sum(r for r in readings if r is not None)


class RunQueue(NamedTuple):
    """Main threads' time runnable with no core free, summed over processes
    (/proc/<pid>/schedstat, in ns), and their turns on a core."""

    wait_ns: int
    turns: int
    pids: tuple[int, ...]  # the processes read


def run_queue(pids: list[int]) -> RunQueue | None:
    """The run-queue wait of each process's main thread (a gateway worker's
    event loop), summed; None when none of them could be read."""
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
    # Of busy: the hypervisor ran another guest on this machine's cores. A
    # virtual machine's noise, which no process here caused or can avoid.
    steal: int


def machine_ticks() -> MachineTicks | None:
    """The machine's ticks now; None when unreadable."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
        # user nice system idle iowait irq softirq steal (guest time is in user).
        ticks = [int(value) for value in first[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    total = sum(ticks)
    return MachineTicks(total - ticks[3] - ticks[4], total, ticks[7])


def clock_ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return None


@dataclass(frozen=True)
class TreeSample:
    """One reading of a process tree: memory and descriptors summed over it.
    VmRSS counts a shared page in every process that touched it (PostgreSQL's
    shared buffers once per backend); RssAnon is the private part only."""

    processes: int
    rss_kib: int
    anon_kib: int
    fds: int
    sockets: int  # of the fds: connections and listeners


def sample_tree(pid: int, ppids: dict[int, int] | None = None) -> TreeSample | None:
    """RSS and open fds summed over `pid`'s tree; None when `pid` is gone.
    Processes that exit while we read them are left out."""
    pids = tree(pid, ppids)
    readings = [(rss_kib(p), anon_kib(p), fd_count(p), len(_socket_inodes(p))) for p in pids]
    kept = [r for r in readings if None not in r]
    if not kept or readings[0][0] is None:
        return None
    rss, anon, fds, sockets = (sum(column) for column in zip(*kept, strict=True))
    return TreeSample(len(kept), rss, anon, fds, sockets)  # type: ignore[arg-type]


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _listening(lines: Iterable[str]) -> dict[str, int]:
    """inode -> port of the LISTEN sockets in /proc/net/tcp(6) lines."""
    found = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        port = int(fields[1].rsplit(":", 1)[1], 16)
        found[fields[9]] = port
    return found


def listening_ports(pid: int) -> set[int]:
    """TCP ports `pid` itself listens on."""
    table: dict[str, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            table |= _listening((PROC / "net" / name).read_text().splitlines()[1:])
        except OSError:
            continue
    return {table[inode] for inode in _socket_inodes(pid) if inode in table}
