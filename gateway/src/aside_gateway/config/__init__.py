"""Settings (every environment variable), the Prometheus metrics and their
multiprocess folder. Nothing is imported here: gunicorn's master imports
`settings` and `multiproc` before prometheus-client may be."""
