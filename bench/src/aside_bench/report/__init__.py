"""The reports: markdown and HTML pages (doc.py), tables, matplotlib charts,
the sweep's report, the interference report, merged shards and the browser
check of report.html."""
