"""The machine's calibration: the driver against the core's and the gateway's /healthz."""
