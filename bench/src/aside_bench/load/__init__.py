"""The load driver seen from Python: its runs, summary, samples file and the meter."""
