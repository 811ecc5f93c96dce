"""`aside-bench create-rate`: the highest rate of keyed creates held, ascending
rates then midpoints (docs/bench/suites.md, "Soak and create-rate")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from aside_bench.load.run import LoadRun, deadline_s, new_driver
from aside_bench.load.summary import Summary, SummaryError
from aside_bench.report.tables import Table, fmt_num
from aside_bench.stack import config
from aside_bench.stack.prepare import StackError
from aside_bench.stack.seeddata import SeedData
from aside_bench_suite import base as suite
from aside_bench_suite.samples import SCENARIO, LoadTallies, load_tallies

P95_LIMIT_MS = 100.0
TIMEOUT_S = 10


@dataclass(frozen=True)
class StepResult:
    rate: int
    requests: int
    created: int
    failed: int
    dropped: int
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    load_exit: int

    def held(self, p95_limit_ms: float) -> bool:
        clean = self.load_exit == 0 and self.requests > 0 and self.dropped == self.failed == 0
        return clean and self.p95_ms is not None and self.p95_ms <= p95_limit_ms


def step_result(rate: int, tallies: LoadTallies, load_exit: int) -> StepResult:
    counts = {cls: int(tallies.get(f"create_{cls}", 0)) for cls in ("2xx", "4xx", "5xx", "error")}
    latency = tallies.get("create_ms") or {}
    return StepResult(
        rate=rate,
        requests=sum(counts.values()),
        created=counts["2xx"],
        failed=counts["4xx"] + counts["5xx"] + counts["error"],
        dropped=int(tallies.get("dropped", 0)),
        p95_ms=latency.get("p95"),
        p99_ms=latency.get("p99"),
        max_ms=latency.get("max"),
        load_exit=load_exit,
    )


def highest_held(results: list[StepResult], p95_limit_ms: float) -> int | None:
    """The highest rate held with every lower rate tried held too (pure)."""
    best = None
    for result in sorted(results, key=lambda r: r.rate):
        if not result.held(p95_limit_ms):
            break
        best = result.rate
    return best


def next_midpoint(results: list[StepResult], p95_limit_ms: float, resolution: int) -> int | None:
    """The rate halfway between the highest held and the lowest rate above it
    that failed; None when there is no such pair or they are `resolution` apart."""
    held = highest_held(results, p95_limit_ms)
    failed = [
        r.rate for r in results if not r.held(p95_limit_ms) and (held is None or r.rate > held)
    ]
    if not failed:
        return None
    low, high = held or 0, min(failed)
    if high - low <= resolution:
        return None
    return (low + high) // 2


@dataclass(frozen=True)
class Params:
    run_id: str
    out_dir: Path
    rates: list[int]
    duration_s: int
    via: str
    p95_limit_ms: float
    refine: int
    resolution: int


def load_run(params: Params, seed: SeedData, rate: int, base_url: str, summary: Path) -> LoadRun:
    return LoadRun(
        scenario=SCENARIO,
        run_id=params.run_id,
        arm=params.via,
        phase="create",
        rate=rate,
        duration_s=params.duration_s,
        # Room for 1 s of latency at the rate, and some.
        pool=rate + 50,
        timeout_s=TIMEOUT_S,
        data_dir=seed.data_dir,
        extra={
            "WRITE_SHARE": "1",
            "USER_PREFIX": suite.user_prefix(params.run_id, f"r{rate}"),
            "NO_REUSE": "0",
        },
        base_url=base_url,
        summary_path=summary,
    )


def run_step(settings: config.Settings, params: Params, seed: SeedData, rate: int) -> StepResult:
    base_url = settings.core_url if params.via == "core" else settings.gateway_url
    summary_path = params.out_dir / f"load-summary-{rate}.json"
    run = load_run(params, seed, rate, base_url, summary_path)
    load = new_driver(settings, run, params.out_dir / "load.log")
    code = load.run_measured(deadline_s(run))
    try:
        tallies = load_tallies(Summary.read(summary_path))
    except SummaryError as error:
        raise StackError(str(error)) from None
    result = step_result(rate, tallies, code)
    suite.remove_users(settings, params.run_id)
    verdict = "held" if result.held(params.p95_limit_ms) else "not held"
    print(
        f"  {result.rate}/s: {result.created}/{result.requests} created, {result.failed} failed, "
        f"{result.dropped} dropped, p95 {fmt_num(result.p95_ms)} ms: {verdict}",
        flush=True,
    )
    return result


def run_create_rate(settings: config.Settings, params: Params, seed: SeedData) -> suite.SuiteRun:
    what = f"keyed creates via the {params.via}, {params.duration_s} s per rate"
    suite.open_run("create-rate", params.run_id, params.out_dir, what)
    results: list[StepResult] = []
    for rate in sorted(params.rates):
        results.append(run_step(settings, params, seed, rate))
        if not results[-1].held(params.p95_limit_ms):
            break
    for _ in range(params.refine):
        middle = next_midpoint(results, params.p95_limit_ms, params.resolution)
        if middle is None:
            break
        results.append(run_step(settings, params, seed, middle))
    run = suite.SuiteRun(
        params.run_id,
        "create-rate",
        seed.meta,
        {**asdict(params), "out_dir": str(params.out_dir)},
        items=[asdict(r) | {"held": r.held(params.p95_limit_ms)} for r in results],
        extra={"highest_held": highest_held(results, params.p95_limit_ms)},
    )
    write_report(run, params.out_dir)
    return run


def steps_table(run: suite.SuiteRun) -> Table:
    headers = ["creates/s", "requests", "201", "failed", "dropped", "p95 ms", "p99 ms", "max ms",
               "held"]  # fmt: skip
    rows = [
        [
            *(str(s[k]) for k in ("rate", "requests", "created", "failed", "dropped")),
            *(fmt_num(s[k]) for k in ("p95_ms", "p99_ms", "max_ms")),
            "yes" if s["held"] else "no",
        ]
        for s in sorted(run.items, key=lambda s: s["rate"])
    ]
    return Table("Keyed creates by target rate", headers, rows)


def write_report(run: suite.SuiteRun, out_dir: Path) -> None:
    params = run.params
    table = steps_table(run)
    doc = suite.suite_page("create rate", run)
    doc.p(
        f"POST /api/v1/users with an Idempotency-Key, straight to the {params['via']}, "
        f"{params['duration_s']} s per rate (the load driver at a constant arrival rate, "
        "connections reused). "
        f"Held: no dropped iteration, every create 201, p95 <= {params['p95_limit_ms']:g} ms."
    )
    doc.table(table)
    best = run.extra["highest_held"]
    doc.p(f"Highest rate held: {best if best is not None else 'none'} creates/s.")
    suite.save_report(doc, run, out_dir, [table], also=[f"highest rate held: {best} creates/s"])
