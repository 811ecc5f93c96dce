"""The backends besides PostgreSQL: the core (writes, Go compute) and Python's
compute engine, the Redis clients, how they fail, and the breaker in front of
Redis."""
