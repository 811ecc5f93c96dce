"""aside-bench's screenshot tool: a run's report.html as headless Chromium
renders it (Selenium, Pillow)."""
