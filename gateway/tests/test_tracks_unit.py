"""Tracks without services: the large-value policy and stored form of
contracts/cache.json, keys, the tolerance rules and the answer's JSON of
contracts/tracks.json, and the settings."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path

import pytest
from aside_gateway.config.settings import ConfigError, load_settings
from aside_gateway.contracts import cache_keys, validation
from aside_gateway.contracts.errors import ApiError
from aside_gateway.tiers import largevalues

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
CACHE = json.loads((CONTRACTS / "cache.json").read_text())
LARGE = CACHE["large_values"]
TRACKS = json.loads((CONTRACTS / "tracks.json").read_text())
BASE_ENV = {
    "DATABASE_URL": "postgresql://aside@127.0.0.1:25432/aside",
    "REDIS_URL": "redis://127.0.0.1:26379/0",
    "CORE_URL": "http://127.0.0.1:28080",
    "ASIDE_PROFILE": "lab",
}
BIG = b'{"id":1,"path":[' + b"[13.405123,52.520001]," * 4000 + b"[13.4,52.5]]}"


def test_large_value_constants_match_the_contract():
    assert LARGE["threshold_bytes_default"] == cache_keys.LARGE_THRESHOLD_BYTES_DEFAULT
    assert tuple(LARGE["policies"]) == cache_keys.POLICIES
    assert LARGE["default_policy"] == cache_keys.DEFAULT_POLICY
    assert LARGE["default_codec"] == cache_keys.DEFAULT_CODEC
    assert {c: m.hex() for c, m in cache_keys.CODEC_MAGIC.items()} == LARGE["codecs"]
    assert LARGE["too_large_marker"].encode() == cache_keys.TOO_LARGE
    assert LARGE["simplify_tolerance_default"] == cache_keys.SIMPLIFY_TOLERANCE_DEFAULT
    assert LARGE["decoded_max_bytes"] == cache_keys.DECODED_MAX_BYTES
    settings = load_settings(BASE_ENV)
    assert settings.cache_large_value_bytes == LARGE["threshold_bytes_default"]
    assert (settings.cache_large_values, settings.cache_codec) == ("compress", "zstd")
    assert settings.cache_simplify_tolerance == LARGE["simplify_tolerance_default"]


@pytest.mark.parametrize("vector", CACHE["track_keys"], ids=lambda v: v["key"])
def test_track_keys(vector):
    assert cache_keys.track_key(vector["id"], vector["tolerance"], vector["tag"]) == vector["key"]


@pytest.mark.parametrize("vector", LARGE["vectors"], ids=lambda v: v["codec"])
def test_the_contracts_frames_decode(vector):
    stored = base64.b64decode(vector["stored_base64"])
    assert cache_keys.codec_of(stored) == vector["codec"]
    assert cache_keys.is_track_value(stored)
    assert largevalues.decode(stored) == vector["json"].encode()


@pytest.mark.parametrize("codec", cache_keys.CODECS)
def test_above_the_threshold_a_value_is_compressed_and_decodes_back(codec):
    stored = largevalues.stored_form(BIG, "compress", codec, 65536)
    assert cache_keys.codec_of(stored) == codec and len(stored) < len(BIG) / 10
    assert largevalues.decode(stored) == BIG
    # At or below the threshold, and for the negative entry, nothing changes.
    assert largevalues.stored_form(BIG, "compress", codec, len(BIG)) is BIG
    assert largevalues.stored_form(cache_keys.NEGATIVE, "compress", codec, 1) == b"null"


def test_each_policy_above_the_threshold():
    assert largevalues.stored_form(BIG, "raw", "zstd", 1000) is BIG
    assert largevalues.stored_form(BIG, "skip", "zstd", 1000) == cache_keys.TOO_LARGE
    # simplify: web/tracks.py already simplified the answer; what is still large is compressed.
    assert cache_keys.codec_of(largevalues.stored_form(BIG, "simplify", "gzip", 1000)) == "gzip"
    assert largevalues.decode(cache_keys.TOO_LARGE) is None
    assert largevalues.decode(b'{"id":1}') == b'{"id":1}'
    assert [largevalues.policy_tag(p, "gzip") for p in cache_keys.POLICIES] == [
        "gzip",
        "simplify",
        "skip",
        "raw",
    ]


@pytest.mark.parametrize(
    "bad", [b"\x28\xb5\x2f\xfdgarbage", b"\x1f\x8bgarbage", b"\x28\xb5\x2f\xfd", b"\x1f\x8b"]
)
def test_a_frame_that_does_not_decode_is_malformed(bad):
    assert cache_keys.is_track_value(bad)  # the cheap check passes it on...
    with pytest.raises(largevalues.MalformedValue):
        largevalues.decode(bad)  # ...and decoding catches it


def test_a_bomb_is_refused():
    bomb = largevalues.compress(b"0" * (cache_keys.DECODED_MAX_BYTES + 1), "gzip")
    with pytest.raises(largevalues.MalformedValue):
        largevalues.decode(bomb)


@pytest.mark.parametrize("value", [b"", b"[1,2]", b"abc", b"nul", b"\xff"])
def test_other_values_are_not_track_values(value):
    assert not cache_keys.is_track_value(value)
    assert not cache_keys.value_is_valid("aside:v1:{track:1}:raw", value)


@pytest.mark.parametrize("vector", TRACKS["tolerance"]["valid"], ids=lambda v: v["raw"])
def test_valid_tolerances(vector):
    assert validation.parse_tolerance(vector["raw"]) == vector["canonical"]


@pytest.mark.parametrize("raw", TRACKS["tolerance"]["invalid"])
def test_invalid_tolerances(raw):
    with pytest.raises(ApiError) as err:
        validation.parse_tolerance(raw)
    assert err.value.code == "invalid_tolerance" and err.value.status == 400


def test_tolerance_bounds_match_the_contract():
    assert f"{validation.TOLERANCE_MIN:f}" == TRACKS["tolerance"]["min"]
    assert f"{validation.TOLERANCE_MAX:f}" == TRACKS["tolerance"]["max"]
    assert TRACKS["tolerance"]["max_length"] == validation.TOLERANCE_MAX_LENGTH


def test_tolerance_ladder_matches_the_contract():
    ladder = TRACKS["tolerance"]["ladder"]
    assert [f"{level:f}" for level in validation.TOLERANCE_LADDER] == ladder
    assert ladder[0] == TRACKS["tolerance"]["min"] and ladder[-1] == TRACKS["tolerance"]["max"]


def test_every_tolerance_lands_on_a_level_not_above_it():
    """Every 16-character decimal in a sweep of the range becomes a level of the
    ladder, the largest not above it: the key space of one track is the ladder."""
    ladder = set(TRACKS["tolerance"]["ladder"])
    seen = set()
    for step in range(1, 10001):
        raw = f"{Decimal('0.000001') * step:f}"[:16]
        level = validation.parse_tolerance(raw)
        assert level in ladder and Decimal(level) <= Decimal(raw)
        seen.add(level)
    assert seen == ladder


@pytest.mark.parametrize("vector", TRACKS["track_json"], ids=lambda v: str(v["row"]["id"]))
def test_track_json(vector):
    row = vector["row"]
    body = cache_keys.track_json(row["id"], row["name"], row["distance_m"], row["path"])
    assert body == vector["json"].encode()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CACHE_LARGE_VALUE_BYTES", "100"),
        ("CACHE_LARGE_VALUE_BYTES", "64k"),
        ("CACHE_LARGE_VALUES", "lz4"),
        ("CACHE_CODEC", "brotli"),
        ("CACHE_SIMPLIFY_TOLERANCE", "0.5"),
        ("CACHE_SIMPLIFY_TOLERANCE", "1e-4"),
    ],
)
def test_large_value_settings_errors_name_the_variable(name, value):
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE_ENV, name: value})
    assert str(err.value).startswith(name) and "\n" not in str(err.value)


def test_large_value_settings():
    settings = load_settings(
        {
            **BASE_ENV,
            "CACHE_LARGE_VALUE_BYTES": "4096",
            "CACHE_LARGE_VALUES": "skip",
            "CACHE_CODEC": "gzip",
            "CACHE_SIMPLIFY_TOLERANCE": "0.00050",
        }
    )
    assert settings.cache_large_value_bytes == 4096
    assert (settings.cache_large_values, settings.cache_codec) == ("skip", "gzip")
    assert settings.cache_simplify_tolerance == "0.0005"
