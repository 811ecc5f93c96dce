"""Whether a figure can be trusted: the machine's calibration (how fast this
machine is today), compare (two runs' common steps, with the noise between
repeats) and the load driver's own cost against a plain net/http loop."""
