"""The suites: chaos, hardening, overload, soak and create-rate (docs/bench/suites.md);
base.py is what they share."""
