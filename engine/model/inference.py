"""Inference serving: requests arrive, each replica (TP x PP GPUs) runs them with in-flight batching.

One representative replica serves its share of the job's requests (the rate divided over the DP replicas):
its memory (engine/model/serving_memory.py: weights, activations, a paged K/V cache), its scheduler
(engine/model/serving_engine.py: chunked prefill within a token budget, admission by free cache blocks,
preemption when the cache is full) and the cost of each iteration (engine/model/serving_cost.py: GEMMs bound
by the weights' reads or the tensor cores, the K/V cache read, attention, the TP all-reduces, the engine's own
overhead) give every request's time to its first token and between its tokens, and the replica's throughput.

Requests are Poisson arrivals with lengths of the job's means, fixed (`length_spread = 0`: as benchmarks run)
or spread as real traffic is (gamma with that coefficient of variation). `request_rate = "max"` queues every
request at once: an offline benchmark of the replica's maximum throughput. `requests = N` measures a
benchmark of N requests whole, ramp-up and drain included, as trtllm-bench and its kind report it; otherwise
the steady state after a warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config.errors import UserError
from ..config.job import Job
from ..config.phases import CODE
from ..config.scenario import Scenario
from ..config.units import GB
from . import compute as cm
from .plan import Interval, StepPlan
from .serving_cost import Iteration, IterationCost
from .serving_engine import Engine, Outcome, Requests
from .serving_memory import ServingMemory, serving_memory

WINDOW_REQUESTS = 2000       # completed requests measured after warm-up
WARMUP_REQUESTS = 200
MAX_REQUESTS = 50_000        # requests one replica's simulation serves at most (a longer benchmark runs the
                             # same steady state for longer)
MAX_PREFILL_ITERATIONS = 2_000_000   # prompt chunks a simulation may take one iteration at a time
PLAN_ITERATIONS = 400        # iterations of the measured timeline that make up the repeated plan
SATURATED = 0.97             # served below this share of the offered rate: the replicas are saturated
_CACHE: dict[tuple[Any, ...], ServingResult] = {}


@dataclass(frozen=True)
class Latency:
    """A latency's median, mean and 99th percentile (seconds)."""

    median: float
    mean: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Latency:
        values = values[np.isfinite(values)]
        if values.size == 0:
            return cls(math.nan, math.nan, math.nan)
        return cls(float(np.median(values)), float(values.mean()), float(np.percentile(values, 99)))


@dataclass(frozen=True)
class ServingResult:
    memory: ServingMemory
    batch_limit: int             # requests of the mean context a replica's cache (and max_batch) holds
    tokens_per_s: float          # output tokens per second, whole job
    requests_per_s: float        # completed requests per second, whole job
    ttft: Latency                # time to first token
    tpot: Latency                # time per output token after the first, per request
    itl_mean_s: float            # mean time between two tokens, over every token
    mean_batch: float            # mean requests decoding per iteration
    busy: float                  # share of the time a replica runs iterations
    saturated: bool              # the replicas serve less than is offered (or the benchmark is offline)
    preemptions: int
    rejected: int                # requests (of one replica's simulated ones) longer than its whole cache
    model_tflops_per_gpu: float  # 2 x active parameters per processed token
    breakdown: dict[str, float] = field(default_factory=dict)    # share of the time by part of an iteration
    plan: StepPlan | None = None


