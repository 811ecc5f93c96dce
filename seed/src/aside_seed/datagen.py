"""The users Aside benchmarks on: realistic, deterministic for a seed, and fast to make.

Calling Faker once per row runs at about 6,000 rows/s, so Faker is called only a
few thousand times, to fill pools of parts (first names, last names, e-mail
domains) per locale. Rows combine those parts with numpy's seeded generator,
a block of rows at a time, and end with the row id in base 36, which makes every
username and every cold e-mail unique by construction.

Each block of BLOCK_ROWS rows has its own generator seeded from (seed, block
number), so a row depends only on the seed and its id, never on how the load is
split. Changing BLOCK_ROWS, the pools or the patterns changes the data of a seed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from faker import Faker

BLOCK_ROWS = 10_000

# created_at is spread over five years ending at a fixed date, not at "now", so
# the same seed gives the same timestamps whatever day it runs. It grows with id,
# as sign-up times do.
WINDOW_START = datetime(2021, 1, 1, tzinfo=UTC)
WINDOW_END = datetime(2026, 1, 1, tzinfo=UTC)
UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PG_EPOCH_UNIX_US = 946_684_800_000_000  # 2000-01-01, the zero of binary timestamptz

# Locale -> share of users, in percent (sums to 100).
LOCALE_SHARES = {
    "en_US": 30,
    "en_GB": 10,
    "de_DE": 10,
    "fr_FR": 10,
    "es_ES": 10,
    "it_IT": 8,
    "pt_BR": 8,
    "nl_NL": 5,
    "pl_PL": 5,
    "sv_SE": 4,
}
# Pool sizes per locale, each filled by that many Faker draws. Duplicates are
# kept, so a common name stays common.
NAMES_PER_LOCALE = 400
FREE_DOMAINS_PER_LOCALE = 48
COMPANY_DOMAINS_PER_LOCALE = 16
DOMAINS_PER_LOCALE = FREE_DOMAINS_PER_LOCALE + COMPANY_DOMAINS_PER_LOCALE
NAME_MAX_CHARS = 20
FAKER_PROVIDERS = ["faker.providers.person", "faker.providers.internet", "faker.providers.company"]

# A username or a cold e-mail's local part is: piece, separator, piece,
# separator, the row id in base 36. The id holds no separator, so two usernames
# (or two cold addresses) can only be equal if their ids are. Cold local parts
# have two separators; hot ones at most one, so hot and cold never meet.
Pattern = tuple[str, str, str, str]
USERNAME_PATTERNS: tuple[Pattern, ...] = (
    ("first", "_", "last", "_"),
    ("first", ".", "last", "."),
    ("first", "", "last", "_"),
    ("initial", "", "last", "."),
)
COLD_EMAIL_PATTERNS: tuple[Pattern, ...] = (
    ("first", ".", "last", "."),
    ("first", "_", "last", "."),
    ("initial", ".", "last", "."),
    ("last", ".", "first", "."),
)

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_B36_PAIRS = [a + b for a in _B36 for b in _B36]
_TRANSLITERATION = str.maketrans(
    {"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "ß": "ss", "æ": "ae", "Æ": "Ae", "đ": "d"}
    | {"Đ": "D", "œ": "oe", "Œ": "Oe", "þ": "th", "ð": "d", "\u0131": "i"}
)
_DOMAIN_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
_FAKER_ATTEMPTS = 20  # draws allowed per pool entry before giving up


@dataclass(frozen=True)
class DataShape:
    """What the caller asked for; already validated by the CLI."""

    rows: int
    seed: int
    hot_emails: int
    hot_ratio: float

    @property
    def hot_rows(self) -> int:
        """Rows that use a hot address: an exact number, not a random draw."""
        return round(self.rows * self.hot_ratio) if self.hot_emails else 0

    def hot_rows_before(self, offset: int) -> int:
        """Hot rows among the first `offset` rows: spreads them evenly over blocks."""
        return offset * self.hot_rows // self.rows

    @property
    def blocks(self) -> int:
        return -(-self.rows // BLOCK_ROWS)


@dataclass(frozen=True)
class LocaleParts:
    firsts: tuple[str, ...]
    lasts: tuple[str, ...]
    domains: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """Rows first_id .. first_id + len - 1, as columns."""

    first_id: int
    usernames: list[str]
    emails: list[str]
    created_us: list[int]  # microseconds since the Unix epoch, UTC

    def __len__(self) -> int:
        return len(self.usernames)

    @property
    def ids(self) -> range:
        return range(self.first_id, self.first_id + len(self))

    def rows(self) -> list[tuple[int, str, str, int]]:
        return list(zip(self.ids, self.usernames, self.emails, self.created_us, strict=True))


def to_base36(number: int) -> str:
    if number < 0:
        raise ValueError("number must be >= 0")
    digits = ""
    while number:
        number, rest = divmod(number, 36)
        digits = _B36[rest] + digits
    return digits or "0"


def base36_range(first: int, count: int) -> list[str]:
    """to_base36 of first .. first + count - 1, fast: the digits above the last
    two only change every 1296 numbers."""
    out: list[str] = []
    number, end = first, first + count
    while number < end:
        high, low = divmod(number, 1296)
        stop = min(end, (high + 1) * 1296)
        if high:
            prefix = to_base36(high)
            out += [prefix + pair for pair in _B36_PAIRS[low : low + stop - number]]
        else:
            out += [to_base36(n) for n in range(number, stop)]
        number = stop
    return out


def ascii_name(raw: str) -> str:
    """'Wojtoń' -> 'wojton', 'da Mata' -> 'damata': only a-z, so never a separator."""
    decomposed = unicodedata.normalize("NFKD", raw.translate(_TRANSLITERATION))
    letters = "".join(c for c in decomposed if c.isascii() and c.isalpha())
    return letters.lower()[:NAME_MAX_CHARS]


def ascii_domain(raw: str) -> str:
    """Faker's domain as plain ASCII, or "" when it would not be a valid one."""
    decomposed = unicodedata.normalize("NFKD", raw.translate(_TRANSLITERATION)).lower()
    domain = "".join(c for c in decomposed if c.isascii())
    labels = domain.split(".")
    if len(labels) < 2 or not all(_DOMAIN_LABEL.match(label) for label in labels):
        return ""
    return domain


