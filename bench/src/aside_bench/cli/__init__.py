"""The command line: one module per command (or family of commands), each
holding its options and what it does once they are parsed, registered in
app.py's COMMANDS. The top layer: it may import every other subpackage, none
imports it."""

from aside_bench.cli.app import main

__all__ = ["main"]
