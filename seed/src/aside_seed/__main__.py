"""aside-seed: load the users every benchmark runs on (see seed/README.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from aside_seed.cli import parse_options
from aside_seed.config import load_config
from aside_seed.errors import SeedError, UsageError


def main(argv: Sequence[str] | None = None) -> None:
    try:
        options = parse_options(argv)
        config = load_config()
        # Imported late so --help and argument errors do not pay for numpy/Faker.
        from aside_seed.seeder import run

        summary = run(options, config)
    except UsageError as exc:
        _fail(str(exc), 2)
    except SeedError as exc:
        _fail(str(exc), 1)
    except KeyboardInterrupt:
        _fail("interrupted; the previous data is unchanged", 130)
    phases = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in summary.phases.items())
    print(f"aside-seed: {phases}", file=sys.stderr)
    print(
        f"aside-seed: {summary.rows} rows in {summary.seconds:.2f} s "
        f"({summary.rows_per_second:,.0f} rows/s)"
    )


def _fail(message: str, status: int) -> None:
    print(f"aside-seed: {message}", file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
