"""What a run leaves: a step's results, tier statistics, repeats merged, the
load generator's saturation and the run's own record (run.json). Pure data and
pure functions: nothing here starts or reads a process."""
