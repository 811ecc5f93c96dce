"""A report as a reader's browser shows it: report.html opened in headless
Chromium (Debian's chromium, driven through WebDriver by Debian's
chromium-driver, which is built from the same source, so the two always match).
What it rendered of every table and chart, and a screenshot of it: the
report's browser tests, and `make screenshot RUN=<id>` (this file run as a
script: docs/report-screenshot.png, the root README's picture)."""

from __future__ import annotations

import argparse
import base64
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"
# report.html is one local file with its images inline: loading it takes well under a second.
LOAD_TIMEOUT_S = 30
WIDTH = 1280
WINDOW_HEIGHT = 900

# Every table with the heading before it, and every image as decoded. A PNG
# cut short or damaged past its header still gets a naturalWidth (Chromium
# draws what it could read), but no bitmap: createImageBitmap decodes it whole.
_INSPECT = """
const done = arguments[arguments.length - 1];
const tables = Array.from(document.querySelectorAll('table')).map(t => {
  const h = t.previousElementSibling;
  return {
    title: h && /^H[1-6]$/.test(h.tagName) ? h.textContent.trim() : '',
    columns: t.querySelectorAll('thead th').length,
    rows: t.querySelectorAll('tbody tr').length,
    visible: t.getBoundingClientRect().height > 0,
  };
});
const decode = async i => {
  const image = {alt: i.alt, complete: i.complete, width: i.naturalWidth,
                 height: i.naturalHeight, error: ''};
  try { (await createImageBitmap(i)).close(); } catch (e) { image.error = String(e); }
  return image;
};
Promise.all(Array.from(document.images).map(decode)).then(images => done(
  {title: document.title, tables, images, height: document.documentElement.scrollHeight}));
"""
# The page's width, and where a screenshot through arguments[0] ends.
_EXTENT = """
const doc = document.documentElement;
const until = arguments[0] ? document.querySelector(arguments[0]) : null;
const end = until ? until.getBoundingClientRect().bottom + window.scrollY + 16 : doc.scrollHeight;
return {width: doc.scrollWidth, bottom: Math.ceil(Math.min(end, doc.scrollHeight))};
"""
_LOADED = """
return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete);
"""


class BrowserError(Exception):
    """Chromium is not installed, or did not open or render the report."""


@dataclass(frozen=True)
class RenderedTable:
    title: str
    columns: int
    rows: int
    visible: bool


@dataclass(frozen=True)
class RenderedImage:
    alt: str
    complete: bool
    width: int  # naturalWidth: 0 when not even the header decoded
    height: int
    error: str  # why its pixels did not decode, or ''

    @property
    def decoded(self) -> bool:
        return self.complete and self.width > 0 and self.height > 0 and not self.error


@dataclass(frozen=True)
class RenderedReport:
    title: str
    tables: list[RenderedTable]
    images: list[RenderedImage]
    height: int

    def problems(self) -> list[str]:
        """What a reader would find missing or broken; empty when all is well."""
        found = [f"image '{i.alt}' did not decode" for i in self.images if not i.decoded]
        found += [f"table '{t.title}' is not shown" for t in self.tables if not t.visible]
        found += [f"table '{t.title}' has no rows" for t in self.tables if t.rows == 0]
        return found


def find_browser() -> tuple[str, str]:
    """The paths of chromium and chromedriver, or BrowserError saying how to get them."""
    found = {name: shutil.which(name) for name in (CHROMIUM, CHROMEDRIVER)}
    missing = [name for name, path in found.items() if not path]
    if missing:
        raise BrowserError(
            f"{' and '.join(missing)} not found; install with `infra/install.sh browser`"
        )
    return str(found[CHROMIUM]), str(found[CHROMEDRIVER])


