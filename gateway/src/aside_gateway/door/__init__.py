"""Overload: where a worker refuses work past its capacity, and the signal it
goes by. The event loop's door (`loop_admission`), the thread pool's
admission, the bound on reads falling back to PostgreSQL, the loop's lateness."""
