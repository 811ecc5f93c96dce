"""The reports: Markdown and HTML pages, tables, charts and the sweep's report."""
