"""The machine's calibration before the steps: the driver against the core's
and the gateway's /healthz, searched as the ceiling is."""
