"""Two runs (or baselines) compared: their common steps flagged against the
noise between repeats (steps.py), whether their machines are alike (machines.py),
and the page that overlays them (page.py)."""
