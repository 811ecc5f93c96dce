"""The sweep: each step prepared, driven, measured and collected into a StepResult."""
