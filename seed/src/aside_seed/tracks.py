"""GPS tracks, seeded beside the users: random walks at running pace around
Berlin, most of them a few hundred points long, a tail up to 50,000.

Each track depends only on (seed, its number), so the same seed gives the
same tracks whatever their count. Paths are written as the compact JSON text
the gateway serves (`[[lon,lat],...]`, six decimals), built a whole track at
a time with numpy: Berlin's coordinates all have two integer digits, so every
number is nine characters and a path is fixed-width text.

The table is loaded as `tracks_new` under the seeder's write gate, in one
transaction with COPY FREEZE, and swapped in by the same transaction as the
users (`swap_in`), so readers see old users with old tracks or new with new;
the cache flush that follows covers the `aside:v1:{track:` keys like any other.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql
from tqdm import tqdm

from aside_seed.keyfiles import write_json
from aside_seed.loader import replace_table

TABLE = "tracks"
NEW_TABLE = "tracks_new"
PKEY = "tracks_pkey"
NEW_PKEY = "tracks_new_pkey"
TRACKS_FILE = "tracks.json"
# A stream of numpy's seeded generator of its own, apart from the users'.
STREAM = 0x7AC5

CENTRE_LON, CENTRE_LAT = 13.405, 52.52
START_RADIUS_M = 6000.0
# Every point stays inside this box: two integer digits on both axes.
LON_RANGE = (12.5, 14.3)
LAT_RANGE = (51.7, 53.3)
METRES_PER_DEGREE = 111_320.0
MICRO = 1_000_000
SAMPLE_S = 1.0  # one fix a second, as a running watch records

MIN_POINTS, MAX_POINTS = 60, 50_000
# Size mix: most tracks are a run of a few minutes to an hour; some are
# long; a few are day-long (up to MAX_POINTS).
SHORT_SHARE, LONG_SHARE = 0.80, 0.15  # the rest: the tail
SHORT_MEDIAN, SHORT_SIGMA = 300, 0.5
LONG_RANGE = (1_000, 10_000)
TAIL_RANGE = (10_000, MAX_POINTS)

SESSIONS = ("Morning", "Lunch", "Evening", "Night", "Long", "Easy", "Tempo", "Recovery")
DISTRICTS = (
    "Mitte", "Kreuzberg", "Friedrichshain", "Prenzlauer Berg", "Neukölln", "Schöneberg",
    "Charlottenburg", "Tempelhof", "Wedding", "Moabit", "Treptow", "Köpenick", "Pankow",
    "Spandau", "Steglitz", "Lichtenberg",
)  # fmt: skip


@dataclass(frozen=True)
class Track:
    id: int
    name: str
    distance_m: int
    path: bytes  # the JSON text

    @property
    def points(self) -> int:
        return (len(self.path) + 1 - 2) // 22  # "[" + 21 bytes a point + "," between + "]"


def _rng(seed: int, number: int) -> np.random.Generator:
    return np.random.default_rng([seed, STREAM, number])


def point_count(rng: np.random.Generator) -> int:
    u = rng.random()
    if u < SHORT_SHARE:
        n = rng.lognormal(math.log(SHORT_MEDIAN), SHORT_SIGMA)
    elif u < SHORT_SHARE + LONG_SHARE:
        n = math.exp(rng.uniform(*map(math.log, LONG_RANGE)))
    else:
        n = math.exp(rng.uniform(*map(math.log, TAIL_RANGE)))
    return int(min(max(round(n), MIN_POINTS), MAX_POINTS))


def walk(rng: np.random.Generator, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Longitude and latitude in micro-degrees: a run at a steady pace with a
    slowly wandering heading, a sharper turn now and then, and GPS jitter."""
    pace = float(np.clip(rng.normal(3.0, 0.4), 2.2, 4.5))  # metres a second
    steps = pace * SAMPLE_S * rng.uniform(0.9, 1.1, points - 1)
    turns = rng.normal(0.0, 0.06, points - 1)
    turns += np.where(rng.random(points - 1) < 0.004, rng.normal(0.0, 1.2, points - 1), 0.0)
    heading = rng.uniform(0, 2 * math.pi) + np.cumsum(turns)
    east = np.concatenate(([0.0], np.cumsum(steps * np.cos(heading))))
    north = np.concatenate(([0.0], np.cumsum(steps * np.sin(heading))))
    angle, radius = rng.uniform(0, 2 * math.pi), START_RADIUS_M * math.sqrt(rng.random())
    east += radius * math.cos(angle) + rng.normal(0.0, 1.5, points)
    north += radius * math.sin(angle) + rng.normal(0.0, 1.5, points)
    lat = CENTRE_LAT + north / METRES_PER_DEGREE
    lon = CENTRE_LON + east / (METRES_PER_DEGREE * math.cos(math.radians(CENTRE_LAT)))
    lon = np.clip(lon, *LON_RANGE)
    lat = np.clip(lat, *LAT_RANGE)
    return np.rint(lon * MICRO).astype(np.int64), np.rint(lat * MICRO).astype(np.int64)


