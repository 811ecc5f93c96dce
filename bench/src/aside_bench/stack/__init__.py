"""The stack seen from the bench: its settings, its services and processes,
the sources (Prometheus, InfluxDB), the seeded data and the machine."""
