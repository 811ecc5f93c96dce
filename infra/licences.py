"""Every dependency's licence, checked and listed (`make lint`, `make licences`).

The Python packages are those of the locked environment (.venv, installed from
uv.lock), read by pip-licenses; the Go packages are those core-go,
bench/driver and bench/proxy (toxiproxy's server) build, read by go-licenses.
Each licence is one of: permissive (allowed), copyleft (allowed only where
infra/licences.toml names the package, for that licence, with its reason),
forbidden (AGPL, SSPL, BUSL, anything not open source) or unknown (forbidden
too, unless infra/licences.toml gives the licence the package's own licence
file states). The inventory docs/licences.md is generated from the same readings.

usage: .venv/bin/python infra/licences.py [--write] [--python PY] [--go-licenses PATH]
  default  one line per package whose licence is not allowed, and one if
           docs/licences.md differs from what --write would write; exit 1 on either
  --write  the same check of the licences, then docs/licences.md written
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "infra" / "licences.toml"
INVENTORY = ROOT / "docs" / "licences.md"
GO_MODULES = ("core-go", "bench/driver", "bench/proxy")
# Aside's own: not dependencies (the bench's plug-in packages, bench-plugins/, too).
PLUG_INS = sorted(
    p.name for p in (ROOT / "bench-plugins").iterdir() if (p / "pyproject.toml").is_file()
)
OWN_PYTHON = (
    "aside",
    "aside-bench",
    "aside-gateway",
    "aside-seed",
    *(f"aside-bench-{p}" for p in PLUG_INS),
)

PERMISSIVE, COPYLEFT, UNKNOWN, FORBIDDEN = "permissive", "copyleft", "unknown", "forbidden"
# Worst last: a package under several licences at once (AND) is as its worst.
RANK = {PERMISSIVE: 0, COPYLEFT: 1, UNKNOWN: 2, FORBIDDEN: 3}

# SPDX identifiers of the permissive licences met so far; any other is judged below.
PERMISSIVE_IDS = frozenset(
    {
        "0BSD", "Apache-2.0", "BSD", "BSD-2-Clause", "BSD-3-Clause", "BSL-1.0", "CC0-1.0",
        "HPND", "ISC", "MIT", "MIT-0", "MIT-CMU", "PSF-2.0", "Python-2.0", "Unlicense",
        "UPL-1.0", "X11", "Zlib",
    }
)  # fmt: skip
COPYLEFT_ID = re.compile(r"^(L?GPL|MPL|EPL|CDDL|EUPL|OSL|CPL)(-|$)")
FORBIDDEN_ID = re.compile(r"^(AGPL|SSPL|BUSL|Elastic|Commons-Clause|Proprietary)(-|$)")
# Trove classifiers and loose names, as pip-licenses prints them, to SPDX.
NAMES = {
    "apache software license": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "bsd license": "BSD",
    "mit license": "MIT",
    "isc license (iscl)": "ISC",
    "python software foundation license": "PSF-2.0",
    "the unlicense (unlicense)": "Unlicense",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "gnu general public license v2 (gplv2)": "GPL-2.0-only",
    "gnu general public license v2 or later (gplv2+)": "GPL-2.0-or-later",
    "gnu general public license v3 (gplv3)": "GPL-3.0-only",
    "gnu general public license v3 or later (gplv3+)": "GPL-3.0-or-later",
    "gnu lesser general public license v3 (lgplv3)": "LGPL-3.0-only",
    "gnu lesser general public license v3 or later (lgplv3+)": "LGPL-3.0-or-later",
    "gnu affero general public license v3": "AGPL-3.0-only",
    "gnu affero general public license v3 or later (agplv3+)": "AGPL-3.0-or-later",
    "server side public license": "SSPL-1.0",
    "other/proprietary license": "Proprietary",
}
# Qualifiers a classifier list carries beside the licence itself.
NOT_A_LICENCE = frozenset({"dfsg approved", "osi approved"})
# go-licenses' report, a tab-separated line per package (its --template).
GO_TEMPLATE = "{{range .}}{{.Name}}\t{{.Version}}\t{{.LicenseName}}\n{{end}}"


@dataclass(frozen=True)
class Package:
    ecosystem: str  # "python" or "go"
    name: str
    version: str
    declared: str  # the licence as its metadata (Python) or licence file (Go) says
    used_by: str = ""  # Go: the modules that build it


@dataclass(frozen=True)
class Allowed:
    licence: str
    reason: str


@dataclass(frozen=True)
class Override:
    declared: str  # what the metadata says, for the override to apply
    licence: str
    reason: str


@dataclass(frozen=True)
class Policy:
    copyleft: dict[str, Allowed]
    overrides: dict[str, Override]


@dataclass(frozen=True)
class Verdict:
    package: Package
    licence: str  # SPDX-like, as judged
    kind: str
    allowed: bool
    why: str = ""  # when not allowed

    def line(self) -> str:
        return (
            f"aside: licence not allowed: {self.package.name} {self.package.version} ({self.why})"
        )


# ---- judging (pure) -----------------------------------------------------------------


def spdx(name: str) -> str | None:
    """One licence name as SPDX, or None for a qualifier that names no licence.
    A classifier's own parentheses ("(MPL 2.0)") are part of its name; an
    expression's are not."""
    lowered = name.strip().lower()
    if lowered in NOT_A_LICENCE:
        return None
    if lowered in NAMES:
        return NAMES[lowered]
    text = name.strip().strip("()").strip()
    return NAMES.get(text.lower(), text)