def serve(scenario: Scenario, job: Job) -> ServingResult:
    """One replica serving its share of the job's requests, scaled to the job. UserError when the weights
    leave no room for a K/V block."""
    cluster = scenario.cluster
    memory = serving_memory(cluster, job)
    if not memory.fits:
        raise UserError(f"{job.name}: {job.model.name} in {job.precision} takes {memory.weights / GB:,.1f} "
                        f"GB of weights and {memory.activations / GB:,.1f} GB of activations per GPU on "
                        f"tp = {job.tp}, pp = {job.pp}, leaving no room for a K/V cache in "
                        f"{memory.capacity / GB:,.1f} GB; "
                        "expected more tp or pp, fp8 weights or a larger kv_cache_fraction",
                        scenario.path or None)
    key = (cluster, job, scenario.seed)
    found = _CACHE.get(key)
    if found is not None:
        return found
    cost = IterationCost(cluster, job)
    req = requests(job, scenario.seed)
    chunks = int(np.ceil(req.prompt / job.max_tokens_per_step).sum())
    if chunks > MAX_PREFILL_ITERATIONS:       # prefill is simulated chunk by chunk: bound the work
        raise UserError(f"{job.name}: {len(req):,} prompts of ~{job.prompt_tokens:,} tokens in iterations of "
                        f"max_tokens_per_step = {job.max_tokens_per_step:,} take {chunks:,} iterations to "
                        f"simulate; expected at most {MAX_PREFILL_ITERATIONS:,} (a larger "
                        "max_tokens_per_step, shorter prompts or fewer requests)", scenario.path or None)
    limit = memory.batch_limit(job.prompt_tokens + job.output_tokens, job.max_batch)
    engine = Engine(cost, memory.kv_tokens, job.max_tokens_per_step, job.max_batch)
    out = engine.run(req)
    if 2 * out.rejected >= len(req):
        raise UserError(f"{job.name}: {out.rejected:,} of {len(req):,} requests do not fit a replica's K/V "
                        f"cache of {memory.kv_tokens:,} tokens ({job.prompt_tokens:,} prompt + "
                        f"{job.output_tokens:,} output tokens on average); expected shorter requests, more "
                        "tp or pp, fp8 K/V or a larger kv_cache_fraction", scenario.path or None)
    result = _measure(job, cost, memory, limit, req, out)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = result
    return result


def requests(job: Job, seed: int) -> Requests:
    """The requests one replica serves: a finite benchmark, or a warm-up and a measured window."""
    count = job.requests or WARMUP_REQUESTS + WINDOW_REQUESTS
    if job.request_rate == "max" and not job.requests:       # enough to see the replica full for a while
        count = max(count, 4 * job.max_batch + 2 * WARMUP_REQUESTS)
    count = min(count, MAX_REQUESTS)
    rng = np.random.default_rng([seed, 7])
    if job.request_rate == "max":
        arrival = np.zeros(count)
    else:
        rate = float(job.request_rate) / job.dp
        arrival = np.cumsum(rng.exponential(1.0 / rate, count))
    return Requests(arrival, lengths(rng, job.prompt_tokens, job.length_spread, count),
                    lengths(rng, job.output_tokens, job.length_spread, count))


def lengths(rng: np.random.Generator, mean: int, spread: float, n: int) -> np.ndarray:
    """Request lengths of a mean and a coefficient of variation (0: all the mean), at least one token."""
    if spread <= 0:
        return np.full(n, max(1, mean), dtype=np.int64)
    shape = 1.0 / (spread * spread)
    return np.maximum(1, np.rint(rng.gamma(shape, mean / shape, n))).astype(np.int64)


def _measure(job: Job, cost: IterationCost, memory: ServingMemory, limit: int, req: Requests,
             out: Outcome) -> ServingResult:
    """Throughput, latencies and the timeline's shares over the measured requests."""
    measured = np.zeros(len(req), dtype=bool)
    finished = np.isfinite(out.done)
    if job.requests:                          # a benchmark measured whole: first arrival to last completion
        measured[:] = True
        t0, t1 = float(req.arrival[0]), float(np.nanmax(out.done))
        served = finished
        arrivals = float(req.arrival[-1] - req.arrival[0])
        offered = len(req) / arrivals if job.request_rate != "max" and arrivals > 0 else math.inf
    else:
        measured[WARMUP_REQUESTS:] = True
        t0, t1 = _window(job, req, out)
        served = finished & (out.done > t0) & (out.done <= t1)
        offered = float(measured.sum()) / max(t1 - t0, 1e-9) if job.request_rate != "max" else math.inf
        if served.sum() < SATURATED * measured.sum():
            # the requests queue faster than they are served: measure the served rate as offline, between
            # the completions after the warm-up's and before the drain's (offered stays the arrivals' rate)
            t0, t1 = _completions(out)
            served = finished & (out.done > t0) & (out.done <= t1)
    span = max(t1 - t0, 1e-9)
    tokens = float(req.output[served].sum())
    ok = measured & np.isfinite(out.done)
    ttft = Latency.of((out.first - req.arrival)[ok] + job.frontend_latency_ms / 1000)
    steps = req.output - 1
    several = ok & (steps > 0)
    tpot = Latency.of(((out.done - out.first) / np.maximum(steps, 1))[several])
    itl = float((out.done - out.first)[several].sum() / steps[several].sum()) if several.any() else math.nan
    completed = float(served.sum()) / span
    _, active = cm.total_params(job.model)
    flops = 2.0 * active * float((req.output[served] + req.prompt[served]).sum()) / span
    shares, mean_batch, busy, context = _timeline(cost, out, t0, t1)
    replicas = job.dp
    saturated = completed < SATURATED * offered
    # what the recording's header says of the job (docs/events.md), the dashboard's serving figures
    serving = {"ttft_s": round(ttft.median, 6), "tpot_s": round(tpot.median, 6),
               "ttft_p99_s": round(ttft.p99, 6), "tpot_p99_s": round(tpot.p99, 6),
               "requests_per_s": round(completed * replicas, 4), "mean_batch": round(mean_batch, 2),
               "batch_limit": limit, "kv_cache_use": round(min(1.0, context / max(1, memory.kv_tokens)), 4),
               "saturated": saturated}
    plan = _plan(job, out, t0, tokens / span, flops, memory, serving)
    return ServingResult(memory, limit, tokens / span * replicas, completed * replicas, ttft, tpot, itl,
                         mean_batch, busy, saturated, out.preemptions, out.rejected,
                         flops / (job.tp * job.pp) / 1e12, shares, plan)


