"""Pure logic of the data: no database needed."""

from __future__ import annotations

import re
import struct
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from aside_seed import datagen, encode
from aside_seed.datagen import BLOCK_ROWS, DataShape, RowMaker, build_parts, make_hot_emails

USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
FORBIDDEN_IN_EMAIL = set('"(),:;<>[\\]')


def email_is_valid(email: str) -> bool:
    """contracts/validation.json's email_rules, written out (checked on its vectors below)."""
    if not 1 <= len(email) <= 254 or email.count("@") != 1:
        return False
    local, domain = email.split("@")
    if not (1 <= len(local) <= 64 and 1 <= len(domain) <= 253):
        return False
    labels = domain.split(".")
    if len(labels) < 2 or any(not label for label in labels):
        return False
    for char in email:
        code = ord(char)
        if char.isspace() or code < 0x20 or 0x7F <= code <= 0x9F or char in FORBIDDEN_IN_EMAIL:
            return False
    return True


def username_is_valid(username: str) -> bool:
    return USERNAME.fullmatch(username) is not None


def test_reference_checkers_agree_with_the_contract_vectors(contract: dict[str, Any]) -> None:
    assert all(email_is_valid(e) for e in contract["email_valid"])
    assert not any(email_is_valid(e) for e in contract["email_invalid"])
    assert all(username_is_valid(u) for u in contract["username_valid"])
    assert not any(username_is_valid(u) for u in contract["username_invalid"])


@pytest.fixture(scope="module")
def parts() -> list[datagen.LocaleParts]:
    return build_parts(7)


@pytest.fixture(scope="module")
def shape() -> DataShape:
    return DataShape(rows=25_000, seed=7, hot_emails=50, hot_ratio=0.8)


@pytest.fixture(scope="module")
def rows(parts: list[datagen.LocaleParts], shape: DataShape) -> list[tuple[int, str, str, int]]:
    hot = make_hot_emails(parts, shape.seed, shape.hot_emails)
    return [row for block in RowMaker(shape, parts, hot).blocks() for row in block.rows()]


def test_base36_range_matches_one_by_one_conversion() -> None:
    for first, count in [(1, 3000), (1290, 20), (46655, 5), (10**9, 1300)]:
        expected = [datagen.to_base36(n) for n in range(first, first + count)]
        assert datagen.base36_range(first, count) == expected
    assert datagen.to_base36(35) == "z"
    assert datagen.to_base36(36) == "10"


def test_names_and_domains_are_cleaned_to_plain_ascii() -> None:
    assert datagen.ascii_name("Wojtoń") == "wojton"
    assert datagen.ascii_name("da Mata") == "damata"
    assert datagen.ascii_name("Łukasz") == "lukasz"
    assert datagen.ascii_name("Karl-Jürgen") == "karljurgen"
    assert datagen.ascii_domain("müller.de") == "muller.de"
    assert datagen.ascii_domain("no-dot") == ""
    assert datagen.ascii_domain("-bad.com") == ""


def test_pools_are_full_and_clean(parts: list[datagen.LocaleParts]) -> None:
    assert len(parts) == len(datagen.LOCALE_SHARES)
    for part in parts:
        assert len(part.firsts) == len(part.lasts) == datagen.NAMES_PER_LOCALE
        assert len(part.domains) == datagen.DOMAINS_PER_LOCALE
        assert all(re.fullmatch(r"[a-z]{1,20}", n) for n in part.firsts + part.lasts)
        assert all(email_is_valid(f"x@{d}") for d in part.domains)


def test_hot_rows_are_exact_and_spread_over_blocks() -> None:
    shape = DataShape(rows=123_457, seed=1, hot_emails=10, hot_ratio=0.8)
    assert shape.hot_rows == 98_766
    per_block = [
        shape.hot_rows_before(min((b + 1) * BLOCK_ROWS, shape.rows))
        - shape.hot_rows_before(b * BLOCK_ROWS)
        for b in range(shape.blocks)
    ]
    assert sum(per_block) == shape.hot_rows
    assert max(per_block) - min(per_block[:-1]) <= 1
    assert DataShape(rows=10, seed=1, hot_emails=0, hot_ratio=0.5).hot_rows == 0