def kind_of(licence_id: str) -> str:
    if licence_id in PERMISSIVE_IDS:
        return PERMISSIVE
    if FORBIDDEN_ID.match(licence_id):
        return FORBIDDEN
    if COPYLEFT_ID.match(licence_id):
        return COPYLEFT
    return UNKNOWN


def _alternatives(term: str) -> list[str]:
    """A term's licences to choose from; a classifier's name ("... v3 or later
    (GPLv3+)") is one licence, not two."""
    if term.strip().lower() in NAMES:
        return [NAMES[term.strip().lower()]]
    found = [spdx(one) for one in re.split(r"\s+OR\s+", term, flags=re.IGNORECASE)]
    return [one for one in found if one]


def judge_expression(declared: str) -> tuple[str, str]:
    """(the licence as SPDX, its kind). Terms joined by AND or by pip-licenses'
    '; ' (several classifiers) all bind: the worst counts; of alternatives
    joined by OR the best does."""
    terms = [t for t in re.split(r"\s*;\s*|\s+AND\s+", declared, flags=re.IGNORECASE) if t]
    judged: list[tuple[str, str]] = []
    for term in terms:
        options = _alternatives(term)
        if options:
            best = min(options, key=lambda one: RANK[kind_of(one)])
            judged.append((" OR ".join(options), kind_of(best)))
    if not judged:
        return declared.strip() or "UNKNOWN", UNKNOWN
    text = " AND ".join(dict.fromkeys(licence for licence, _ in judged))
    return text, max((kind for _, kind in judged), key=RANK.__getitem__)


def judge(package: Package, policy: Policy) -> Verdict:
    override = policy.overrides.get(package.name)
    declared = package.declared
    if override is not None and override.declared == declared:
        declared = override.licence
    licence, kind = judge_expression(declared)
    if kind == PERMISSIVE:
        return Verdict(package, licence, kind, True)
    if kind == FORBIDDEN:
        return Verdict(package, licence, kind, False, licence)
    if kind == UNKNOWN:
        return Verdict(package, licence, kind, False, f"unknown: {package.declared!r}")
    allowed = policy.copyleft.get(package.name)
    if allowed is None:
        return Verdict(package, licence, kind, False, f"{licence}, copyleft not named in "
                       f"{POLICY.relative_to(ROOT)}")  # fmt: skip
    if allowed.licence != licence:
        return Verdict(package, licence, kind, False, f"{licence}, allowed only as "
                       f"{allowed.licence} by {POLICY.relative_to(ROOT)}")  # fmt: skip
    return Verdict(package, licence, kind, True)


def parse_policy(text: str) -> Policy:
    data = tomllib.loads(text)
    return Policy(
        copyleft={name: Allowed(**entry) for name, entry in data.get("copyleft", {}).items()},
        overrides={name: Override(**entry) for name, entry in data.get("override", {}).items()},
    )