def build_parts(seed: int) -> list[LocaleParts]:
    """The pools, one per locale, in LOCALE_SHARES order."""
    return [_locale_parts(locale, seed) for locale in LOCALE_SHARES]


def _locale_parts(locale: str, seed: int) -> LocaleParts:
    # Only the providers used: loading all of them costs ~0.1 s per locale.
    fake = Faker(locale, providers=FAKER_PROVIDERS)
    fake.seed_instance(f"aside-seed:{seed}:{locale}")
    return LocaleParts(
        firsts=_draw(fake.first_name, NAMES_PER_LOCALE, ascii_name),
        lasts=_draw(fake.last_name, NAMES_PER_LOCALE, ascii_name),
        domains=_draw(fake.free_email_domain, FREE_DOMAINS_PER_LOCALE, ascii_domain)
        + _draw(fake.domain_name, COMPANY_DOMAINS_PER_LOCALE, ascii_domain),
    )


def _draw(make: Callable[[], str], count: int, clean: Callable[[str], str]) -> tuple[str, ...]:
    """Exactly `count` cleaned Faker values (equal pool sizes keep indexing simple)."""
    kept: list[str] = []
    for _ in range(count * _FAKER_ATTEMPTS):
        if value := clean(make()):
            kept.append(value)
            if len(kept) == count:
                return tuple(kept)
    raise RuntimeError(f"Faker gave too few usable values from {make.__name__}")


def _locale_of_percentile(parts: Sequence[LocaleParts]) -> np.ndarray:
    """100 entries, each locale index repeated by its share."""
    shares = list(LOCALE_SHARES.values())
    if len(parts) != len(shares):
        raise ValueError("one LocaleParts per locale of LOCALE_SHARES")
    return np.repeat(np.arange(len(shares)), shares)


def make_hot_emails(parts: Sequence[LocaleParts], seed: int, count: int) -> list[str]:
    """`count` distinct shared addresses, at most one separator in the local part."""
    rng = np.random.default_rng([seed, 0x407])
    percentile = _locale_of_percentile(parts)
    emails: dict[str, None] = {}  # insertion-ordered set
    while len(emails) < count:
        part = parts[percentile[rng.integers(100)]]
        first = part.firsts[rng.integers(NAMES_PER_LOCALE)]
        last = part.lasts[rng.integers(NAMES_PER_LOCALE)]
        local = (f"{first}.{last}", f"{first}{last}", f"{first[0]}.{last}")[rng.integers(3)]
        if len(emails) >= 10 * NAMES_PER_LOCALE or rng.integers(8) == 0:
            local += str(rng.integers(1, 10_000))  # "maria.gonzalez84", as people do
        emails.setdefault(f"{local}@{part.domains[rng.integers(DOMAINS_PER_LOCALE)]}")
    return list(emails)


