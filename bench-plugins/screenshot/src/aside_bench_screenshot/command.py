"""`aside-bench screenshot`: a run's report.html as headless Chromium renders
it, checked (every table and chart shown) and saved as a PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aside_bench.cli import options as opt
from aside_bench.cli.options import Command, UsageError
from aside_bench.cli.reading import add_run_choice
from aside_bench.stack import config


def add_screenshot(shot: argparse.ArgumentParser) -> None:
    add_run_choice(shot)
    shot.add_argument(
        "--out", type=Path, help="the PNG to write (default docs/report-screenshot.png)"
    )
    shot.add_argument(
        "--full", action="store_true", help="the whole page (default: down to the first chart)"
    )
    opt.option(shot, "--width", opt.positive, 1280, "window width, CSS px")


def run_screenshot(args: argparse.Namespace, settings: config.Settings) -> int:
    from aside_bench_screenshot import browser  # Selenium and Pillow: only when it runs

    run_dir = opt.known_run(
        args.reports_dir or settings.default_reports_dir, args.run, "screenshot"
    )
    page = run_dir / "report.html"
    if not page.is_file():
        raise UsageError(f"no report.html in {run_dir}")
    out = args.out or settings.root / "docs" / "report-screenshot.png"
    try:
        with browser.chromium(args.width) as driver:
            shown = browser.render(driver, page)
            problems = shown.problems() or ([] if shown.tables else ["it shows no table"])
            if problems:
                print(f"aside-bench: {page}: {'; '.join(problems)}", file=sys.stderr)
                return 1
            browser.screenshot(driver, out, through=None if args.full else "img")
    except browser.BrowserError as error:
        print(f"aside-bench: {error}", file=sys.stderr)
        return 1
    browser.shrink(out)
    print(
        f"{page}: {len(shown.tables)} tables, {len(shown.images)} charts, all shown; "
        f"screenshot: {out} ({out.stat().st_size // 1024} KiB)"
    )
    return 0


SCREENSHOT_HELP = "check reports/<run>/report.html in headless Chromium, save a PNG"
COMMANDS = (Command("screenshot", SCREENSHOT_HELP, add_screenshot, run_screenshot),)
