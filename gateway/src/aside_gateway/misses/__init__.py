"""The miss path below the cache: one flight per key (threads and the event
loop), one scan per batch of missed counts, and the reads of PostgreSQL."""
