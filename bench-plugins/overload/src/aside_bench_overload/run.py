"""`aside-bench overload`: each arm's ceiling, then 0.6x, 1.25x, 1.5x, 2x and a recovery
at 0.6x started as the 2x schedule ends (docs/bench/suites.md, "Past the ceiling")."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import partial

from aside_bench.ceiling.search import Trial, ceiling_of, next_trial, run_again
from aside_bench.load.run import DriverProcess, LoadRun, deadline_s, new_driver
from aside_bench.load.samples import compress
from aside_bench.load.summary import Summary
from aside_bench.plan.arms import L1_ARMS, cache_param
from aside_bench.plan.steps import gateway_env, pool_cap, pool_for
from aside_bench.records.saturation import steal_share
from aside_bench.stack import gateway_metrics as gm
from aside_bench.stack import procs
from aside_bench.stack.config import Settings
from aside_bench.stack.machine import describe
from aside_bench.stack.prepare import StackError, expires_within, wait_until_quiet, warm_cache
from aside_bench.stack.seeddata import SeedData
from aside_bench.stack.services import ServiceControl
from aside_bench.sweep.stepprobe import GatewayProbe
from aside_bench.sweep.warmtiers import warm_l1
from aside_bench_suite.base import SuiteRun, increase, open_run, run_items, sleep_until

from aside_bench_overload import figures as fg
from aside_bench_overload import plan
from aside_bench_overload.plan import ArmResult, OverloadParams, OverloadRecord, OverloadRun
from aside_bench_overload.report import one_line, write_report


# ---- one driver ------------------------------------------------------------------------
@dataclass
class Bench:
    settings: Settings
    params: OverloadParams
    seed: SeedData
    cores: int
    probe: GatewayProbe  # the gateway's and Redis's CPU, when their pids are the stack loaded
    drivers: int = 0  # driver processes started so far (each its own files)
    # What a gateway worker holds before it answers 503, read as an arm starts (None: unsaid).
    connections_per_worker: int | None = None

    @property
    def max_pool(self) -> int:
        return pool_cap(self.params.max_pool, self.connections_per_worker)

    @property
    def lead_s(self) -> float:
        """How long before its first request a step's driver starts, to open its pool."""
        return self.params.open_lead_s if self.params.open_pool else 0.0

    def emails(self) -> list[str]:
        """Every email of the read mix, hot last so they expire last."""
        return self.seed.cold[: plan.COLD_SAMPLE] + self.seed.hot

    def load_run(
        self,
        arm: str,
        phase: str,
        rate: int,
        duration_s: int,
        samples: bool,
        start_at: float | None = None,
    ) -> LoadRun:
        """A step's driver run (samples kept unless a search step's); it opens its pool first
        (as a client's pool holds them) unless told not to; `start_at`: its first due (epoch s)."""
        self.drivers += 1
        stem = self.params.out_dir / f"{self.drivers:03d}-{arm}-{phase}-{rate}"
        pool = pool_for(rate, self.max_pool)
        mix = {"HOT_SHARE": str(plan.HOT_SHARE), "COLD_SAMPLE": str(plan.COLD_SAMPLE)}
        extra = {"CACHE": cache_param(arm) or "off", **mix}
        if self.params.open_pool:
            extra["CONNS"] = str(pool)
        if start_at is not None and start_at > time.time():  # the driver refuses one past
            extra["START_AT"] = str(round(start_at * 1000))
        return LoadRun(
            scenario="read",
            run_id=self.params.run_id,
            arm=arm,
            phase=phase,
            rate=rate,
            duration_s=duration_s,
            pool=pool,
            timeout_s=self.params.timeout_s,
            data_dir=self.seed.data_dir,
            extra=extra,
            summary_path=stem.with_suffix(".summary.json"),
            samples_path=stem.with_suffix(".jsonl") if samples else None,
        )

    def start(self, run: LoadRun) -> DriverProcess:
        return new_driver(self.settings, run, self.params.out_dir / "load.log").start()


