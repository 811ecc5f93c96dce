"""GET /api/v1/tracks/<id> through a real gunicorn, PostgreSQL, Redis and core:
answers, validation, the simplify vectors, and what the large-value policies
store in Redis."""

from __future__ import annotations

import json

import pytest
import requests
from aside_gateway.contracts import cache_keys
from aside_gateway.tiers import largevalues
from gateway_helpers import cached, contract, fresh_for, sample, scrape

TRACKS = contract("tracks.json")
ROUTE = "/api/v1/tracks/<id>"
THRESHOLD = cache_keys.LARGE_THRESHOLD_BYTES_DEFAULT


def get(base: str, track_id: object, **params: str) -> requests.Response:
    return requests.get(f"{base}/api/v1/tracks/{track_id}", params=params, timeout=30)


def assert_error(response: requests.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]


def big_path(points: int) -> str:
    """A zigzag of `points` points: about 22 bytes each, so 5,000 are ~110 kB."""
    pairs = (f"[{13.4 + i * 1e-5:.6f},{52.5 + (i % 7) * 1e-4:.6f}]" for i in range(points))
    return "[" + ",".join(pairs) + "]"


@pytest.fixture(scope="module")
def insert_track(db):
    def insert(path: str, name: str = "Test run, Mitte", distance: int = 4321) -> int:
        row = db.execute(
            "INSERT INTO tracks (name, distance_m, path) VALUES (%s, %s, %s::json) RETURNING id",
            (name, distance, path),
        ).fetchone()
        return int(row[0])

    return insert


def test_a_whole_track_is_served_as_stored_then_from_the_cache(gateway, insert_track, rdb):
    vector = TRACKS["track_json"][1]["row"]
    track_id = insert_track(vector["path"], vector["name"], vector["distance_m"])
    first = get(gateway.url, track_id)
    assert first.status_code == 200 and first.headers["X-Cache"] == "MISS"
    expected = cache_keys.track_json(track_id, vector["name"], vector["distance_m"], vector["path"])
    assert first.content == expected
    assert first.headers["Content-Type"] == "application/json"
    second = get(gateway.url, track_id)
    assert (second.headers["X-Cache"], second.headers["X-Cache-Tier"]) == ("HIT", "l2")
    assert second.content == expected
    key = cache_keys.track_key(track_id, None, "zstd")
    assert cached(rdb, key) == expected  # small: stored as it is, even under compress
    assert 0 < fresh_for(rdb, key) <= 60 and not rdb.exists(key + ":lease")


@pytest.mark.parametrize("vector", TRACKS["simplify"], ids=lambda v: v["name"])
def test_simplified_tracks_equal_the_vectors(gateway, insert_track, vector):
    track_id = insert_track(json.dumps(vector["path"]), "Vector run", 777)
    first = get(gateway.url, track_id, simplify=vector["tolerance"])
    assert first.status_code == 200, first.text
    body = first.json()
    assert body == {
        "id": track_id,
        "name": "Vector run",
        "distance_m": 777,
        "tolerance": float(vector["tolerance"]),
        "path": vector["simplified"],
    }
    assert first.headers["X-Cache"] == "MISS"
    second = get(gateway.url, track_id, simplify=vector["tolerance"])
    assert second.headers["X-Cache"] == "HIT" and second.json() == body


def test_equal_tolerances_share_one_cache_entry(gateway, insert_track):
    track_id = insert_track("[[13.4,52.5],[13.41,52.5],[13.42,52.51]]")
    assert get(gateway.url, track_id, simplify="0.0005").headers["X-Cache"] == "MISS"
    again = get(gateway.url, track_id, simplify="00.000500")
    assert again.headers["X-Cache"] == "HIT" and again.json()["tolerance"] == 0.0005


@pytest.mark.parametrize("raw", TRACKS["tolerance"]["invalid"])
def test_bad_tolerances_are_400(gateway, raw):
    assert_error(get(gateway.url, 1, simplify=raw), 400, "invalid_tolerance")


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1.5", "9223372036854775808"])
def test_bad_ids_are_400(gateway, bad):
    assert_error(get(gateway.url, bad), 400, "invalid_id")


def test_bad_lab_choices_are_400(gateway):
    assert_error(get(gateway.url, 1, cache="l1"), 400, "invalid_request")
    assert_error(get(gateway.url, 1, large="lz4"), 400, "invalid_request")


