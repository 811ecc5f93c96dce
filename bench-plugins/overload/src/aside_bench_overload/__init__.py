"""`aside-bench overload` past an arm's ceiling (run.py; verdicts: figures.py; page: report.py)."""