def finish_driver(driver: DriverProcess, run: LoadRun) -> Summary:
    code = driver.wait(deadline_s(run))
    assert run.summary_path is not None
    summary = Summary.read(run.summary_path)
    if code != 0 or not summary.data:
        raise StackError(f"the load driver exited with {code}; see {driver.log_path}")
    return summary


# ---- the stack between steps ---------------------------------------------------------------
def prepare(bench: Bench, arm: str, span_s: int) -> None:
    """A quiet stack, and a cache whose keys outlive the next `span_s` seconds."""
    wait_until_quiet(bench.settings, plan.QUIET_DEADLINE_S)
    mode = cache_param(arm)
    if mode is None or mode == "off":
        return
    refill = expires_within(bench.settings, span_s + plan.TTL_MARGIN_S)
    # A warm-up read the door refuses is asked again (stack/prepare.py, DOOR_RETRY).
    if arm in L1_ARMS:  # L1 entries live 30 s: filled again through every worker each time
        warm_l1(bench.settings, bench.emails(), mode, flush=refill)
    elif refill:
        warm_cache(bench.settings, bench.emails(), flush=True, mode=mode)


def gateway_for(settings: Settings, arm: str) -> None:
    """The gateway restarted with an arm's own settings (warm reads write nothing to Redis,
    so untracked=False costs the other arms no tracking message)."""
    wanted = gateway_env(arm, untracked=False)
    if wanted:
        control = ServiceControl(settings)
        control.verify(("gateway",))
        control.restart("gateway", wanted)


# ---- the ceiling ------------------------------------------------------------------------------
def search_step(bench: Bench, arm: str, rate: int) -> fg.SearchStep:
    """One step of the search, with the gateway's sheds and the host's steal over it."""
    duration_s = bench.params.search_duration_s
    prepare(bench, arm, duration_s + math.ceil(bench.lead_s))
    run = bench.load_run(arm, "search", rate, duration_s, False, time.time() + bench.lead_s)
    before = counters(bench.settings).shed
    ticks = procs.machine_ticks()
    summary = finish_driver(bench.start(run), run)
    shed = increase(before, counters(bench.settings).shed)
    figures = summary.step_figures("read") or {}
    return fg.SearchStep(
        rate=rate,
        requests=int(figures.get("requests") or 0),
        p95_ms=figures.get("p95"),
        dropped=int(figures.get("dropped") or 0),
        failed=int(figures.get("failed") or 0),
        shed=round(sum(shed.values())),
        steal=steal_share(ticks, procs.machine_ticks()),
    )


def search_ceiling(bench: Bench, result: ArmResult) -> None:
    search = bench.params.search_of(result.arm)
    history: list[Trial] = []
    reruns = 0  # noisy misses of the rate now tried, run again
    while (rate := next_trial(history, search.rates)) is not None:
        found = search_step(bench, result.arm, rate)
        held = found.holds(search.p95_ms)
        again = run_again(held, found.noisy, reruns)
        reruns = reruns + 1 if again else 0
        if not again:
            history.append((rate, held))
        result.search.append((found, held, not again))
        verdict = "held" if held else "missed"
        if again:
            verdict += f" with the host stealing {found.steal:.0%}: run again"
        seen = f"{rate}/s p95 {found.p95_ms} ms, {found.dropped} dropped, {found.shed} shed"
        print(f"  [{result.arm} search] {seen}: {verdict}", flush=True)
    result.ceiling, result.capped = ceiling_of(history)
    if not result.ceiling:
        raise StackError(f"{result.arm}: no rate held p95 <= {search.p95_ms:g} ms")


# ---- the steps -----------------------------------------------------------------------------
def machine_reading(bench: Bench) -> fg.MachineReading | None:
    ticks = procs.machine_ticks()
    if ticks is None:
        return None
    ppids = procs.parents()
    return fg.MachineReading(
        busy_ticks=ticks.busy,
        total_ticks=ticks.total,
        steal_ticks=ticks.steal,
        gateway_ticks=bench.probe.cpu_ticks("gateway", ppids),
        redis_ticks=bench.probe.cpu_ticks("redis", ppids),
        clk_tck=procs.clock_ticks_per_s(),
        gateway_loops=bench.probe.loops_run_queue(ppids),
    )


