"""The load driver seen from Python: starting aside-load for a step and reading
its summary (run.py), its per-request samples file and the meter (its CPU per
request as a measure of the machine's speed)."""