class RowMaker:
    """Makes the rows of one data set, block by block."""

    def __init__(self, shape: DataShape, parts: Sequence[LocaleParts], hot: Sequence[str]):
        if shape.hot_rows and not hot:
            raise ValueError("hot rows need at least one hot address")
        self.shape = shape
        self._hot = np.array(hot, dtype=object)
        self._locale_of_percentile = _locale_of_percentile(parts)
        self._firsts = np.array([n for p in parts for n in p.firsts], dtype=object)
        self._initials = np.array([n[0] for p in parts for n in p.firsts], dtype=object)
        self._lasts = np.array([n for p in parts for n in p.lasts], dtype=object)
        self._domains = np.array([d for p in parts for d in p.domains], dtype=object)
        self._start_us = (WINDOW_START - UNIX_EPOCH) // timedelta(microseconds=1)
        self._step_us = ((WINDOW_END - WINDOW_START) // timedelta(microseconds=1)) / shape.rows

    def blocks(self) -> Iterator[Block]:
        for index in range(self.shape.blocks):
            yield self.block(index)

    def block(self, index: int) -> Block:
        first_offset = index * BLOCK_ROWS
        count = min(BLOCK_ROWS, self.shape.rows - first_offset)
        rng = np.random.default_rng([self.shape.seed, index])
        locale = self._locale_of_percentile[rng.integers(0, 100, count)]
        first_index = locale * NAMES_PER_LOCALE + rng.integers(0, NAMES_PER_LOCALE, count)
        last_index = locale * NAMES_PER_LOCALE + rng.integers(0, NAMES_PER_LOCALE, count)
        name = {
            "first": self._firsts[first_index],
            "initial": self._initials[first_index],
            "last": self._lasts[last_index],
        }
        domain_index = locale * DOMAINS_PER_LOCALE + rng.integers(0, DOMAINS_PER_LOCALE, count)
        suffix = np.array(base36_range(first_offset + 1, count), dtype=object)
        usernames = _combine(rng, USERNAME_PATTERNS, name, suffix)
        local_parts = _combine(rng, COLD_EMAIL_PATTERNS, name, suffix)
        emails = np.array(
            [
                f"{local}@{d}"
                for local, d in zip(local_parts, self._domains[domain_index].tolist(), strict=True)
            ],
            dtype=object,
        )
        self._place_hot(rng, first_offset, emails)
        offsets = np.arange(first_offset, first_offset + count) + rng.random(count)
        created = self._start_us + (offsets * self._step_us).astype(np.int64)
        return Block(first_offset + 1, usernames, emails.tolist(), created.tolist())

    def _place_hot(self, rng: np.random.Generator, first_offset: int, emails: np.ndarray) -> None:
        """Hot row number j of the whole table gets hot address j mod H, so every
        hot address is used by floor(hot_rows / H) rows or one more."""
        shape = self.shape
        hot_before = shape.hot_rows_before(first_offset)
        count = shape.hot_rows_before(first_offset + len(emails)) - hot_before
        if count:
            positions = rng.permutation(len(emails))[:count]
            emails[positions] = self._hot[(hot_before + np.arange(count)) % len(self._hot)]


def _combine(
    rng: np.random.Generator,
    patterns: Sequence[Pattern],
    name: dict[str, np.ndarray],
    suffix: np.ndarray,
) -> list[str]:
    """One string per row: a randomly chosen pattern filled with its names and id."""
    choice = rng.integers(0, len(patterns), len(suffix))
    out = np.empty(len(suffix), dtype=object)
    for pattern_no, (piece_a, sep_a, piece_b, sep_b) in enumerate(patterns):
        rows = np.flatnonzero(choice == pattern_no)
        parts_a = name[piece_a][rows].tolist()
        parts_b = name[piece_b][rows].tolist()
        out[rows] = [
            f"{a}{sep_a}{b}{sep_b}{x}"
            for a, b, x in zip(parts_a, parts_b, suffix[rows].tolist(), strict=True)
        ]
    return out.tolist()
