"""Times generate+COPY of the seeder's rows in each COPY format (not a test).

    DATABASE_URL=postgresql://aside@127.0.0.1:25432/scratch \\
        .venv/bin/python seed/tools/compare_copy_formats.py --rows 1000000 --reps 3

Formats run in turn, repetition by repetition, so a burst of load from other
processes hits them alike; the minimum is the figure to compare. Only the
table users_new is created and dropped (users is created if missing, as the
seeder does); use a scratch database anyway.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from aside_seed import loader
from aside_seed.config import load_config
from aside_seed.datagen import DataShape, RowMaker, build_parts, make_hot_emails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--formats", default="binary,text,rows")
    args = parser.parse_args()
    config = load_config()
    shape = DataShape(args.rows, 42, 100, 0.8)
    parts = build_parts(shape.seed)
    hot = make_hot_emails(parts, shape.seed, shape.hot_emails)
    formats = args.formats.split(",")
    wall: dict[str, list[float]] = {f: [] for f in formats}
    cpu: dict[str, list[float]] = {f: [] for f in formats}
    with loader.connect(config.database_url) as conn:
        loader.apply_schema(conn, config.schema_path.read_text())
        for _ in range(args.reps):
            for copy_format in formats:
                loader.drop_new_table(conn)
                started, cpu_started = time.perf_counter(), time.process_time()
                blocks = RowMaker(shape, parts, hot).blocks()
                loader.copy_blocks(conn, blocks, shape.rows, copy_format)
                wall[copy_format].append(time.perf_counter() - started)
                cpu[copy_format].append(time.process_time() - cpu_started)
        loader.drop_new_table(conn)
    print(f"{args.rows} rows, {args.reps} reps: wall s (min / median), client CPU s (min)")
    for copy_format in formats:
        print(
            f"  {copy_format:6s} {min(wall[copy_format]):6.2f} / "
            f"{statistics.median(wall[copy_format]):6.2f}   {min(cpu[copy_format]):6.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
