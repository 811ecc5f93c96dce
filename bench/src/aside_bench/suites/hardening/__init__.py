"""The hardening suite: slow clients (slow heads and bodies) and a cold flood
beside cached reads; the cached reads must keep their latency and memory
stays bounded."""