@contextmanager
def chromium(width: int = WIDTH) -> Iterator[WebDriver]:
    """A headless Chromium, quit on exit. A Service path keeps Selenium from
    looking for a driver to download."""
    binary, driver_path = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # its sandbox refuses to run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",  # a small /dev/shm crashes renderers
        "--hide-scrollbars",
        f"--window-size={width},{WINDOW_HEIGHT}",
    ):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
    except WebDriverException as error:
        raise BrowserError(f"chromium did not start: {error.msg}") from error
    try:
        driver.set_page_load_timeout(LOAD_TIMEOUT_S)
        driver.set_script_timeout(LOAD_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()


def render(driver: WebDriver, html_path: Path) -> RenderedReport:
    """Open html_path and wait until the page and every image have loaded."""
    if not html_path.is_file():
        raise BrowserError(f"no report at {html_path}")
    try:
        driver.get(html_path.resolve().as_uri())
        WebDriverWait(driver, LOAD_TIMEOUT_S, poll_frequency=0.05).until(
            lambda d: d.execute_script(_LOADED)
        )
        found: dict[str, Any] = driver.execute_async_script(_INSPECT)
    except TimeoutException as error:
        raise BrowserError(f"{html_path} did not load within {LOAD_TIMEOUT_S} s") from error
    except WebDriverException as error:
        raise BrowserError(f"chromium could not render {html_path}: {error.msg}") from error
    return RenderedReport(
        title=found["title"],
        tables=[RenderedTable(**t) for t in found["tables"]],
        images=[RenderedImage(**i) for i in found["images"]],
        height=int(found["height"]),
    )


def screenshot(driver: WebDriver, out: Path, through: str | None = None) -> Path:
    """The rendered page as a PNG, from its top to the bottom of the first element
    matching the CSS selector `through` (the whole page without one, or when
    nothing matches): Chromium's own capture, beyond the window if need be."""
    page: dict[str, Any] = driver.execute_script(_EXTENT, through)
    clip = {"x": 0, "y": 0, "width": page["width"], "height": page["bottom"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


def shrink(png: Path, colors: int = 256) -> Path:
    """Re-encode png with a palette of `colors`: a report is text, rules and a
    few line colours, so it looks the same at about a third of the size."""
    with Image.open(png) as image:
        palette = image.convert("RGB").quantize(colors, dither=Image.Dither.NONE)
    palette.save(png, format="PNG", optimize=True)
    return png


def main(argv: list[str] | None = None) -> int:
    """Check reports/<run>/report.html in headless Chromium and save a PNG of it:
    exit 2 for a run not given or without a report, 1 for a page that is broken."""
    from aside_bench.stack import config

    parser = argparse.ArgumentParser(prog="screenshot", description=main.__doc__)
    parser.add_argument("--run", default="", help="the run id (a folder of reports/)")
    parser.add_argument("--reports-dir", type=Path, help="default: the repository's reports/")
    parser.add_argument("--out", type=Path, help="the PNG (default docs/report-screenshot.png)")
    parser.add_argument("--width", type=int, default=WIDTH, help="window width, CSS px")
    parser.add_argument("--full", action="store_true", help="the whole page, not to a chart")
    args = parser.parse_args(argv)
    settings = config.load()
    page = (args.reports_dir or settings.default_reports_dir) / args.run / "report.html"
    if not args.run or not page.is_file():
        why = "give the run id: make screenshot RUN=<id>" if not args.run else "no report.html"
        print(f"screenshot: {why} ({page.parent})", file=sys.stderr)
        return 2
    out = args.out or settings.root / "docs" / "report-screenshot.png"
    try:
        with chromium(args.width) as driver:
            shown = render(driver, page)
            problems = shown.problems() or ([] if shown.tables else ["it shows no table"])
            if problems:
                raise BrowserError(f"{page}: {'; '.join(problems)}")
            screenshot(driver, out, through=None if args.full else "img")
    except BrowserError as error:
        print(f"screenshot: {error}", file=sys.stderr)
        return 1
    shrink(out)
    print(f"{page}: {len(shown.tables)} tables, {len(shown.images)} charts, all shown; "
          f"screenshot: {out} ({out.stat().st_size // 1024} KiB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
