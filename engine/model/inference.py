"""Inference serving: requests arrive, a replica batches them continuously, prefill then decode.

One representative replica (TP x PP GPUs) is simulated with SimPy: requests arrive as a Poisson process at the
job's rate divided over its DP replicas, wait for a free batch slot, are prefilled (compute-bound: the
prompt's GEMMs run at the shape's throughput) and then decoded one token per iteration together with every
running request (bound by HBM bandwidth: each iteration reads all weights and every running request's K/V
cache). Iteration costs come from the same per-layer model as training
(engine/model/compute.py) and the same collectives.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config.cluster import Cluster
from ..config.job import Job
from ..config.phases import CODE
from ..config.scenario import Scenario
from . import collectives as col
from . import compute as cm
from . import memory as mem
from .kernels import BF16, attention_rate, hbm_rate
from .plan import Interval, StepPlan

if TYPE_CHECKING:
    import simpy

WINDOW_REQUESTS = 2000       # completed requests measured after warm-up
WARMUP_REQUESTS = 200
MAX_SIM_S = 3600.0           # never simulate more than an hour of serving per estimate
PLAN_ITERATIONS = 400        # iterations of the measured timeline that make up the repeated plan
assert CODE["memory"] and CODE["compute"]


@dataclass(frozen=True)
class ServingResult:
    fits: bool
    weights_gb: float
    kv_cache_gb: float
    reserve_gb: float
    capacity_gb: float
    batch_limit: int             # concurrent sequences a replica can hold
                                 # (max_batch, or what the KV cache allows)
    tokens_per_s: float          # output tokens per second, whole job
    requests_per_s: float        # completed requests per second, whole job
    ttft_s: float                # median time to first token
    tpot_s: float                # median time per output token (after the first)
    busy: float                  # fraction of time a replica is prefilling or decoding
    prefill_share: float         # fraction of busy time spent in prefill
    mean_batch: float            # mean sequences per decode iteration
    prefill_s: float             # one mean-length prompt alone
    decode_s: float              # one decode iteration at the mean batch and context
    model_tflops_per_gpu: float  # 2 x active parameters per processed token
    plan: StepPlan | None


def _bytes_per_param(job: Job) -> float:
    return 1.0 if job.precision == "fp8" else 2.0


def _shard(job: Job, tokens: int, seq_len: int) -> cm.Shard:
    return cm.Shard(tokens=max(1, tokens), seq_len=max(1, seq_len), tp=job.tp, cp=1, sp=False, ep=job.ep,
                    precision=job.precision)


def _layers(job: Job) -> tuple[int, int]:
    """(dense, MoE) layers of the whole model (a replica runs them all, stage after stage)."""
    m = job.model
    n_moe = m.layers - m.dense_layers if m.is_moe else 0
    return m.layers - n_moe, n_moe


def kv_bytes_per_token(job: Job) -> float:
    """K/V cache bytes one token adds on one GPU of the replica (all its layers)."""
    layers = job.model.layers / job.pp
    return cm.kv_width_per_rank(job.model, job.tp) * BF16 * layers


@lru_cache(maxsize=4096)
def _forward_s(cluster: Cluster, job: Job, tokens: int, seq_len: int, decode: bool) -> float:
    """One forward pass of the whole model over `tokens` tokens on one replica (all stages in turn)."""
    gpu, model = cluster.gpu, job.model
    sh = _shard(job, tokens, seq_len if not decode else 1)
    dense, moe = _layers(job)
    t = 0.0
    for n, is_moe in ((dense, False), (moe, True)):
        if n:
            t += n * cm.layer_cost(gpu, model, is_moe, sh, "none").fwd.compute_s
    if decode:
        # Each new token attends to its whole context: read every running request's K/V cache once.
        kv = tokens * seq_len * cm.kv_width_per_rank(model, job.tp) * BF16 * model.layers
        flops = 4.0 * tokens * seq_len * model.heads / job.tp * model.dim_head * model.layers
        rate = attention_rate(gpu, "auto", seq_len, False, model.dim_head)
        t += max(kv / hbm_rate(gpu), flops / rate)
    t += cm.output_cost(gpu, model, _shard(job, tokens, 1)).fwd.compute_s
    if job.tp > 1:
        route = col.route(cluster, job, ("tp",))
        t += 2 * model.layers * col.allreduce(cluster, route, tokens * model.hidden * BF16).time_s
    if job.pp > 1:
        route = col.route(cluster, job, ("pp",))
        t += (job.pp - 1) * col.p2p(cluster, route, tokens * model.hidden * BF16).time_s
    return t


def _bucket(x: float) -> int:
    """Round a size to 2 significant bits so iteration costs can be cached
    (within ~25%, then interpolated)."""
    if x <= 8:
        return max(1, round(x))
    e = 2 ** int(math.log2(x) - 2)
    return int(round(x / e) * e)


class _Costs:
    """Iteration costs of one replica, cached on rounded sizes and interpolated linearly in between."""

    def __init__(self, cluster: Cluster, job: Job) -> None:
        self.cluster, self.job = cluster, job

    def _interp(self, x: float, f: Callable[[int], float]) -> float:
        lo = _bucket(x)
        if lo >= x or lo <= 1:
            return f(max(1, lo))
        hi = _bucket(x * 1.3)
        if hi <= lo:
            return f(lo)
        a, b = f(lo), f(hi)
        return a + (b - a) * (x - lo) / (hi - lo)

    def prefill(self, tokens: int, prompt: float) -> float:
        seq = _bucket(prompt)
        return self._interp(tokens, lambda n: _forward_s(self.cluster, self.job, n, seq, False))

    def decode(self, batch: int, context: float) -> float:
        ctx = _bucket(context)
        return self._interp(batch, lambda n: _forward_s(self.cluster, self.job, n, ctx, True))


def _memory(cluster: Cluster, job: Job) -> tuple[float, float, float, int]:
    """(weights, KV cache at the batch limit, reserve) bytes per GPU and the batch limit."""
    total, _ = cm.total_params(job.model)
    experts = 0.0
    if job.model.is_moe and job.ep > 1:
        _, n_moe = _layers(job)
        per_expert = cm._mlp_params(job.model.hidden, job.model.moe_ffn, job.model.ffn_activation)
        experts = n_moe * job.model.experts * per_expert
    weights = ((total - experts) / (job.tp * job.pp)
               + experts / (job.tp * job.pp * job.ep)) * _bytes_per_param(job)
    capacity = mem.capacity_bytes(cluster.gpu)
    per_seq = kv_bytes_per_token(job) * (job.prompt_tokens + job.output_tokens)
    room = (capacity - mem.FRAMEWORK_RESERVE_BYTES) / (1 + mem.FRAGMENTATION) - weights
    limit = int(min(job.max_batch, room // per_seq)) if room > 0 else 0
    reserve = mem.FRAMEWORK_RESERVE_BYTES + mem.FRAGMENTATION * (weights + limit * per_seq)
    return weights, limit * per_seq, reserve, limit


def _lengths(rng: np.random.Generator, mean: int, n: int) -> np.ndarray:
    """Request lengths: gamma with shape 2 around the mean (a realistic spread), at least one token."""
    return np.maximum(1, np.rint(rng.gamma(2.0, mean / 2.0, n))).astype(np.int64)


def serve(scenario: Scenario, job: Job) -> ServingResult:
    """Simulate one replica serving its share of the requests and scale to the job."""
    cluster = scenario.cluster
    weights, kv, reserve, limit = _memory(cluster, job)
    capacity = mem.capacity_bytes(cluster.gpu)
    gb = 1e9
    if limit < 1:
        return ServingResult(False, weights / gb, 0.0, reserve / gb, capacity / gb, 0, 0.0, 0.0, math.nan,
                             math.nan, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None)
    costs = _Costs(cluster, job)
    replicas = job.dp
    rate = job.request_rate / replicas
    rng = np.random.default_rng([scenario.seed, 7])
    total = WARMUP_REQUESTS + WINDOW_REQUESTS
    gaps = rng.exponential(1.0 / rate, total)
    prompts = _lengths(rng, job.prompt_tokens, total)
    outputs = _lengths(rng, job.output_tokens, total)
    replica = _Replica(costs, limit, gaps, prompts, outputs)
    replica.run()

    w = _window(replica)
    span, ttft, tpot, busy = w.span, w.ttft_s, w.tpot_s, w.busy_s
    _, active = cm.total_params(job.model)
    flops = 2.0 * active * (w.out_tokens + w.in_tokens)
    mean_prompt, mean_out = job.prompt_tokens, job.output_tokens
    batches = replica.batches
    mean_batch = float(np.mean(batches)) if batches else 0.0
    memory_gb = round((weights + kv + reserve) / gb, 2)
    plan = _plan(replica.timeline, w.t0, job, cluster, w.out_tokens / span, flops / span, memory_gb,
                 {"ttft_s": round(ttft, 6), "tpot_s": round(tpot, 6)})
    return ServingResult(
        fits=True, weights_gb=weights / gb, kv_cache_gb=kv / gb, reserve_gb=reserve / gb,
        capacity_gb=capacity / gb, batch_limit=limit, tokens_per_s=float(w.out_tokens / span * replicas),
        requests_per_s=float(w.completed.sum() / span * replicas), ttft_s=ttft, tpot_s=tpot,
        busy=float(busy / span), prefill_share=float(w.prefill_s / busy) if busy else 0.0,
        mean_batch=mean_batch, prefill_s=costs.prefill(mean_prompt, mean_prompt),
        decode_s=costs.decode(max(1, round(mean_batch)), mean_prompt + mean_out / 2),
        model_tflops_per_gpu=float(flops / span / (job.tp * job.pp) / 1e12), plan=plan)


class _Replica:
    """One replica serving requests (SimPy): they arrive, wait for a batch slot, are prefilled, then decoded
    together. Records when each request arrived, got its first token and completed, and the replica's
    timeline of iterations."""

    def __init__(self, costs: _Costs, limit: int, gaps: np.ndarray, prompts: np.ndarray,
                 outputs: np.ndarray) -> None:
        import simpy

        self.costs, self.limit = costs, limit
        self.gaps, self.prompts, self.outputs = gaps, prompts, outputs
        self.total = total = len(gaps)
        self.env = simpy.Environment()
        self.waiting: deque[int] = deque()
        self.wake = self.env.event()
        self.arrival = np.zeros(total)
        self.first = np.full(total, np.nan)
        self.done = np.full(total, np.nan)
        self.timeline: list[tuple[float, float, str, int]] = []   # (start, end, phase, output tokens)
        self.batches: list[int] = []

    def run(self) -> None:
        self.env.process(self._arrivals())
        self.env.process(self._server())
        self.env.run(until=MAX_SIM_S * 2)

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for i in range(self.total):
            yield env.timeout(float(self.gaps[i]))
            self.arrival[i] = env.now
            self.waiting.append(i)
            if not self.wake.triggered:
                self.wake.succeed()

    def _server(self) -> Generator[simpy.Event, Any, None]:
        env, waiting, timeline, limit, costs = self.env, self.waiting, self.timeline, self.limit, self.costs
        prompts, outputs, first, done = self.prompts, self.outputs, self.first, self.done
        running: dict[int, int] = {}       # request -> tokens still to generate
        context: dict[int, int] = {}
        finished = 0
        while finished < self.total and env.now < MAX_SIM_S:
            if not waiting and not running:
                self.wake = env.event()
                start = env.now
                yield self.wake
                if env.now > start:
                    timeline.append((start, env.now, "idle", 0))
                continue
            admit: list[int] = []
            while waiting and len(running) + len(admit) < limit:
                admit.append(waiting.popleft())
            start = env.now
            if admit:
                tokens = int(prompts[admit].sum())
                yield env.timeout(costs.prefill(tokens, tokens / len(admit)))
                for i in admit:
                    first[i] = env.now
                    running[i] = int(outputs[i]) - 1
                    context[i] = int(prompts[i]) + 1
                    if running[i] <= 0:
                        done[i] = env.now
                        finished += 1
                        del running[i], context[i]
                timeline.append((start, env.now, "compute", len(admit)))
                continue
            batch = len(running)
            self.batches.append(batch)
            ctx = sum(context.values()) / batch
            yield env.timeout(costs.decode(batch, ctx))
            for i in list(running):
                running[i] -= 1
                context[i] += 1
                if running[i] <= 0:
                    done[i] = env.now
                    finished += 1
                    del running[i], context[i]
            timeline.append((start, env.now, "memory", batch))


@dataclass(frozen=True)
class _Window:
    """What a replica did over the measured window: from the first measured request's arrival (t0) to the
    last measured completion (t0 + span)."""

    t0: float
    span: float
    completed: np.ndarray        # the requests measured: after the warm-up, and completed
    ttft_s: float                # median time to first token
    tpot_s: float                # median time per output token (after the first)
    busy_s: float                # prefilling or decoding
    prefill_s: float             # prefilling
    out_tokens: float
    in_tokens: float


def _window(replica: _Replica) -> _Window:
    """The measured window of a replica's run: the requests after the warm-up that completed."""
    total, arrival, first, done = replica.total, replica.arrival, replica.first, replica.done
    outputs = replica.outputs
    measured = np.arange(total) >= WARMUP_REQUESTS
    ok = measured & ~np.isnan(done)
    t0 = arrival[WARMUP_REQUESTS] if total > WARMUP_REQUESTS else 0.0
    t1 = float(np.nanmax(done[ok])) if ok.any() else replica.env.now
    span = max(t1 - t0, 1e-9)
    ttft = float(np.median((first - arrival)[ok])) if ok.any() else math.nan
    per_token = (done - first) / np.maximum(outputs - 1, 1)
    tpot = float(np.median(per_token[ok & (outputs > 1)])) if (ok & (outputs > 1)).any() else math.nan
    window = [seg for seg in replica.timeline if seg[1] > t0 and seg[0] < t1]
    busy = sum(min(b, t1) - max(a, t0) for a, b, ph, _ in window if ph != "idle")
    prefill = sum(min(b, t1) - max(a, t0) for a, b, ph, _ in window if ph == "compute")
    out_tokens = float(outputs[ok].sum())
    in_tokens = float(replica.prompts[ok].sum())
    return _Window(t0, span, ok, ttft, tpot, busy, prefill, out_tokens, in_tokens)


def _plan(timeline: list[tuple[float, float, str, int]], t0: float, job: Job, cluster: Cluster,
          tokens_per_s: float, flops_per_s: float, memory_gb: float,
          serving: dict[str, float]) -> StepPlan | None:
    """A stretch of the measured timeline, from t0, that the engine run repeats: prefill, decode, idle."""
    segs = [s for s in timeline if s[0] >= t0][:PLAN_ITERATIONS]
    if not segs:
        return None
    start, end = segs[0][0], segs[-1][1]
    intervals: list[Interval] = []
    for a, b, name, _ in segs:
        phase = CODE[name]
        if intervals and intervals[-1].phase == phase:
            intervals[-1] = Interval(intervals[-1].start_s, b - start, phase)
        else:
            intervals.append(Interval(a - start, b - start, phase))
    span = end - start
    stages = tuple(tuple(intervals) for _ in range(job.pp))
    load = {"node": 0.05 if job.tp > 1 else 0.0}
    return StepPlan(step_time_s=span, stages=stages, tier_load=load, tokens=round(tokens_per_s * span),
                    model_flops=flops_per_s * span * job.dp, memory_gb=(memory_gb,) * job.pp, serving=serving)
