"""aside-bench: Aside's load driver (k6), result reader (InfluxDB, Prometheus), report writer."""
