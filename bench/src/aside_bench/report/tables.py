"""The report's tables, built from StepResults (pure, unit-tested)."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from aside_bench.plan.steps import series_label
from aside_bench.records.goal import Goal
from aside_bench.records.repeats import figure_spread
from aside_bench.records.results import StepResult

MISSING = "n/a"
PERCENTILES = ("p50", "p95", "p99")
T = TypeVar("T")
# A column of a table of one row per item: its header and how it shows an item.
Column = tuple[str, Callable[[T], str]]


@dataclass(frozen=True)
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.headers) + " |"]
        lines.append("|" + "|".join("---:" if i else "---" for i in range(len(self.headers))) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
            for row in self.rows
        )
        return (
            f"<h3>{html.escape(self.title)}</h3>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def column_table(title: str, columns: Sequence[Column[T]], items: Iterable[T]) -> Table:
    """A table of one row per item, a cell per column."""
    rows = [[cell(item) for _, cell in columns] for item in items]
    return Table(title, [header for header, _ in columns], rows)


def fmt_ms(value: float | None) -> str:
    if value is None:
        return MISSING
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f}"


def fmt_pct(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.1f}%"


def fmt_rps(value: float) -> str:
    return f"{value:.1f}"


def series_order(results: list[StepResult]) -> list[tuple[str, str]]:
    """(arm, phase) pairs in the order they first ran."""
    return list(dict.fromkeys((r.step.arm, r.step.phase) for r in results))


def series_of(results: list[StepResult], arm: str, phase: str) -> list[StepResult]:
    """One series' steps, rates rising."""
    matching = (r for r in results if (r.step.arm, r.step.phase) == (arm, phase))
    return sorted(matching, key=lambda r: r.step.rate)


def rates_of(results: list[StepResult]) -> list[int]:
    return sorted({r.step.rate for r in results})


def has_cache(results: list[StepResult]) -> bool:
    return any(r.step.scenario != "compute" for r in results)


