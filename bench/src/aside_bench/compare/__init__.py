"""Two runs compared: their steps (steps.py), their machines (machines.py), the page (page.py)."""