# Columns of each point's 21 bytes `[dd.dddddd,dd.dddddd]` that hold digits,
# most significant first, for the longitude and the latitude.
_LON_COLUMNS = (1, 2, 4, 5, 6, 7, 8, 9)
_LAT_COLUMNS = (11, 12, 14, 15, 16, 17, 18, 19)
_TEMPLATE = np.frombuffer(b"[00.000000,00.000000],", dtype=np.uint8)


def _put_digits(rows: np.ndarray, values: np.ndarray, columns: tuple[int, ...]) -> None:
    rest = values.astype(np.int32)
    for column in reversed(columns):
        rest, digit = np.divmod(rest, 10)
        rows[:, column] += digit.astype(np.uint8)


def path_text(lon: np.ndarray, lat: np.ndarray) -> bytes:
    """`[[lon,lat],...]` with six decimals, built as one fixed-width array."""
    rows = np.tile(_TEMPLATE, (len(lon), 1))
    _put_digits(rows, lon, _LON_COLUMNS)
    _put_digits(rows, lat, _LAT_COLUMNS)
    return b"[" + rows.tobytes()[:-1] + b"]"


def distance_m(lon: np.ndarray, lat: np.ndarray) -> int:
    """Length along the path in whole metres (haversine, mean Earth radius)."""
    lam, phi = np.radians(lon / MICRO), np.radians(lat / MICRO)
    a = (
        np.sin(np.diff(phi) / 2) ** 2
        + np.cos(phi[:-1]) * np.cos(phi[1:]) * np.sin(np.diff(lam) / 2) ** 2
    )
    return round(float(np.sum(2 * 6_371_008.8 * np.arcsin(np.sqrt(a)))))


def make_track(seed: int, number: int) -> Track:
    """Track `number` (1-based, also its id) of `seed`."""
    rng = _rng(seed, number)
    points = point_count(rng)
    name = f"{SESSIONS[rng.integers(len(SESSIONS))]} run, {DISTRICTS[rng.integers(len(DISTRICTS))]}"
    lon, lat = walk(rng, points)
    return Track(number, name, distance_m(lon, lat), path_text(lon, lat))


def make_tracks(seed: int, count: int) -> Iterator[Track]:
    for number in range(1, count + 1):
        yield make_track(seed, number)


# ---- PostgreSQL -------------------------------------------------------------------


def load(conn: psycopg.Connection, seed: int, count: int) -> list[dict[str, int]]:
    """Creates tracks_new and fills it (one transaction, COPY FREEZE), then its
    primary key and statistics. Returns each track's id, points and bytes."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NEW_TABLE)))
    index: list[dict[str, int]] = []
    bar = tqdm(total=count, desc="aside-seed: tracks", unit=" tracks", file=sys.stderr,
               mininterval=0.5, smoothing=0.1)  # fmt: skip
    copy_sql = sql.SQL("COPY {} (id, name, distance_m, path) FROM STDIN (FREEZE)").format(
        sql.Identifier(NEW_TABLE)
    )
    with bar, conn.transaction(), conn.cursor() as cur:
        cur.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL EXCLUDING INDEXES)").format(
                sql.Identifier(NEW_TABLE), sql.Identifier(TABLE)
            )
        )
        # lz4 rather than the default pglz: several times faster to compress
        # (the load) and to decompress (every uncached read of a track).
        cur.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN path SET COMPRESSION lz4").format(
                sql.Identifier(NEW_TABLE)
            )
        )
        with cur.copy(copy_sql) as copy:
            for track in make_tracks(seed, count):
                # Text format: names and paths hold no tab, newline or backslash.
                copy.write(b"%d\t%s\t%d\t%s\n" % (
                    track.id, track.name.encode(), track.distance_m, track.path))  # fmt: skip
                index.append({"id": track.id, "points": track.points, "bytes": len(track.path)})
                bar.update()
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id)").format(
            sql.Identifier(NEW_TABLE), sql.Identifier(NEW_PKEY)
        )
    )
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(NEW_TABLE)))
    return index


def swap_in(conn: psycopg.Connection) -> None:
    """Replaces tracks by tracks_new; run inside the users' swap transaction
    (loader.swap_in), so both tables change at the same commit."""
    replace_table(conn, TABLE, NEW_TABLE, [(NEW_PKEY, PKEY)])
    conn.execute(
        sql.SQL(
            "SELECT setval(pg_get_serial_sequence({}, 'id'), greatest(max(id), 1)) FROM {}"
        ).format(sql.Literal(TABLE), sql.Identifier(TABLE))
    )


def drop_new_table(conn: psycopg.Connection) -> None:
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NEW_TABLE)))


def write_key_file(data_dir: Path, seed: int, index: list[dict[str, int]]) -> None:
    """bench/data/tracks.json: every track's id, points and size in bytes."""
    write_json(data_dir / TRACKS_FILE, {"seed": seed, "count": len(index), "tracks": index})
