"""GPS tracks: made deterministically from the seed (pure), loaded and swapped
in with the users, their key file, and the cache flush over their keys."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg
import pytest
import redis
from aside_seed import tracks

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
ARGS = ("--rows", "3000", "--hot-emails", "10", "--reset")
# Size buckets in points, as seed/README.md tabulates them.
BUCKETS = ((0, 500), (500, 2_000), (2_000, 10_000), (10_000, 50_001))


def tracks_hash(conn: psycopg.Connection) -> str:
    row = conn.execute(
        "SELECT md5(string_agg(concat_ws(',', id, name, distance_m, path::text), E'\\n'"
        " ORDER BY id)) FROM tracks"
    ).fetchone()
    assert row is not None
    return row[0]


# ---- pure ----------------------------------------------------------------------------


def test_a_track_depends_only_on_the_seed_and_its_number():
    assert tracks.make_track(42, 17) == tracks.make_track(42, 17)
    assert list(tracks.make_tracks(42, 30))[16] == tracks.make_track(42, 17)
    assert tracks.make_track(43, 17) != tracks.make_track(42, 17)


def test_path_text_is_the_compact_json_of_the_walk():
    rng = np.random.default_rng(5)
    lon, lat = tracks.walk(rng, 1000)
    text = tracks.path_text(lon, lat)
    assert json.loads(text) == [[x / 1e6, y / 1e6] for x, y in zip(lon, lat, strict=True)]
    assert b" " not in text and text.startswith(b"[[1") and text.endswith(b"]]")
    # Six decimals always, trailing zeros kept: every number is dd.dddddd.
    for number in text[2:-2].replace(b"],[", b",").split(b","):
        assert len(number) == 9 and number[2:3] == b"."


def test_points_stay_near_berlin_at_running_pace():
    for number in range(1, 60):
        track = tracks.make_track(42, number)
        path = json.loads(track.path)
        assert len(path) == track.points >= tracks.MIN_POINTS
        lons, lats = zip(*path, strict=True)
        assert tracks.LON_RANGE[0] <= min(lons) and max(lons) <= tracks.LON_RANGE[1]
        assert tracks.LAT_RANGE[0] <= min(lats) and max(lats) <= tracks.LAT_RANGE[1]
        pace = track.distance_m / (track.points - 1)  # one point a second
        assert 2.0 <= pace <= 6.0, (number, pace)


def test_distance_is_the_haversine_length_of_the_stored_path():
    track = tracks.make_track(42, 3)
    path = json.loads(track.path)
    total = 0.0
    for (lon1, lat1), (lon2, lat2) in itertools.pairwise(path):
        p1, p2 = math.radians(lat1), math.radians(lat2)
        a = (
            math.sin((p2 - p1) / 2) ** 2
            + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
        )
        total += 2 * 6_371_008.8 * math.asin(math.sqrt(a))
    assert track.distance_m == round(total)


def test_the_default_seed_has_most_tracks_short_and_a_tail_to_50000_points():
    counts = [tracks.point_count(tracks._rng(42, n)) for n in range(1, 2001)]
    per_bucket = Counter(
        next(i for i, (lo, hi) in enumerate(BUCKETS) if lo <= c < hi) for c in counts
    )
    # The distribution seed/README.md shows for the default seed and count.
    assert [per_bucket[i] for i in range(len(BUCKETS))] == [1352, 311, 244, 93]
    assert max(counts) <= tracks.MAX_POINTS and max(counts) > 40_000
    assert min(counts) >= tracks.MIN_POINTS


def test_names_are_valid_utf8_without_copy_specials():
    for number in range(1, 200):
        name = tracks.make_track(1, number).name
        assert not any(ch in name for ch in "\t\n\r\\")


# ---- against PostgreSQL and Redis ------------------------------------------------------


def test_tracks_are_loaded_with_their_key_file(seed, db):
    seed.ok(*ARGS, "--tracks", "40")
    rows = db.execute(
        "SELECT id, name, distance_m, path::text, octet_length(path::text) FROM tracks ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == list(range(1, 41))
    for row in rows[:10]:
        made = tracks.make_track(42, row[0])
        assert (row[1], row[2], row[3].encode()) == (made.name, made.distance_m, made.path)
    index = seed.read(tracks.TRACKS_FILE)
    assert index["count"] == 40 and index["seed"] == 42
    assert [(t["id"], t["bytes"]) for t in index["tracks"]] == [(r[0], r[4]) for r in rows]
    assert all(
        t["points"] == len(json.loads(r[3])) for t, r in zip(index["tracks"], rows, strict=True)
    )
    assert seed.read("seed_meta.json")["tracks"] == 40
    compression = db.execute(
        "SELECT attcompression FROM pg_attribute"
        " WHERE attrelid = 'tracks'::regclass AND attname = 'path'"
    ).fetchone()
    assert compression == ("l",)  # lz4
    # The identity continues after the seeded ids, as the users' does.
    db.execute("BEGIN")
    new_id = db.execute(
        "INSERT INTO tracks (name, distance_m, path) VALUES ('x', 0, '[[13.4,52.5]]') RETURNING id"
    ).fetchone()
    db.execute("ROLLBACK")
    assert new_id == (41,)


def test_same_seed_same_tracks_and_zero_empties_the_table(seed, db):
    seed.ok(*ARGS, "--tracks", "25")
    first = tracks_hash(db)
    seed.ok(*ARGS, "--tracks", "25", "--seed", "9")
    assert tracks_hash(db) != first
    seed.ok(*ARGS, "--tracks", "25")
    assert tracks_hash(db) == first
    seed.ok(*ARGS, "--tracks", "0")
    assert db.execute("SELECT count(*) FROM tracks").fetchone() == (0,)
    assert seed.read(tracks.TRACKS_FILE)["tracks"] == []


def test_bad_tracks_option_is_one_line(seed):
    done = seed(*ARGS, "--tracks", "-3")
    assert done.returncode == 2
    assert done.stderr.strip() == "aside-seed: --tracks must be a whole number >= 0, got '-3'"


def test_a_failed_load_keeps_the_previous_tracks(seed, db):
    seed.ok(*ARGS, "--tracks", "15")
    before = tracks_hash(db)
    done = seed(*ARGS, "--tracks", "30", "--seed", "8", ASIDE_SEED_FAIL_AFTER_ROWS="1000")
    assert done.returncode == 1
    assert tracks_hash(db) == before
    assert db.execute("SELECT to_regclass('tracks_new')").fetchone() == (None,)


def test_a_leftover_tracks_new_is_dropped_by_the_next_run(seed, db):
    seed.ok(*ARGS, "--tracks", "5")
    db.execute("CREATE TABLE tracks_new (LIKE tracks INCLUDING ALL)")
    seed.ok(*ARGS, "--tracks", "6")
    assert db.execute("SELECT count(*) FROM tracks").fetchone() == (6,)
    assert db.execute("SELECT to_regclass('tracks_new')").fetchone() == (None,)


def test_users_and_tracks_change_at_the_same_commit(seed, db, hash_table, test_db_url):
    """A long reader of tracks alone stops the whole swap: the users stay too,
    so no reader ever sees new users beside old tracks."""
    seed.ok(*ARGS, "--tracks", "10")
    users_before, tracks_before = hash_table(db), tracks_hash(db)
    with psycopg.connect(test_db_url) as reader:  # holds ACCESS SHARE on tracks until rollback
        reader.execute("SELECT count(*) FROM tracks").fetchone()
        done = seed(*ARGS, "--tracks", "12", "--seed", "8", "--lock-timeout", "0.3")
        reader.rollback()
    assert done.returncode == 1
    assert "could not swap in the new data" in done.stderr
    assert (hash_table(db), tracks_hash(db)) == (users_before, tracks_before)
    seed.ok(*ARGS, "--tracks", "12", "--seed", "8")
    assert db.execute("SELECT count(*) FROM tracks").fetchone() == (12,)


def test_cached_tracks_are_flushed(seed, db, redis_url):
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    client.flushdb()
    keys = json.loads((CONTRACTS / "cache.json").read_text())["track_keys"]
    for vector in keys:
        client.set(vector["key"], b"old")
        client.set(vector["key"] + ":lease", b"token")
    client.set("aside:test:other", "kept")
    seed.ok(*ARGS, "--tracks", "3")
    assert client.keys("*") == [b"aside:test:other"]
    client.close()


@pytest.mark.parametrize("count", [1, 7])
def test_index_counts_points_and_bytes(count):
    made = list(tracks.make_tracks(3, count))
    assert [t.id for t in made] == list(range(1, count + 1))
    assert all(t.points == len(json.loads(t.path)) for t in made)
