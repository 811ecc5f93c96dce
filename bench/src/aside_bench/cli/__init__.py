"""The command line: a module per command (or family), registered in app.py; the top layer."""

from aside_bench.cli.app import main

__all__ = ["main"]
