"""The files the load driver reads (bench/data/): which keys to ask for, and what was seeded.

hot_emails.json, cold_emails.json and user_ids.json are plain JSON arrays;
emails.txt is the key space, every distinct email of the table, one a line,
sorted (the driver maps popularity ranks to it by a seeded shuffle);
seed_meta.json describes the load and is written last, so its presence means
the others match the table. Every file is replaced atomically.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from aside_seed.datagen import DataShape
from aside_seed.errors import SeedError

HOT_EMAILS_FILE = "hot_emails.json"
COLD_EMAILS_FILE = "cold_emails.json"
USER_IDS_FILE = "user_ids.json"
KEY_SPACE_FILE = "emails.txt"
META_FILE = "seed_meta.json"


def write_json(path: Path, value: Any) -> None:
    """temp file + fsync + rename: a reader sees the old file or the new, whole."""
    indent = 1 if isinstance(value, dict) else None
    _write_atomically(path, json.dumps(value, indent=indent) + "\n")


def write_lines(path: Path, lines: list[str]) -> None:
    """One line each, replaced atomically as write_json does."""
    _write_atomically(path, "".join(line + "\n" for line in lines))


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
        ) as tmp:
            tmp.write(text)
            tmp.flush()
            os.fchmod(tmp.fileno(), 0o644)  # mkstemp makes 0600; the driver may run as another user
            os.fsync(tmp.fileno())
        os.replace(tmp.name, path)
    except OSError as exc:
        raise SeedError(f"cannot write {path}: {exc.strerror or exc}") from None


def withdraw_meta(data_dir: Path) -> bytes | None:
    """Removes seed_meta.json before the swap (a crash between swap and rewrite
    must not leave a description of the old data); returns it for restore_meta."""
    path = data_dir / META_FILE
    try:
        old = path.read_bytes()
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SeedError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return old


def restore_meta(data_dir: Path, old: bytes | None) -> None:
    """Puts seed_meta.json back when the swap failed and the old data stayed."""
    if old is not None:
        write_json(data_dir / META_FILE, json.loads(old))


def sample_user_ids(conn: psycopg.Connection, shape: DataShape, want: int) -> list[int]:
    """`want` distinct existing ids, in random order (seeded)."""
    rng = np.random.default_rng([shape.seed, 0x1D5])
    ids = (rng.choice(shape.rows, size=min(want, shape.rows), replace=False) + 1).tolist()
    found = conn.execute("SELECT count(*) FROM users WHERE id = ANY(%s)", (ids,)).fetchone()
    if not found or found[0] != len(ids):
        raise SeedError("sampled user ids are missing from the table; the load is inconsistent")
    return ids


def sample_cold_emails(
    conn: psycopg.Connection, shape: DataShape, hot: set[str], want: int
) -> list[str]:
    """`want` addresses used by exactly one row: read back from random ids,
    keeping those that are not hot, drawing more ids until there are enough."""
    cold_rows = shape.rows - shape.hot_rows
    want = min(want, cold_rows)
    if want <= 0:
        return []
    rng = np.random.default_rng([shape.seed, 0xC01D])
    draw = min(shape.rows, math.ceil(want * shape.rows / cold_rows * 1.25) + 64)
    while True:
        ids = (rng.choice(shape.rows, size=draw, replace=False) + 1).tolist()
        rows = conn.execute("SELECT id, email FROM users WHERE id = ANY(%s)", (ids,)).fetchall()
        email_of = dict(rows)
        cold = [email_of[i] for i in ids if i in email_of and email_of[i] not in hot]
        if len(cold) >= want or draw == shape.rows:
            return cold[:want]
        draw = min(shape.rows, draw * 2)


def distinct_emails(conn: psycopg.Connection) -> list[str]:
    """Every distinct email of the table, sorted: the key space of a read workload."""
    rows = conn.execute(
        'SELECT email FROM users GROUP BY email ORDER BY email COLLATE "C"'
    ).fetchall()
    return [email for (email,) in rows]


def write_key_files(
    data_dir: Path,
    hot_emails: list[str],
    cold_emails: list[str],
    user_ids: list[int],
    emails: list[str],
    meta: dict[str, Any],
) -> None:
    write_json(data_dir / HOT_EMAILS_FILE, hot_emails)
    write_json(data_dir / COLD_EMAILS_FILE, cold_emails)
    write_json(data_dir / USER_IDS_FILE, user_ids)
    write_lines(data_dir / KEY_SPACE_FILE, emails)
    write_json(data_dir / META_FILE, meta)
