"""README is the front door: every environment variable a part of Aside reads
is documented, in the root README or in that part's own README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from stack_helpers import ROOT

# Where each part reads its environment (the one place per service), and the
# pages that document its own variables (the bench's manual is its README and
# the pages under docs/bench/).
PARTS = {
    "stack": ([ROOT / "infra/env.sh"], []),
    "gateway": (
        [ROOT / "gateway/src/aside_gateway/config/settings.py", ROOT / "gateway/gunicorn.conf.py"],
        [ROOT / "gateway/README.md"],
    ),
    "core": (sorted((ROOT / "core-go/internal/config").glob("*.go")), [ROOT / "core-go/README.md"]),
    "seed": ([ROOT / "seed/src/aside_seed/config.py"], [ROOT / "seed/README.md"]),
    "bench": (
        [ROOT / "bench/src/aside_bench/stack/config.py"],
        [ROOT / "bench/README.md", *sorted((ROOT / "docs/bench").glob("*.md"))],
    ),
}
# Names that look like variables but are not read from the environment.
NOT_ENV = {"ASIDE_ROOT"}


def names_read(sources: list[Path]) -> set[str]:
    names: set[str] = set()
    for path in sources:
        text = path.read_text()
        if path.suffix == ".sh":
            names |= set(re.findall(r"^([A-Z][A-Z0-9_]+)=\$\{", text, re.M))
        else:
            names |= set(re.findall(r'"((?:ASIDE|CORE|GATEWAY|DB|REDIS|CACHE|LAB|PYTHON|'
                                    r'DATABASE|INFLUXDB|PROMETHEUS|WRITE|METRICS)[A-Z0-9_]*)"',
                                    text))  # fmt: skip
    return names - NOT_ENV


@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_variable_is_documented(part: str) -> None:
    sources, own_docs = PARTS[part]
    docs = "".join(path.read_text() for path in [ROOT / "README.md", *own_docs])
    read = names_read(sources)
    assert read, f"found no variables for {part}: is the config module where this test looks?"
    missing = sorted(n for n in read if f"`{n}`" not in docs)
    assert not missing, f"{part} reads undocumented variables: {missing}"


def test_shared_contract_variables_are_in_root_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("DATABASE_URL", "REDIS_URL", "CORE_URL", "INFLUXDB_URL", "PROMETHEUS_URL"):
        assert f"`{name}`" in readme


DRIVER_CONFIG = ROOT / "bench/driver/internal/config/config.go"
# Read by the driver but set by the runtime, not by the bench.
DRIVER_RUNTIME = {"GOGC", "JOB_COMPLETION_INDEX"}


def test_every_driver_variable_is_documented_and_known_to_the_bench() -> None:
    from aside_bench.load.run import DRIVER_VARIABLES

    read = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', DRIVER_CONFIG.read_text()))
    docs = (ROOT / "bench/driver/README.md").read_text()
    assert sorted(n for n in read if f"`{n}`" not in docs) == []
    # The bench keeps none of them from its own shell (loadrun.driver_env).
    assert read - DRIVER_RUNTIME == set(DRIVER_VARIABLES)


def test_readme_names_no_run() -> None:
    # Run ids (20261123-083159-read) belong to the dated pages under docs/results/.
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"\b20\d{6}-\d{6}(?:-[a-z]+)?\b", readme) == []
    assert len(readme.splitlines()) <= 300


def _words(text: str) -> str:
    return " ".join(text.split())


def readme_sample_answer() -> list[str]:
    """The answer README quotes under "A sample of the report": its blockquote's
    bullets, each joined back into one line."""
    section = (ROOT / "README.md").read_text().split("## A sample of the report", 1)[1]
    bullets: list[str] = []
    for line in section.split("\n## ", 1)[0].splitlines():
        if not line.startswith(">"):
            continue
        text = line[1:].strip()
        if text.startswith("- "):
            bullets.append(text[2:])
        elif bullets:
            bullets[-1] += " " + text
    return [_words(item) for item in bullets]


def sample_report_answer() -> list[str]:
    """docs/sample/report.md's answer: the bullets of its "## The answer", below
    the decision table it opens with."""
    report = (ROOT / "docs/sample/report.md").read_text()
    lines = report.split("## The answer", 1)[1].strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- "))
    bullets = []
    for line in lines[start:]:
        if not line.startswith("- "):
            break
        bullets.append(_words(line[2:]))
    return bullets


def test_readme_quotes_the_sample_reports_answer_verbatim() -> None:
    quoted, written = readme_sample_answer(), sample_report_answer()
    assert quoted, "README quotes no answer under 'A sample of the report'"
    assert quoted == written