def counters(settings: Settings) -> fg.Counters:
    """The gateway's counters as /metrics gives them: totals since its start."""
    text = gm.scrape(settings)
    followers = gm.summed_by_label(text, "aside_gateway_loop_followers_total", "outcome")
    return fg.Counters(
        gm.cache_error_counts(text).get("breaker_open", 0.0),
        followers.get("fallback", 0.0),
        gm.summed_by_label(text, "aside_gateway_shed_total", "reason"),
        gm.summed_by_label(text, "aside_gateway_redis_errors_judged_total", "verdict"),
        gm.unlabelled_value(text, "aside_gateway_admission_limit"),
        *(
            sum(v for _, v in gm.labelled_samples(text, f"aside_gateway_gc_pause_seconds_{part}"))
            for part in ("count", "sum")
        ),
    )


def counter_increase(before: fg.Counters, after: fg.Counters) -> fg.Counters:
    """What a step gained between two readings; the door's limit as at its end."""
    gained = {name: getattr(after, name) - getattr(before, name) for name in fg.Counters.TOTALS}
    judged = increase(before.redis_judged, after.redis_judged)
    return replace(after, **gained, shed=increase(before.shed, after.shed), redis_judged=judged)


@dataclass
class Edge:
    counters: fg.Counters
    machine: fg.MachineReading | None
    at: float = field(default_factory=time.time)


def edge(bench: Bench) -> Edge:
    return Edge(counters(bench.settings), machine_reading(bench))


@dataclass
class Running:
    label: str
    factor: float
    run: LoadRun
    driver: DriverProcess
    began: float
    before: Edge


def begin(
    bench: Bench, arm: str, label: str, factor: float, ceiling: int, lead_s: float | None = None
) -> Running:
    """A step's driver started; counters read as its first request falls due, `lead_s` on."""
    lead_s = bench.lead_s if lead_s is None else lead_s
    rate = max(1, round(factor * ceiling))
    phase = label.replace(" ", "-").replace(".", "_")
    at = time.time() + lead_s
    run = bench.load_run(arm, phase, rate, bench.params.duration_s, True, start_at=at)
    driver = bench.start(run)
    sleep_until(at)
    # A recovery step (no lead) reads them as its driver connects: on time however slow.
    return Running(label, factor, run, driver, at, edge(bench))


def end(
    bench: Bench, arm: str, running: Running, after: Edge
) -> tuple[fg.StepFigures, list[fg.Request]]:
    """A step's figures, and its requests for a judge of its recovery."""
    summary = finish_driver(running.driver, running.run)
    assert running.run.samples_path is not None
    path = running.run.samples_path
    with path.open() as handle:
        requests = fg.parse_requests(handle, path.name)
    compress(path)
    start = requests[0].due if requests else running.began
    before, machine = running.before, None
    if before.machine is not None and after.machine is not None:
        machine = fg.MachineShare.between(before.machine, after.machine, after.at - before.at)
    figures = fg.StepFigures(
        arm=arm,
        label=running.label,
        factor=running.factor,
        rate=running.run.rate,
        duration_s=running.run.duration_s,
        start=start,
        requests=fg.request_figures(requests, start, running.run.duration_s),
        counters=counter_increase(before.counters, after.counters),
        driver_cpu_s=summary.cpu_s,
        cores=bench.cores,
        machine=machine,
    )
    return figures, requests


def step(bench: Bench, arm: str, label: str, factor: float, ceiling: int) -> fg.StepFigures:
    running = begin(bench, arm, label, factor, ceiling)
    running.driver.wait(deadline_s(running.run))
    return end(bench, arm, running, edge(bench))[0]


