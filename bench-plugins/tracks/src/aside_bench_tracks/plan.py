"""The `tracks` scenario's plan (pure): GET /api/v1/tracks/<id> over the seeded sizes,
an arm per way of caching them."""

from __future__ import annotations

SCENARIO = "tracks"
# arm -> the query parameters of its reads (lab switches of the gateway).
ARM_PARAMS = {
    "nocache": {"cache": "off"},
    "cache": {"large": "raw"},
    "cache-compressed": {"large": "compress"},
    "cache-simplified": {"large": "simplify"},
    "cache-skip": {"large": "skip"},
}
ARMS = tuple(ARM_PARAMS)
CACHE_ARMS = tuple(arm for arm in ARMS if arm != "nocache")
DEFAULT_ARMS = ("nocache", "cache", "cache-compressed", "cache-simplified")
DEFAULT_RATES = (10, 25, 50, 100, 250, 500)
# Size classes of a track's whole answer (bytes): upper bounds, the last open.
SIZE_BOUNDS = (16_384, 65_536, 262_144, 1_048_576)
SIZE_LABELS = ("< 16 kB", "16-64 kB", "64-256 kB", "256 kB-1 MB", ">= 1 MB")


def size_class(size: int) -> int:
    return next((i for i, bound in enumerate(SIZE_BOUNDS) if size < bound), len(SIZE_BOUNDS))


def class_of_name(name: str) -> int | None:
    prefix = "track "
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        return None
    return int(name[len(prefix) :])


def query(arm: str) -> str:
    return "&".join(f"{key}={value}" for key, value in ARM_PARAMS[arm].items())


def driver_variables(arm: str) -> dict[str, str]:
    return {"ARM_QUERY": query(arm), "SIZE_BOUNDS": ",".join(map(str, SIZE_BOUNDS))}
