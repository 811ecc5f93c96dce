"""report.html as a reader sees it: built from made-up results (no load), opened
in headless Chromium, every table and chart checked as rendered, a screenshot
saved. Skipped only where Chromium is not installed (make test installs it)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import browser
import pytest
from aside_bench.report import charts
from aside_bench.report import sweep as report
from aside_bench.report.tables import Table
from bench_helpers import bench_env
from report_samples import RESULTS, sample_run
from selenium.webdriver.remote.webdriver import WebDriver

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# report.html, its tables, the alt text of each chart it drew
SampleReport = tuple[Path, list[Table], list[str]]


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> SampleReport:
    """One report for the tests that do not damage it (drawing takes seconds)."""
    out_dir = tmp_path_factory.mktemp("report")
    return out_dir / "report.html", *_write_report(out_dir)


def _write_report(out_dir: Path) -> tuple[list[Table], list[str]]:
    """The report's tables, and the alt text of each chart it drew."""
    tables = report.write_sweep(sample_run(), RESULTS, out_dir)
    drawn = sorted(path.stem.replace("_", " ") for path in out_dir.glob("*.png"))
    return tables, drawn


def _assert_shows(shown: browser.RenderedReport, tables: list[Table], drawn: list[str]) -> None:
    """Every table with its title, columns and rows, every chart decoded."""
    assert [t.title for t in shown.tables] == [t.title for t in tables]
    for got, want in zip(shown.tables, tables, strict=True):
        assert got.visible, f"table '{want.title}' is not shown"
        assert (got.columns, got.rows) == (len(want.headers), len(want.rows)), want.title
    assert sorted(image.alt for image in shown.images) == drawn
    for image in shown.images:
        assert image.decoded, f"chart '{image.alt}' did not decode"
    assert shown.problems() == []


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def test_every_table_and_chart_renders(
    sample_report: SampleReport, tmp_path: Path, driver: WebDriver
) -> None:
    page, tables, drawn = sample_report
    assert len(tables) >= 3 and len(drawn) == 5
    shown = browser.render(driver, page)
    assert shown.title == f"Aside bench {sample_run().run_id}"
    _assert_shows(shown, tables, drawn)
    assert all(image.width > 400 for image in shown.images)

    whole = browser.screenshot(driver, tmp_path / "screenshot.png")
    width, height = _png_size(whole)
    assert width == browser.WIDTH and height == shown.height
    top = browser.screenshot(driver, tmp_path / "top.png", through="img")
    assert _png_size(top)[1] < height


def _no_header(png: bytes) -> bytes:
    return png[:8] + bytes(32) + png[40:]  # IHDR zeroed: not even a size to show


def _cut_short(png: bytes) -> bytes:
    return png[: len(png) // 2]  # a size, half the pixels: naturalWidth alone misses it


def _corrupting(
    draw: Callable[..., list[Path]], damage: Callable[[bytes], bytes]
) -> Callable[..., list[Path]]:
    """sweep_charts, with the first chart it drew damaged before the page embeds it."""

    def draw_then_damage(*args: object) -> list[Path]:
        paths = draw(*args)
        paths[0].write_bytes(damage(paths[0].read_bytes()))
        return paths

    return draw_then_damage


@pytest.mark.parametrize("damage", [_no_header, _cut_short])
def test_a_corrupt_chart_fails_the_check(
    damage: Callable[[bytes], bytes],
    tmp_path: Path,
    driver: WebDriver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(charts, "sweep_charts", _corrupting(charts.sweep_charts, damage))
    tables, drawn = _write_report(tmp_path)
    shown = browser.render(driver, tmp_path / "report.html")
    with pytest.raises(AssertionError, match="did not decode"):
        _assert_shows(shown, tables, drawn)
    assert [image.alt for image in shown.images if not image.decoded] == ["latency"]
    assert shown.problems() == ["image 'latency' did not decode"]


def test_a_missing_table_fails_the_check(
    sample_report: SampleReport, tmp_path: Path, driver: WebDriver
) -> None:
    whole, tables, drawn = sample_report
    page = tmp_path / "report.html"
    # Drop the second table (its heading stays): as if a section forgot to write it.
    html = whole.read_text()
    spans = [m.span() for m in re.finditer(r"<table>.*?</table>", html, re.S)]
    page.write_text(html[: spans[1][0]] + html[spans[1][1] :])
    shown = browser.render(driver, page)
    assert len(shown.tables) == len(tables) - 1
    with pytest.raises(AssertionError):
        _assert_shows(shown, tables, drawn)


def test_a_missing_report_is_one_clear_error(tmp_path: Path, driver: WebDriver) -> None:
    with pytest.raises(browser.BrowserError, match="no report at"):
        browser.render(driver, tmp_path / "report.html")


# ---- make screenshot RUN=<id> (browser.py as a script) ------------------------------
def _screenshot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, browser.__file__, *args], env=bench_env(),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _sample_run_dir(reports_dir: Path, sample_report: SampleReport) -> str:
    run_id = sample_run().run_id
    shutil.copytree(sample_report[0].parent, reports_dir / run_id)
    return run_id


def test_screenshot_command_checks_the_report_and_saves_a_png(
    sample_report: SampleReport, tmp_path: Path, driver: WebDriver
) -> None:
    run_id = _sample_run_dir(tmp_path / "reports", sample_report)
    out = tmp_path / "shot.png"
    done = _screenshot("--run", run_id, "--reports-dir", str(tmp_path / "reports"),
                 "--out", str(out), "--width", "1000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "4 tables, 5 charts, all shown" in done.stdout
    width, height = _png_size(out)
    full = browser.render(driver, sample_report[0]).height  # at the fixture's 1280 px
    assert width == 1000 and 0 < height < full  # down to the first chart, not the page


def test_screenshot_command_refuses_a_broken_report(
    sample_report: SampleReport, tmp_path: Path, driver: WebDriver
) -> None:
    reports = tmp_path / "reports"
    run_id = _sample_run_dir(reports, sample_report)
    page = reports / run_id / "report.html"
    page.write_text(page.read_text().replace("base64,iVBORw0KGgo", "base64,AAAAAAAAAA", 1))
    out = tmp_path / "shot.png"
    done = _screenshot("--run", run_id, "--reports-dir", str(reports), "--out", str(out))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"screenshot: {page}: image 'latency' did not decode"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "give the run id: make screenshot RUN=<id>"), (["--run", "nope"], "no report.html")],
)
def test_screenshot_command_bad_arguments(args: list[str], message: str, tmp_path: Path) -> None:
    done = _screenshot(*args, "--reports-dir", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
