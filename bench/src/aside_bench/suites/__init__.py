"""The suites: chaos (faults under load), hardening (slow clients, a cold
flood), soak (memory and descriptors under a steady load) and the create rate.
Each runs the driver beside something it does to the stack and checks the
requests the driver recorded; base.py is what they share (a suite's result, its
header, the names it runs)."""