def overload_then_recovery(
    bench: Bench, arm: str, ceiling: int, limit_ms: float | None
) -> tuple[fg.StepFigures, fg.StepFigures]:
    """The 2x step, then 0.6x from its schedule's end (its connecting counts against it)."""
    top = begin(bench, arm, "2x", plan.OVERLOAD_FACTORS[-1], ceiling)
    sleep_until(top.began + bench.params.duration_s)
    after = begin(bench, arm, "0.6x after", plan.BASELINE_FACTOR, ceiling, lead_s=0.0)
    # The 2x step's samples are read once the recovery is over: reading and
    # packing them takes a core for seconds, which the recovery would pay.
    after.driver.wait(deadline_s(after.run))
    after_edge = edge(bench)
    # The 2x step's readings end where the recovery's begin.
    overloaded, _ = end(bench, arm, top, after.before)
    recovering, requests = end(bench, arm, after, after_edge)
    overload_end = overloaded.start + overloaded.duration_s
    from_s = bench.params.targets.recovery_s
    return overloaded, recovering.recovered(requests, overload_end, limit_ms, from_s)


def run_arm(bench: Bench, arm: str) -> ArmResult:
    result = ArmResult(arm)
    params = bench.params
    gateway_for(bench.settings, arm)
    bench.connections_per_worker = gm.connection_bound(bench.settings)
    result.max_pool = bench.max_pool
    if arm in params.ceilings:
        result.ceiling, result.ceiling_from = params.ceilings[arm], "given"
    else:
        result.ceiling_from = "search"
        search_ceiling(bench, result)
    ceiling = result.ceiling
    assert ceiling is not None
    print(f"  [{arm}] ceiling {ceiling}/s ({result.ceiling_from}); the steps ...", flush=True)
    # A step's span: its driver's lead to open its connections, and its load.
    duration = params.duration_s + math.ceil(params.open_lead_s)
    firsts = [("0.6x before", plan.BASELINE_FACTOR)]
    firsts += [(f"{factor:g}x", factor) for factor in plan.OVERLOAD_FACTORS[:-1]]
    for label, factor in firsts:
        prepare(bench, arm, duration)
        result.steps.append(step(bench, arm, label, factor, ceiling))
    before = result.steps[0]
    prepare(bench, arm, 2 * duration)
    limit = fg.recovery_limit_ms(before, params.targets)
    result.steps += overload_then_recovery(bench, arm, ceiling, limit)
    for figures in result.steps[1:-1]:
        result.checks += fg.overload_checks(figures, ceiling, params.targets)
    result.checks.append(fg.recovery_check(result.steps[-1], before, params.targets))
    return result


# ---- the run ---------------------------------------------------------------------------------
def run_overload(settings: Settings, params: OverloadParams, seed: SeedData) -> OverloadRun:
    machine = describe()
    bench = Bench(settings, params, seed, int(machine["nproc"] or 1), GatewayProbe(settings))
    run = SuiteRun(params.run_id, "overload", seed.meta, _params_record(params, settings))
    what = f"arms {' '.join(params.arms)}, {params.duration_s} s steps"
    open_run("overload", params.run_id, params.out_dir, what)
    arms = run_items(run, params.arms, partial(run_arm, bench), ArmResult.failed, {}, one_line)
    write_report(run, arms, params.out_dir)
    return run


def _params_record(params: OverloadParams, settings: Settings) -> OverloadRecord:
    return {
        "arms": list(params.arms),
        "ceilings_given": params.ceilings,
        "duration_s": params.duration_s,
        "baseline_factor": plan.BASELINE_FACTOR,
        "overload_factors": list(plan.OVERLOAD_FACTORS),
        "search": params.search.rates.__dict__,
        "search_duration_s": params.search_duration_s,
        "search_p95_ms": params.search.p95_ms,
        "arm_searches": {
            arm: {"rates": search.rates.__dict__, "p95_ms": search.p95_ms}
            for arm, search in params.arm_searches.items()
            if arm in params.arms and arm not in params.ceilings
        },
        "timeout_s": params.timeout_s,
        "max_pool": params.max_pool,
        "open_pool": params.open_pool,
        "open_lead_s": params.open_lead_s,
        "hot_share": plan.HOT_SHARE,
        "cold_sample": plan.COLD_SAMPLE,
        "goodput_within_ms": fg.GOODPUT_WITHIN_MS,
        "targets": params.targets.__dict__,
        "gateway_url": settings.gateway_url,
    }
