"""The command line: the parser of every command (parser.py) and what each
command does once its arguments are parsed (commands.py, suites.py). The top
layer: it may import every other subpackage, none imports it."""

from aside_bench.cli.parser import main

__all__ = ["main"]