def test_an_unknown_track_is_404_and_cached_as_negative(gateway, rdb):
    for params in ({}, {"simplify": "0.001"}):
        first = get(gateway.url, 9_000_000_000_000, **params)
        assert_error(first, 404, "not_found")
        assert first.headers["X-Cache"] == "MISS"
        assert get(gateway.url, 9_000_000_000_000, **params).headers["X-Cache"] == "HIT"
    assert cached(rdb, cache_keys.track_key(9_000_000_000_000, "0.001", "zstd")) == b"null"


def test_a_large_track_is_stored_compressed_and_served_whole(gateway, insert_track, rdb):
    path = big_path(5000)
    track_id = insert_track(path)
    expected = cache_keys.track_json(track_id, "Test run, Mitte", 4321, path)
    assert len(expected) > THRESHOLD
    before = scrape(gateway.url)
    assert get(gateway.url, track_id).content == expected
    stored = cached(rdb, cache_keys.track_key(track_id, None, "zstd"))
    assert cache_keys.codec_of(stored) == "zstd" and len(stored) < len(expected) / 4
    assert largevalues.decode(stored) == expected
    hit = get(gateway.url, track_id)
    assert hit.headers["X-Cache"] == "HIT" and hit.content == expected
    after = scrape(gateway.url)
    ratio = "aside_gateway_cache_compression_ratio_count"
    assert sample(after, ratio, codec="zstd") - sample(before, ratio, codec="zstd") == 1
    sizes = "aside_gateway_cache_value_bytes_sum"
    for op, size in (
        ("stored", len(stored)),
        ("fetched", len(stored)),
        ("served", 2 * len(expected)),
    ):
        assert (
            sample(after, sizes, route=ROUTE, op=op) - sample(before, sizes, route=ROUTE, op=op)
            == size
        )


def test_each_policy_stores_its_own_form_under_its_own_key(gateway, insert_track, rdb):
    path = big_path(5000)
    track_id = insert_track(path)
    whole = cache_keys.track_json(track_id, "Test run, Mitte", 4321, path)
    assert get(gateway.url, track_id, large="raw").content == whole
    assert cached(rdb, cache_keys.track_key(track_id, None, "raw")) == whole
    # skip: the marker is stored, so no reader waits on a lease; every read is a miss.
    for _ in range(2):
        skipped = get(gateway.url, track_id, large="skip")
        assert skipped.content == whole and skipped.headers["X-Cache"] == "MISS"
    assert cached(rdb, cache_keys.track_key(track_id, None, "skip")) == cache_keys.TOO_LARGE
    # simplify: the large track is answered, and stored, simplified at the default tolerance.
    simplified = get(gateway.url, track_id, large="simplify")
    body = simplified.json()
    assert body["tolerance"] == float(cache_keys.SIMPLIFY_TOLERANCE_DEFAULT)
    assert 2 <= len(body["path"]) < 5000
    assert body["path"][0] == [13.4, 52.5] and body["path"][-1] == json.loads(path)[-1]
    assert cached(rdb, cache_keys.track_key(track_id, None, "simplify")) == simplified.content
    assert get(gateway.url, track_id, large="simplify").headers["X-Cache"] == "HIT"
    # Without the cache no policy applies: the whole track.
    uncached = get(gateway.url, track_id, cache="off", large="simplify")
    assert uncached.headers["X-Cache"] == "BYPASS" and uncached.content == whole


def test_a_stored_frame_that_does_not_decode_is_a_miss_and_refilled(gateway, insert_track, rdb):
    path = big_path(5000)
    track_id = insert_track(path)
    key = cache_keys.track_key(track_id, None, "zstd")
    rdb.set(key, b"\x28\xb5\x2f\xfd broken frame", ex=60)
    answer = get(gateway.url, track_id)
    assert answer.status_code == 200 and answer.headers["X-Cache"] == "MISS"
    assert answer.content == cache_keys.track_json(track_id, "Test run, Mitte", 4321, path)
    assert get(gateway.url, track_id).headers["X-Cache"] == "MISS"  # deleted, filled again
    assert largevalues.decode(cached(rdb, key)) == answer.content


def test_lab_choices_are_refused_in_production(production_gateway):
    for params in ({"large": "raw"}, {"cache": "off"}):
        assert_error(get(production_gateway.url, 1, **params), 403, "lab_disabled")
