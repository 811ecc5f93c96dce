"""The native stack's services as infra/services.tsv lists them, in start order."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

# bench/src/aside_bench/stacktable.py -> the repository root
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


def parse(text: str) -> tuple[Service, ...]:
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
def read(root: Path = ROOT) -> tuple[Service, ...]:
    return parse((root / "infra" / "services.tsv").read_text())


def names(root: Path = ROOT) -> tuple[str, ...]:
    """Every service, in start order (infra/services.sh's ALL_SERVICES)."""
    return tuple(service.name for service in read(root))
