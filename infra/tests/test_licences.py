"""The licence check's rules (infra/licences.py) on fixed packages: what fails,
what an allowlist entry lets through and only for its licence, how a
classifier list or an SPDX expression is read, and that the inventory is the
same whatever order the packages come in. The tools' readings are the check's
own run in `make lint`."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
from stack_helpers import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("licences", ROOT / "infra" / "licences.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lic = _load()
POLICY = lic.parse_policy(
    """
[copyleft.libcachesim]
licence = "GPL-3.0-or-later"
reason = "the curve"

[override.oddpkg]
declared = "UNKNOWN"
licence = "MIT"
reason = "its LICENSE file is MIT"
"""
)


def _python(name: str, declared: str, version: str = "1.0") -> object:
    return lic.Package("python", name, version, declared)


def test_an_agpl_package_fails_with_one_line_naming_it() -> None:
    verdict = lic.judge(_python("somepkg", "GNU Affero General Public License v3", "1.2"), POLICY)
    assert not verdict.allowed and verdict.kind == lic.FORBIDDEN
    assert verdict.line() == "aside: licence not allowed: somepkg 1.2 (AGPL-3.0-only)"


@pytest.mark.parametrize(
    "declared", ["SSPL-1.0", "BUSL-1.1", "Other/Proprietary License", "MIT AND AGPL-3.0-or-later"]
)
def test_sspl_busl_proprietary_and_an_agpl_part_fail(declared: str) -> None:
    verdict = lic.judge(_python("x", declared), POLICY)
    assert (verdict.allowed, verdict.kind) == (False, lic.FORBIDDEN)


def test_the_allowlisted_gpl_package_passes_and_no_other() -> None:
    gpl = "GNU General Public License v3 or later (GPLv3+)"
    assert lic.judge(_python("libcachesim", gpl, "0.3.5"), POLICY).allowed
    other = lic.judge(_python("otherlib", gpl), POLICY)
    assert not other.allowed and "copyleft not named in infra/licences.toml" in other.line()


def test_an_allowlist_entry_holds_only_for_its_licence() -> None:
    moved = lic.judge(_python("libcachesim", "AGPL-3.0-only"), POLICY)
    assert not moved.allowed and moved.why == "AGPL-3.0-only"
    changed = lic.judge(_python("libcachesim", "GPL-2.0-only"), POLICY)
    assert not changed.allowed and "allowed only as GPL-3.0-or-later" in changed.why


def test_an_unknown_licence_fails() -> None:
    verdict = lic.judge(_python("mystery", "UNKNOWN", "0.1"), POLICY)
    assert verdict.kind == lic.UNKNOWN
    assert verdict.line() == "aside: licence not allowed: mystery 0.1 (unknown: 'UNKNOWN')"
    assert not lic.judge(_python("homemade", "Free to use, no warranty"), POLICY).allowed


def test_an_override_applies_only_while_the_metadata_says_what_it_names() -> None:
    assert lic.judge(_python("oddpkg", "UNKNOWN"), POLICY).allowed
    assert not lic.judge(_python("oddpkg", "AGPL-3.0-only"), POLICY).allowed


@pytest.mark.parametrize(
    ("declared", "licence", "kind"),
    [
        ("Apache Software License; MIT License", "Apache-2.0 AND MIT", "permissive"),
        ("DFSG approved; MIT License", "MIT", "permissive"),
        ("MIT OR Apache-2.0", "MIT OR Apache-2.0", "permissive"),
        ("GPL-3.0-only OR MIT", "GPL-3.0-only OR MIT", "permissive"),
        ("MPL-2.0 AND MIT", "MPL-2.0 AND MIT", "copyleft"),
        ("LGPL-3.0-only", "LGPL-3.0-only", "copyleft"),
        ("Mozilla Public License 2.0 (MPL 2.0)", "MPL-2.0", "copyleft"),
        ("GNU General Public License v3 or later (GPLv3+)", "GPL-3.0-or-later", "copyleft"),
        (
            "(MIT OR Apache-2.0) AND BSD-3-Clause",
            "MIT OR Apache-2.0 AND BSD-3-Clause",
            "permissive",
        ),
        ("", "UNKNOWN", "unknown"),
    ],
)
def test_expressions_and_classifier_lists(declared: str, licence: str, kind: str) -> None:
    assert lic.judge_expression(declared) == (licence, kind)


def test_the_inventory_is_the_same_in_any_order() -> None:
    packages = [
        _python("zeta", "MIT", "2.0"),
        _python("Alpha", "BSD License", "1.0"),
        lic.Package("go", "golang.org/x/net", "v0.62.0", "BSD-3-Clause", "bench/driver"),
    ]
    verdicts = [lic.judge(one, POLICY) for one in packages]
    text = lic.inventory(verdicts, POLICY)
    assert text == lic.inventory(list(reversed(verdicts)), POLICY)
    assert text.index("| Alpha | 1.0 | BSD |") < text.index("| zeta | 2.0 | MIT |")
    assert "| golang.org/x/net | v0.62.0 | BSD-3-Clause | bench/driver |" in text
    assert "| libcachesim | GPL-3.0-or-later | the curve |" in text
    assert text.startswith("# Licences of Aside's dependencies\n\nGenerated: do not edit.")


def test_the_projects_policy_reads_and_names_the_gpl_dependency() -> None:
    policy = lic.parse_policy(lic.POLICY.read_text())
    assert policy.copyleft["libcachesim"].licence == "GPL-3.0-or-later"
    assert all(one.reason.strip() for one in policy.copyleft.values())
    assert all(lic.kind_of(one.licence.split()[0]) == lic.COPYLEFT
               for one in policy.copyleft.values())  # fmt: skip