def fmt_num(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


@dataclass(frozen=True)
class CostColumn:
    header: str
    field: str  # of tierstats.StepCost
    digits: int | None  # decimals; None: a share, in %

    def value(self, result: StepResult) -> float | None:
        return None if result.cost is None else getattr(result.cost, self.field)

    def cell(self, result: StepResult) -> str:
        value = self.value(result)
        return fmt_pct(value) if self.digits is None else fmt_num(value, self.digits)


# Columns a probed step adds (tierstats.StepCost).
COST_COLUMNS = (
    CostColumn("gateway CPU ms/req", "cpu_ms_per_request", 2),
    CostColumn("machine busy", "machine_busy", None),
    CostColumn("of it, host steal", "host_steal", None),
    CostColumn("gateway RSS MiB", "gateway_rss_mib", 1),
    CostColumn("Redis RSS MiB", "redis_rss_mib", 1),
    CostColumn("L1 hit rate", "l1_hit_rate", None),
    CostColumn("L2 hit rate", "l2_hit_rate", None),
    CostColumn("L1 MiB", "l1_mib", 2),
)


def spread_cell(result: StepResult, name: str, text: str, fmt: Callable[[float], str]) -> str:
    """`text`, with the min-max of the step's runs where they differ as shown."""
    found = figure_spread(result, name)
    if found is None or fmt(found.low) == fmt(found.high):
        return text
    return f"{text} ({fmt(found.low)}-{fmt(found.high)})"


def loadgen_cells(result: StepResult) -> list[str]:
    """p95 from due, the driver's CPU cores, in flight/pool and the verdict."""
    due = MISSING if result.from_due is None else fmt_ms(result.from_due.p95)
    gen = result.loadgen
    if gen is None:
        return [due, MISSING, MISSING, MISSING]
    busy = MISSING if gen.inflight_peak is None else str(gen.inflight_peak)
    verdict = "saturated" if gen.saturated else "ok"
    return [due, fmt_num(gen.cpu_cores, 2), f"{busy}/{gen.pool}", verdict]


LOADGEN_HEADERS = ["p95 from due ms", "driver CPU cores", "in flight/pool", "load generator"]


def extra_columns(results: list[StepResult]) -> tuple[list[str], Callable[[StepResult], list[str]]]:
    """The cost columns `results` have, then the driver's where it was read: headers, cells."""
    costs = [c for c in COST_COLUMNS if any(c.value(r) is not None for r in results)]
    if not any(c.field == "l1_hit_rate" for c in costs):  # L1 MiB only with the L1 hit rate
        costs = [c for c in costs if c.field != "l1_mib"]
    loadgen = any(r.loadgen is not None for r in results)
    headers = [c.header for c in costs] + (LOADGEN_HEADERS if loadgen else [])
    return headers, lambda r: [c.cell(r) for c in costs] + (loadgen_cells(r) if loadgen else [])


def latency_of(result: StepResult, name: str) -> float | None:
    return None if result.latency is None else getattr(result.latency, name)


def latency_cell(result: StepResult, name: str) -> str:
    return fmt_ms(latency_of(result, name))


def series_table(results: list[StepResult], arm: str, phase: str) -> Table:
    """Every figure of one series at each rate, repeats as median (min-max)."""
    with_hits = has_cache(results)
    series = series_of(results, arm, phase)
    extra, extra_cells = extra_columns(series)
    hits = ["cache hit rate"] if with_hits else []
    headers = ["target /s", *(f"{p} ms" for p in PERCENTILES), "achieved /s", "drop rate", *hits]
    rows = []
    for result in series:
        row = [str(result.step.rate)]
        row += [spread_cell(result, p, latency_cell(result, p), fmt_ms) for p in PERCENTILES]
        row.append(spread_cell(result, "achieved", fmt_rps(result.achieved_rps), fmt_rps))
        row.append(spread_cell(result, "drops", fmt_pct(result.drop_rate), fmt_pct))
        if with_hits:
            row.append(spread_cell(result, "hit", fmt_pct(result.hit_rate), fmt_pct))
        rows.append(row + extra_cells(result))
    return Table(f"{series_label(arm, phase)}", headers + extra, rows)


def _find(results: list[StepResult], arm: str, phase: str, rate: int) -> StepResult | None:
    return next(
        (r for r in results if (r.step.arm, r.step.phase, r.step.rate) == (arm, phase, rate)), None
    )


def _series_steps(results: list[StepResult]) -> Iterator[tuple[str, int, StepResult]]:
    """(series label, rate, result) of every step, series by series, rates in order."""
    for arm, phase in series_order(results):
        for rate in rates_of(results):
            result = _find(results, arm, phase, rate)
            if result is not None:
                yield series_label(arm, phase), rate, result


def _baseline_and_best(
    pairs: list[tuple[str, str]],
) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The uncached arm and the cache arm's best phase, when both ran."""
    uncached = next((p for p in pairs if p[0] in ("nocache", "index")), None)
    cached = [p for p in pairs if p[0] == "cache"]
    if uncached is None or not cached:
        return None
    best = next((p for p in cached if p[1] == "warm"), cached[0])
    return uncached, best


def comparison_table(results: list[StepResult], percentile: str = "p95") -> Table:
    """Per rate, every series' percentile and drops, and the uncached / cached ratio."""
    pairs = series_order(results)
    labels = [series_label(arm, phase) for arm, phase in pairs]
    kinds = (f"{percentile} ms", "drops")
    headers = ["target /s", *(f"{one} {kind}" for one in labels for kind in kinds)]
    versus = _baseline_and_best(pairs)
    if versus:
        headers.append(f"{series_label(*versus[0])} / {series_label(*versus[1])} {percentile}")
    rows = []
    for rate in rates_of(results):
        row = [str(rate)]
        for arm, phase in pairs:
            result = _find(results, arm, phase, rate)
            value = latency_of(result, percentile) if result else None
            row += [fmt_ms(value), fmt_pct(result.drop_rate) if result else MISSING]
        if versus:
            slow, fast = (_find(results, *pair, rate) for pair in versus)
            a, b = (latency_of(r, percentile) if r else None for r in (slow, fast))
            row.append(f"{a / b:.1f}x" if a is not None and b is not None and b > 0 else MISSING)
        rows.append(row)
    return Table(f"{percentile} latency and drop rate by target rate", headers, rows)


def per_request_table(results: list[StepResult]) -> Table | None:
    """p95 of each request kind (count, create, delete), for runs that mix them."""
    names = sorted({name for r in results for name in r.by_name})
    if len(names) < 2:
        return None
    headers = ["series", "target /s"] + [f"{name} p95 ms" for name in names]
    rows = []
    for label, rate, result in _series_steps(results):
        cells = [fmt_ms(result.by_name[n].p95) if n in result.by_name else MISSING for n in names]
        rows.append([label, str(rate), *cells])
    return Table("p95 latency by request kind", headers, rows)


def _lag_ms(result: StepResult, field: str) -> str:
    cost = result.cost
    if cost is None:
        return MISSING
    if cost.lag_count == 0:
        return "none"  # no invalidation message reached a worker during the step
    value = getattr(cost, field)
    if value is None:
        return MISSING
    return "> 5000" if value == float("inf") else fmt_ms(value)


def _floor_ms(result: StepResult, field: str) -> str:
    cost = result.cost
    if cost is None or cost.floor_count is None:
        return MISSING  # not measured (an older run, or the subscriber failed)
    return "none" if cost.floor_count == 0 else fmt_ms(getattr(cost, field))


def staleness_table(results: list[StepResult]) -> Table | None:
    """The mixed scenario's stale reads and invalidation lag; None without a checker."""
    if not any(r.stale is not None for r in results):
        return None
    headers = ["series", "target /s", "checked reads", "stale reads", "no answer",
               "lag p50 ms", "lag p99 ms", "lag max ms <=", "lag samples",
               "floor p50 ms", "floor p99 ms"]  # fmt: skip
    rows = []
    counts = ("reads", "stale", "errors")
    for label, rate, result in _series_steps(results):
        stale, cost = result.stale, result.cost
        row = [label, str(rate)]
        row += [MISSING if stale is None else str(getattr(stale, name)) for name in counts]
        row += [_lag_ms(result, f"lag_{figure}_ms") for figure in ("p50", "p99", "max")]
        row.append(MISSING if cost is None else f"{cost.lag_count:.0f}")
        rows.append(row + [_floor_ms(result, f"floor_{figure}_ms") for figure in ("p50", "p99")])
    return Table("stale reads after acknowledged writes, and invalidation lag", headers, rows)


def saturated_steps(results: list[StepResult]) -> list[str]:
    """One line per step (or run of a step) where the driver was the limit, with why."""
    lines = []
    for result in results:
        gen = result.loadgen
        if gen is not None and gen.saturated:
            step = result.step
            which = f" run {step.repeat}" if step.repeat > 1 else ""
            label = f"{series_label(step.arm, step.phase)} @ {step.rate}/s{which}"
            lines.append(f"{label}: " + "; ".join(gen.reasons))
    return lines


def held_table(
    results: list[StepResult], goal: Goal, calibration: dict[str, int | None]
) -> Table | None:
    """Per series, the highest rate held against each calibration; None without one."""
    known = {name: rate for name, rate in calibration.items() if rate}
    if not known:
        return None
    headers = ["series", "highest rate held /s"] + [f"/ {name} calibration" for name in known]
    rows = []
    for arm, phase in series_order(results):
        series = series_of(results, arm, phase)
        held = [r.step.rate for r in series if goal.held(r) and not r.saturated]
        best = max(held) if held else None
        row = [series_label(arm, phase), MISSING if best is None else str(best)]
        row += [MISSING if best is None else f"{best / rate:.2f}" for rate in known.values()]
        rows.append(row)
    title = f"highest rate held in this run ({goal.words()}), against the machine's calibration"
    return Table(title, headers, rows)


def sweep_tables(results: list[StepResult]) -> list[Table]:
    tables = [comparison_table(results)]
    tables += [series_table(results, arm, phase) for arm, phase in series_order(results)]
    tables += [t for t in (per_request_table(results), staleness_table(results)) if t is not None]
    return tables


def step_cells(result: StepResult) -> list[str]:
    """A step's p50, p95, p99, achieved rate, drop rate and hit rate."""
    latencies = [latency_cell(result, name) for name in PERCENTILES]
    shares = [fmt_pct(result.drop_rate), fmt_pct(result.hit_rate)]
    return [*latencies, fmt_rps(result.achieved_rps), *shares]