def test_rows_have_the_promised_shape(
    rows: list[tuple[int, str, str, int]], shape: DataShape, parts: list[datagen.LocaleParts]
) -> None:
    hot = set(make_hot_emails(parts, shape.seed, shape.hot_emails))
    ids = [r[0] for r in rows]
    assert ids == list(range(1, shape.rows + 1))
    assert len({r[1] for r in rows}) == shape.rows  # unique usernames
    counts = Counter(r[2] for r in rows)
    assert sum(c for e, c in counts.items() if e in hot) == shape.hot_rows
    hot_counts = [counts[e] for e in hot]
    assert len(hot_counts) == shape.hot_emails
    assert max(hot_counts) - min(hot_counts) <= 1  # hot rows spread evenly over hot addresses
    assert all(c == 1 for e, c in counts.items() if e not in hot)  # cold ones are unique
    assert all(username_is_valid(r[1]) for r in rows)
    assert all(email_is_valid(r[2]) for r in rows)
    stamps = [r[3] for r in rows]
    assert stamps == sorted(stamps)
    start = (datagen.WINDOW_START - datagen.UNIX_EPOCH) // timedelta(microseconds=1)
    end = (datagen.WINDOW_END - datagen.UNIX_EPOCH) // timedelta(microseconds=1)
    assert start <= stamps[0] and stamps[-1] < end
    assert stamps[-1] - stamps[0] > 0.99 * (end - start)  # spread over the whole window


def test_hot_and_cold_addresses_never_collide(parts: list[datagen.LocaleParts]) -> None:
    hot = make_hot_emails(parts, 3, 2000)
    assert len(set(hot)) == 2000
    separators = re.compile(r"[._-]")
    assert all(len(separators.findall(e.split("@")[0])) <= 1 for e in hot)
    shape = DataShape(rows=12_000, seed=3, hot_emails=1, hot_ratio=0.0)
    cold = RowMaker(shape, parts, []).block(1).emails
    assert all(len(separators.findall(e.split("@")[0])) == 2 for e in cold)


def test_a_block_depends_only_on_seed_and_position(
    parts: list[datagen.LocaleParts], shape: DataShape, rows: list[tuple[int, str, str, int]]
) -> None:
    hot = make_hot_emails(parts, shape.seed, shape.hot_emails)
    again = RowMaker(shape, build_parts(shape.seed), hot).block(2)
    assert again.rows() == rows[2 * BLOCK_ROWS : 3 * BLOCK_ROWS]
    other_seed = DataShape(shape.rows, shape.seed + 1, shape.hot_emails, shape.hot_ratio)
    other_hot = make_hot_emails(parts, other_seed.seed, shape.hot_emails)
    assert set(other_hot).isdisjoint(hot) or other_hot != hot
    different = RowMaker(other_seed, build_parts(other_seed.seed), other_hot).block(2)
    assert different.usernames != again.usernames


def reference_binary(block: datagen.Block) -> bytes:
    """The COPY BINARY tuple format written the plain way, one struct.pack per field."""
    out = b""
    for row_id, username, email, created_us in block.rows():
        user, mail = username.encode(), email.encode()
        out += struct.pack(">hiqi", 4, 8, row_id, len(user)) + user
        out += struct.pack(">i", len(mail)) + mail
        out += struct.pack(">iq", 8, created_us - datagen.PG_EPOCH_UNIX_US)
    return out


def test_binary_encoding_is_the_postgres_tuple_format(
    parts: list[datagen.LocaleParts], shape: DataShape
) -> None:
    block = RowMaker(shape, parts, make_hot_emails(parts, 7, 50)).block(1)
    assert encode.encode_binary(block) == reference_binary(block)
    unicode = datagen.Block(41, ["jürgen_1", "a"], ["jürgen@bücher.de", "x@y.z"], [0, 1])
    assert encode.encode_binary(unicode) == reference_binary(unicode)


def test_text_encoding_has_one_line_per_row(
    parts: list[datagen.LocaleParts], shape: DataShape
) -> None:
    block = RowMaker(shape, parts, make_hot_emails(parts, 7, 50)).block(0)
    lines = encode.encode_text(block).decode().splitlines()
    assert len(lines) == len(block)
    first = lines[0].split("\t")
    row = block.rows()[0]
    assert first[:3] == [str(row[0]), row[1], row[2]]
    assert first[3] == encode.to_datetime(row[3]).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
