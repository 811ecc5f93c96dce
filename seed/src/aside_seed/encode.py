"""Blocks of rows as COPY data, pre-formatted here rather than by psycopg's
write_row, which is the slowest of the three ways (see seed/README.md)."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from aside_seed.datagen import PG_EPOCH_UNIX_US, UNIX_EPOCH, Block

COPY_COLUMNS = "(id, username, email, created_at)"

BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
BINARY_TRAILER = struct.pack(">h", -1)
# A binary tuple: head, username bytes, email length, email bytes, tail.
_HEAD = np.dtype([("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("user_len", ">i4")])
_EMAIL_LEN = np.dtype([("email_len", ">i4")])
_TAIL = np.dtype([("ts_len", ">i4"), ("ts", ">i8")])
_FIXED_BYTES = _HEAD.itemsize + _EMAIL_LEN.itemsize + _TAIL.itemsize


def copy_statement(table: str, copy_format: str) -> str:
    """COPY into a table created in the same transaction: FREEZE writes the rows
    frozen and all-visible, so the first scan sets no hint bits and no VACUUM
    is needed."""
    pg_format = "text" if copy_format == "text" else "binary"
    return f"COPY {table} {COPY_COLUMNS} FROM STDIN WITH (FORMAT {pg_format}, FREEZE)"


def encode_binary(block: Block) -> bytes:
    """Tuples in COPY BINARY format (no header): bigint, text, text, timestamptz.

    Built with numpy for the whole block at once (one struct.pack per row costs
    about 60 % more CPU): fixed-size parts as big-endian records, strings as
    one joined buffer each, all scattered to their byte offsets."""
    count = len(block)
    if not count:
        return b""
    users, user_lens = _joined_utf8(block.usernames)
    emails, email_lens = _joined_utf8(block.emails)
    row_start = _exclusive_cumsum(_FIXED_BYTES + user_lens + email_lens)
    head = np.empty(count, _HEAD)
    head["fields"], head["id_len"], head["user_len"] = 4, 8, user_lens
    head["id"] = np.arange(block.first_id, block.first_id + count)
    email_len = np.empty(count, _EMAIL_LEN)
    email_len["email_len"] = email_lens
    tail = np.empty(count, _TAIL)
    tail["ts_len"] = 8
    tail["ts"] = np.array(block.created_us, dtype=np.int64) - PG_EPOCH_UNIX_US

    out = np.empty(int(row_start[-1] + _FIXED_BYTES + user_lens[-1] + email_lens[-1]), np.uint8)
    at = row_start
    _scatter_records(out, at, head)
    at = at + _HEAD.itemsize
    _scatter_strings(out, at, users, user_lens)
    at = at + user_lens
    _scatter_records(out, at, email_len)
    at = at + _EMAIL_LEN.itemsize
    _scatter_strings(out, at, emails, email_lens)
    _scatter_records(out, at + email_lens, tail)
    return out.tobytes()


def _joined_utf8(values: list[str]) -> tuple[bytes, np.ndarray]:
    joined = "".join(values).encode()
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if len(joined) != int(lengths.sum()):  # not all ASCII: count bytes, not characters
        lengths = np.fromiter((len(v.encode()) for v in values), np.int64, len(values))
    return joined, lengths


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), dtype=np.int64)
    np.cumsum(values[:-1], out=out[1:])
    return out


def _scatter_records(out: np.ndarray, starts: np.ndarray, records: np.ndarray) -> None:
    """Copies record i (a fixed number of bytes) to out[starts[i]:]."""
    raw = records.view(np.uint8).reshape(len(records), records.dtype.itemsize)
    out[starts[:, None] + np.arange(records.dtype.itemsize)] = raw


def _scatter_strings(
    out: np.ndarray, starts: np.ndarray, joined: bytes, lengths: np.ndarray
) -> None:
    """Copies string i (lengths[i] bytes of `joined`) to out[starts[i]:]."""
    source_start = _exclusive_cumsum(lengths)
    targets = np.repeat(starts - source_start, lengths) + np.arange(int(lengths.sum()))
    out[targets] = np.frombuffer(joined, dtype=np.uint8)


def encode_text(block: Block) -> bytes:
    """Lines in COPY text format. No escaping needed: generated values never hold
    a tab, a newline or a backslash."""
    stamps = np.array(block.created_us, dtype="datetime64[us]")
    texts = np.datetime_as_string(stamps, unit="us", timezone="UTC").tolist()
    lines = [
        f"{row_id}\t{username}\t{email}\t{stamp}\n"
        for row_id, username, email, stamp in zip(
            block.ids, block.usernames, block.emails, texts, strict=True
        )
    ]
    return "".join(lines).encode()


def python_rows(block: Block) -> list[tuple[Any, ...]]:
    """Rows as Python values, for psycopg's write_row."""
    return [
        (row_id, username, email, to_datetime(created_us))
        for row_id, username, email, created_us in zip(
            block.ids, block.usernames, block.emails, block.created_us, strict=True
        )
    ]


def to_datetime(unix_us: int) -> datetime:
    return UNIX_EPOCH + timedelta(microseconds=unix_us)
