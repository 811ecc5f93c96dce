"""The hardening suite: slow clients and a cold flood beside cached reads."""
