"""How a cached track is stored: the large-value policy of contracts/cache.json
("large_values"), pure functions only.

A track's answer can be megabytes of JSON. Above CACHE_LARGE_VALUE_BYTES the
policy decides what goes to Redis instead of the plain text:

* `compress`: a frame of CACHE_CODEC (zstd or gzip), recognised on reading by
  the codec's own magic number, so any reader decodes any stored value;
* `simplify`: the whole-track route answers, and stores, the track simplified
  at CACHE_SIMPLIFY_TOLERANCE (web/tracks.py asks the core); what is still large
  after that is compressed;
* `skip`: the too-large marker, so readers go to PostgreSQL without queueing
  behind a lease for a value that will never be stored;
* `raw`: the text as it is (what the slow app did).

The policy's tag ends the key (cache_keys.track_key), so a value stored under
one policy is never read under another.
"""

from __future__ import annotations

import gzip
import io
import threading

import zstandard

from aside_gateway.contracts import cache_keys
from aside_gateway.contracts.cache_keys import (
    CODEC_GZIP,
    CODEC_ZSTD,
    DECODED_MAX_BYTES,
    POLICY_COMPRESS,
    POLICY_RAW,
    POLICY_SKIP,
    TOO_LARGE,
)

ZSTD_LEVEL = 3  # zstd's default: most of the ratio for a fraction of the CPU of higher levels
GZIP_LEVEL = 6

# zstandard's (de)compressors must not be shared between threads at once:
# one pair per Flask thread.
_local = threading.local()


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "zstd", None)
    if pair is None:
        pair = (zstandard.ZstdCompressor(level=ZSTD_LEVEL), zstandard.ZstdDecompressor())
        _local.zstd = pair
    return pair


class MalformedValue(ValueError):
    """A stored frame that does not decode: a miss, deleted and filled again."""


def policy_tag(policy: str, codec: str) -> str:
    """The last segment of a track key: the codec for `compress`, else the policy."""
    return codec if policy == POLICY_COMPRESS else policy


codec_of = cache_keys.codec_of


def compress(value: bytes, codec: str) -> bytes:
    if codec == CODEC_ZSTD:
        return _zstd()[0].compress(value)
    if codec == CODEC_GZIP:
        return gzip.compress(value, compresslevel=GZIP_LEVEL, mtime=0)
    raise ValueError(f"unknown codec {codec!r}")


def decode(stored: bytes) -> bytes | None:
    """The JSON text of a stored value; None for the too-large marker."""
    if stored == TOO_LARGE:
        return None
    codec = codec_of(stored)
    try:
        if codec == CODEC_ZSTD:
            return _zstd()[1].decompress(stored, max_output_size=DECODED_MAX_BYTES)
        if codec == CODEC_GZIP:
            return _gunzip(stored)
    except (zstandard.ZstdError, OSError, EOFError) as exc:
        raise MalformedValue(f"{codec} frame does not decode: {exc}") from None
    return stored


def _gunzip(stored: bytes) -> bytes:
    with gzip.GzipFile(fileobj=io.BytesIO(stored)) as frame:
        out = frame.read(DECODED_MAX_BYTES + 1)
    if len(out) > DECODED_MAX_BYTES:
        raise OSError("decoded value over the size bound")
    return out


def stored_form(answer: bytes, policy: str, codec: str, threshold: int) -> bytes:
    """What to store for `answer` (a track's JSON, or the negative entry).
    Under `simplify` the answer was already simplified when large (web/tracks.py);
    what is still large is compressed."""
    if len(answer) <= threshold or answer == cache_keys.NEGATIVE or policy == POLICY_RAW:
        return answer
    if policy == POLICY_SKIP:
        return TOO_LARGE
    return compress(answer, codec)
