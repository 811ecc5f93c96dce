"""Headless Chromium for the pages' browser checks."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from aside_bench_screenshot import browser
from selenium.webdriver.remote.webdriver import WebDriver


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """Headless Chromium for the pages' browser checks; skipped where none is
    installed, unless this run installed one (ASIDE_REQUIRE_BROWSER=1)."""
    try:
        browser.find_browser()
    except browser.BrowserError as error:
        if os.environ.get("ASIDE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser was installed for this run: {error}")
        pytest.skip(str(error))
    with browser.chromium() as opened:
        yield opened