# ---- the inventory (pure) -----------------------------------------------------------


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def inventory(verdicts: list[Verdict], policy: Policy) -> str:
    """docs/licences.md: the copyleft allowed and why, then every package."""
    python = sorted((v for v in verdicts if v.package.ecosystem == "python"), key=_order)
    go = sorted((v for v in verdicts if v.package.ecosystem == "go"), key=_order)
    lines = [
        "# Licences of Aside's dependencies",
        "",
        "Generated: do not edit. `make licences` writes it again (infra/licences.py) from",
        "the locked Python environment (.venv, installed from uv.lock; pip-licenses) and the",
        f"Go packages {', '.join(GO_MODULES)} build (go-licenses); `make lint` fails",
        "while it differs from what they give. Aside itself is Apache-2.0 (LICENSE); why,",
        "and what a licence must be:",
        "docs/decisions/055-apache-2-0-and-the-licence-check.md.",
        "",
        "## Copyleft, allowed by name (infra/licences.toml)",
        "",
        _row(["package", "licence", "why"]),
        "|---|---|---|",
        *(_row([name, one.licence, one.reason]) for name, one in sorted(policy.copyleft.items())),
        "",
        f"## Python ({len(python)} packages)",
        "",
        _row(["package", "version", "licence", "its metadata says"]),
        "|---|---|---|---|",
        *(_row([v.package.name, v.package.version, v.licence, v.package.declared]) for v in python),
        "",
        f"## Go ({len(go)} packages)",
        "",
        _row(["package", "version", "licence", "built into"]),
        "|---|---|---|---|",
        *(_row([v.package.name, v.package.version, v.licence, v.package.used_by]) for v in go),
    ]
    return "\n".join(lines) + "\n"


def _order(verdict: Verdict) -> tuple[str, str]:
    return verdict.package.name.lower(), verdict.package.version


# ---- reading the environments -------------------------------------------------------


class ReadError(Exception):
    """A licence tool failed or is missing; the message says how to get it."""


def _run(command: list[str], cwd: Path = ROOT) -> str:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as error:
        raise ReadError(f"{command[0]} not found ({error.strerror})") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise ReadError(f"{' '.join(command[:2])} failed in {cwd}: {tail}")
    return done.stdout


def python_packages(pip_licenses: Path, python: Path) -> list[Package]:
    """Every distribution the interpreter `python` sees, but Aside's own."""
    out = _run([str(pip_licenses), "--python", str(python), "--from=mixed", "--with-system",
                "--format=json", "--ignore-packages", *OWN_PYTHON])  # fmt: skip
    return [
        Package("python", row["Name"], row["Version"], row["License"]) for row in json.loads(out)
    ]


def _module_path(module: Path) -> str:
    found = re.search(r"^module\s+(\S+)", (module / "go.mod").read_text(), re.MULTILINE)
    if found is None:
        raise ReadError(f"{module}/go.mod names no module")
    return found.group(1)


def go_packages(go_licenses: Path) -> list[Package]:
    """Every package the Go modules build (tests left out), one row per
    package and version, with the modules that build it."""
    if not go_licenses.is_file():
        raise ReadError(f"{go_licenses} not found; build it: infra/install.sh licences")
    go_licenses = go_licenses.resolve()  # run from each module's folder
    used: dict[tuple[str, str, str], list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="aside-licences-") as folder:
        template = Path(folder) / "report.tpl"
        template.write_text(GO_TEMPLATE)
        for module in GO_MODULES:
            own = _module_path(ROOT / module)
            out = _run([str(go_licenses), "report", "./...", "--template", str(template),
                        "--ignore", own], cwd=ROOT / module)  # fmt: skip
            for line in filter(None, out.splitlines()):
                name, version, licence = line.split("\t")
                used.setdefault((name, version, licence), []).append(module)
    return [Package("go", n, v, lic, ", ".join(m)) for (n, v, lic), m in used.items()]


# ---- the command ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infra/licences.py", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write docs/licences.md")
    parser.add_argument(
        "--python",
        type=Path,
        default=ROOT / ".venv/bin/python",
        help="the environment whose packages are read (default .venv)",
    )
    parser.add_argument("--go-licenses", type=Path, default=ROOT / "bin/go-licenses")
    args = parser.parse_args(argv)
    policy = parse_policy(POLICY.read_text())
    try:
        packages = python_packages(Path(sys.executable).parent / "pip-licenses", args.python)
        packages += go_packages(args.go_licenses)
    except ReadError as error:
        print(f"aside: licences: {error}", file=sys.stderr)
        return 1
    verdicts = [judge(package, policy) for package in packages]
    refused = sorted((v for v in verdicts if not v.allowed), key=_order)
    for verdict in refused:
        print(verdict.line(), file=sys.stderr)
    text = inventory(verdicts, policy)
    if args.write:
        INVENTORY.write_text(text)
        print(f"{INVENTORY.relative_to(ROOT)}: {len(verdicts)} packages")
    elif not INVENTORY.is_file() or INVENTORY.read_text() != text:
        print(f"aside: {INVENTORY.relative_to(ROOT)} is out of date with the dependencies; "
              "regenerate it: make licences", file=sys.stderr)  # fmt: skip
        return 1
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
