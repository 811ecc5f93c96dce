"""The chaos suite: a fault at a time (Redis, PostgreSQL, the core, a worker
killed) under load; which answers were allowed and how fast the stack
recovered."""
