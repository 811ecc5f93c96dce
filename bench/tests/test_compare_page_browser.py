"""compare.html as headless Chromium shows it: every chart and the table
(skipped only where Chromium is not installed; make test installs it)."""

from __future__ import annotations

from pathlib import Path

import browser
from report_samples import compare_page
from selenium.webdriver.remote.webdriver import WebDriver

CHARTS = ["compare cost", "compare drop rate", "compare p95"]


def test_the_page_renders_every_chart_and_the_table(tmp_path: Path, driver: WebDriver) -> None:
    shown = browser.render(driver, compare_page(tmp_path))
    assert shown.title == "Compare a -> b"
    assert sorted(image.alt for image in shown.images) == CHARTS
    assert all(image.decoded and image.width > 400 for image in shown.images)
    (table,) = shown.tables
    assert table.visible and table.rows == 4
    assert shown.problems() == []
