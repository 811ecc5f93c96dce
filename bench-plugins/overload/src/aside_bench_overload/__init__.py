"""`aside-bench overload`: goodput, latency, sheds and recovery past an arm's
ceiling (run.py; its figures and verdicts in figures.py, its page in report.py)."""
