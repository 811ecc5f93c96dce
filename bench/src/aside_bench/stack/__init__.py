"""The stack seen from the bench: settings, services, processes, sources, seed, machine."""
