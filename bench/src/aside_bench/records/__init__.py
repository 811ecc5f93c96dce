"""What a run leaves (run.json, results, tier figures, repeats): pure data and functions."""