def _window(job: Job, req: Requests, out: Outcome) -> tuple[float, float]:
    """The measured window: from the first measured request's arrival (offline: the warm-up's last
    completion) to the last one's arrival (offline: the window's last completion)."""
    if job.request_rate == "max":
        return _completions(out)
    return float(req.arrival[WARMUP_REQUESTS]), float(req.arrival[-1])


def _completions(out: Outcome) -> tuple[float, float]:
    """Between the warm-up's completions and the drain's: the replica full."""
    done = np.sort(out.done[np.isfinite(out.done)])
    last = done.size - 1
    return float(done[min(WARMUP_REQUESTS, last)]), float(done[max(0, last - WARMUP_REQUESTS)])


def _timeline(cost: IterationCost, out: Outcome, t0: float,
              t1: float) -> tuple[dict[str, float], float, float, float]:
    """Over [t0, t1]: the share of the time in each part of an iteration (and idle), the mean decode batch per
    iteration, the share of the time the replica is busy and the decoding requests' mean context (tokens in
    the cache) per iteration."""
    iterations = decode = busy = 0.0
    prefill = context = work = 0.0
    for start, seconds, k, n, p, c, w in out.trace:
        if start + seconds <= t0 or start >= t1:
            continue
        iterations += k
        decode += n * k
        prefill += p
        context += c * k
        work += w
        busy += seconds
    span = max(t1 - t0, 1e-9)
    if not iterations:
        return {"idle": 1.0}, 0.0, 0.0, 0.0
    mean = Iteration(round(decode / iterations), context / iterations, round(prefill / iterations),
                     work / iterations, round(decode / iterations))
    parts = cost.parts(mean)
    whole = sum(parts.values())
    busy = min(busy, span)
    shares = {k: v / whole * busy / span for k, v in parts.items()} if whole > 0 else {}
    shares["idle"] = max(0.0, 1.0 - busy / span)
    return shares, decode / iterations, busy / span, context / iterations


def _plan(job: Job, out: Outcome, t0: float, tokens_per_s: float, flops_per_s: float, memory: ServingMemory,
          serving: dict[str, Any]) -> StepPlan | None:
    """A stretch of the measured timeline that the engine run repeats: iterations mostly prefilling are
    compute-bound, decode iterations bound by the weights' and the cache's reads, and the gaps idle."""
    steps = [s for s in out.trace if s[0] >= t0]
    if not steps:
        return None
    start = steps[0][0]
    intervals: list[Interval] = []
    iterations = 0
    for begin, seconds, k, n, p, _, _ in steps:
        a, b = begin - start, begin - start + seconds
        if intervals and a > intervals[-1].end_s:
            intervals.append(Interval(intervals[-1].end_s, a, CODE["idle"]))
        phase = CODE["compute"] if p > n else CODE["memory"]
        if intervals and intervals[-1].phase == phase:
            intervals[-1] = Interval(intervals[-1].start_s, b, phase)
        else:
            intervals.append(Interval(a, b, phase))
        iterations += k
        if iterations >= PLAN_ITERATIONS:
            break
    span = intervals[-1].end_s
    stages = tuple(tuple(intervals) for _ in range(job.pp))
    load = {"node": 0.05 if job.tp > 1 else 0.0}
    used = (memory.weights + memory.activations + memory.reserve + memory.kv_cache) / GB
    return StepPlan(step_time_s=span, stages=stages, tier_load=load,
                    tokens=round(tokens_per_s * span * job.dp), model_flops=flops_per_s * span * job.dp,
                    memory_gb=(round(used, 2),) * job.pp,
                    serving=serving)
