"""aside-bench: Aside's bench: runs the load driver (aside-load) step by step,
reads its summaries and Prometheus, writes the reports."""
