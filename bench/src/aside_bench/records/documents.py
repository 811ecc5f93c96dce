"""run.json's sections and a step's sub-documents, as the JSON holds them (read by key)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NotRequired, TypedDict


class LatencyFigures(TypedDict, total=False):
    """Quantiles in ms (None: nothing answered) and the answered requests they are of."""

    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    answered: int


class NamedFigures(LatencyFigures, total=False):
    requests: int


class StaleFigures(TypedDict):
    reads: int
    stale: int
    errors: int


class StepSummary(LatencyFigures, total=False):
    """A step's "summary": the driver's figures of its scenario; an older run's may lack some."""

    requests: int
    iterations: int
    failed: int
    dropped: int
    late: int
    status: dict[str, int]
    from_due: LatencyFigures
    pool: int | None
    inflight_peak: int | None
    bytes_received: int | None
    by_name: dict[str, NamedFigures]
    stale: StaleFigures
    compute: StepSummary  # the scenario beside the reads (interference's)


class ProbeReading(TypedDict, total=False):
    """One reading around a step (sweep/stepprobe.py); the counters absent when /metrics failed."""

    t: float
    clk_tck: int
    machine_ticks: Sequence[int] | None  # busy, total, steal
    cpu_ticks: int | None
    service_cpu_ticks: dict[str, int | None]
    requests: float
    tier_reads: dict[str, float]
    lag_buckets: dict[str, float]
    l1_entries: float | None
    l1_bytes: float | None
    error: str
    gateway_rss_kib: int | None
    redis_rss_kib: int | None


class FloorFigures(TypedDict):
    """The invalidation lag at a subscriber doing nothing else (ms)."""

    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class StepProbe(TypedDict):
    """A step's "probe": the readings right before and after its load."""

    start: ProbeReading
    end: NotRequired[ProbeReading]
    floor: NotRequired[FloorFigures | None]  # mixed steps only


class WarmFill(TypedDict, total=False):
    """How a warm step's cache was filled; a scenario's own fill adds its fields."""

    keys: int
    fill_s: float
    hit_share_after: float
    passes: int
    l1_hit_share_by_pass: list[float | None]
    reached: bool


class HopTimes(TypedDict):
    median_ms: float
    p95_ms: float


class DriverRun(TypedDict):
    cpu_s: float | None
    cpu_limit_cores: float | None


class ProbeFound(TypedDict, total=False):
    rate: int
    held: bool
    p95_ms: float


class TargetSearched(TypedDict, total=False):
    """One target's calibration search (calibration/calibrate.py)."""

    url: str
    what: str
    rate: int
    capped: bool
    out_of_time: bool
    missed_at: int | None
    seconds: float
    probes: list[ProbeFound]


class CalibrationRecord(TypedDict):
    params: dict[str, float]  # CalibrationParams
    targets: dict[str, TargetSearched]


class Machine(TypedDict):
    """run.json's "machine" (stack/machine.py describe), calibrated or not."""

    nproc: int
    memory_bytes: int
    memory_gib: float
    kernel: str
    cpu: str
    hostname: str
    note: str
    calibration: NotRequired[CalibrationRecord]


class SeedMeta(TypedDict, total=False):
    """run.json's "seed": the seeder's seed_meta.json."""

    rows: int
    seed: int
    hot_emails: int
    hot_ratio: float
    index: bool
    created_at: str
    table_rows: int
    max_id: int
    hot_rows: int
    cold_rows: int
    files: dict[str, str]
    copy_format: str
    tracks: int
    faker_version: str
    numpy_version: str
    python: str


class TraceParams(TypedDict):
    file: str
    path: str
    lines: int
    keys: int
    rate: float | None


class PriceParams(TypedDict):
    vcpu_hour: float
    gib_hour: float


class DistanceRecord(TypedDict):
    source: str  # stack/distance.py as_record
    hops: dict[str, dict[str, float]]  # round_trip_ms, jitter_ms by hop


class RunParams(TypedDict, total=False):
    """run.json's "params": the request mix, the command's own, and a scenario's own fields."""

    hot_share: float
    hot_count: int
    cold_sample: int
    cold_sample_used: int
    dist: str
    alpha: float
    keys: int
    trace: TraceParams
    write_share: float
    complexity: int
    timeout_s: int
    stale_per_min: int
    stale_reads_after: int
    max_pool: int
    data_dir: str
    scenario: str
    duration_s: int
    warm: bool
    rates: list[int]
    arms: list[str]
    repeat: int
    cache_policy: str
    distances: dict[str, DistanceRecord]
    p95_limit_ms: float
    search: dict[str, float]  # ceiling/search.py SearchParams
    reference: bool
    driver_cpu_limit_cores: float
    driver_cpu_share: float
    samples_file: bool
    prices: PriceParams
