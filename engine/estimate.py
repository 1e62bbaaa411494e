"""What one training step costs: time, throughput, FLOP/s, memory, and the plan the engine run replays.

For each job: resolve the "auto" settings by searching the feasible space (every micro_batch dividing the
sequences per replica, every virtual_stages count the schedule allows, every recompute mode) for the
fastest step that fits in memory; cost the layers on one GPU (engine/compute.py), the communication of each
parallel dimension on the tiers it crosses (engine/collectives.py), simulate the pipeline of one replica
(engine/pipeline.py), add the data-parallel gradient reduction (overlapped with the last backward in buckets),
the optimizer step and the parameter all-gather, and build the StepPlan.

A sweep estimates thousands of jobs: `estimate(s, plan=False, hints=False)` skips the StepPlan and the fit hint
(the figures are the same), and what depends only on a job's placement or layout (routes, tiers, what each
stage holds) is cached for the next job that shares it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from . import collectives as col
from . import compute as cm
from . import facility
from . import memory as mem
from .catalog import Model
from .errors import UserError
from .layout import DIMS, Layout
from .pipeline import (
    PHASE_CODE,
    PHASE_NAMES,
    Intervals,
    check,
    evaluate,
    peak_inflight,
    simulate,
    split_layers,
)
from .scenario import Cluster, Job, Scenario
from .timeline import Interval, StepPlan
from .topology import TIERS, Topology

# Simulate at most this many microbatches; beyond, the steady state repeats and is extended linearly.
MAX_SIM_MICROBATCHES = 256
# DualPipe (DeepSeek-V3 report, section 3.2.1): a forward chunk and a backward chunk run together, the
# all-to-all and PP traffic of one hidden behind the other's compute; 20 of the H800's 132 SMs run the
# communication, so the overlapped compute runs on the other 112.
DUALPIPE_COMPUTE_SHARE = 112 / 132
RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Config:
    micro_batch: int
    virtual_stages: int
    recompute: str


@dataclass
class JobEstimate:
    name: str
    gpus: int
    fits: bool
    step_time_s: float | None
    tokens_per_s: float | None
    model_tflops_per_gpu: float | None
    hardware_tflops_per_gpu: float | None
    mfu: float | None
    memory_gb: dict[str, float]
    memory_gb_per_gpu: float
    capacity_gb: float
    breakdown_s: dict[str, float]
    chosen: dict[str, Any]
    tiers: dict[str, str | None]
    job: Job
    plan: StepPlan | None
    microbatches: int = 0
    note: str = ""
    kind: str = "training"               # "training" | "inference"
    ttft_s: float | None = None          # inference: median time to first token
    tpot_s: float | None = None          # inference: median time per output token
    serving: dict[str, float] = field(default_factory=dict)   # inference: the other serving figures


@dataclass
class ScenarioEstimate:
    scenario: str
    cluster: dict[str, float]
    jobs: list[JobEstimate] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ inputs

def _shard(job: Job, micro_batch: int) -> cm.Shard:
    return cm.Shard(tokens=micro_batch * job.seq_len // job.cp, seq_len=job.seq_len, tp=job.tp, cp=job.cp,
                    sp=job.sequence_parallel and job.tp > 1, ep=job.ep, precision=job.precision)


@dataclass(frozen=True)
class _Stage:
    """One virtual stage (chunk): its layers and blocks."""

    first_layer: int
    layers: int
    embedding: bool
    output: bool
    moe: int = 0          # how many of its layers are MoE layers

    @property
    def dense(self) -> int:
        return self.layers - self.moe


@lru_cache(maxsize=256)
def _chunks(model: Model, p: int, v: int) -> tuple[tuple[_Stage, ...], ...]:
    """chunks[r][c]: the virtual stage c * p + r of stage r."""
    counts = split_layers(model.layers, p * v)
    starts = list(itertools.accumulate([0] + counts))
    out = [[_Stage(0, 0, False, False)] * v for _ in range(p)]
    for vs, n in enumerate(counts):
        c, r = divmod(vs, p)
        moe = sum(cm.is_moe_layer(model, i) for i in range(starts[vs], starts[vs] + n))
        out[r][c] = _Stage(starts[vs], n, vs == 0, vs == p * v - 1, moe)
    return tuple(map(tuple, out))


# ------------------------------------------------------------------------------------------ communication

@dataclass(frozen=True)
class _Net:
    tp: col.Route
    cp: col.Route
    ep: col.Route
    dp: col.Route
    pp_tiers: tuple[int, ...]      # tier index crossed by each stage boundary r -> r+1 (and p-1 -> 0)
    pp_slowdown: float


@lru_cache(maxsize=64)
def _net(cluster: Cluster, job: col.Placement) -> _Net:
    """The routes of a job's placement (jobs that differ only in batch, recomputation, ... share them)."""
    topo = Topology.of(cluster)
    stride = job.tp * job.cp
    first = job.first_gpu
    r = np.arange(job.pp)
    tiers = tuple(topo.tier_between(first + r * stride, first + (r + 1) % job.pp * stride).tolist())
    dp_dims = ("dp", "cp") if job.cp > 1 else ("dp",)
    pp = col.route(cluster, job, ("pp",))
    return _Net(tp=col.route(cluster, job, ("tp",)), cp=col.route(cluster, job, ("cp",)),
                ep=col.route(cluster, job, ("ep",), "all2all") if job.ep > 1 else col.Route(1, 1, 1, None, 1.0, {}),
                dp=col.route(cluster, job, dp_dims), pp_tiers=tiers, pp_slowdown=pp.slowdown)


def _tp_time(cluster: Cluster, net: _Net, nbytes: float, sp: bool) -> col.Comm:
    """One TP exchange of a full activation: all-reduce, or reduce-scatter + all-gather with SP."""
    if sp:
        rs = col.reduce_scatter(cluster, net.tp, nbytes)
        return col.Comm(2 * rs.time_s, rs.load)
    return col.allreduce(cluster, net.tp, nbytes)


def _p2p_time(cluster: Cluster, net: _Net, nbytes: float, boundary: int) -> float:
    if nbytes <= 0:
        return 0.0
    if net.pp_tiers[boundary] == 0:
        return nbytes / (cluster.node_link.busbw_gb_s * col.GB) + cluster.node_link.latency_us * 1e-6
    return nbytes / (col.net_busbw(cluster) / net.pp_slowdown) + cluster.scale_out.latency_us * 1e-6


# ------------------------------------------------------------------------------------------- evaluation

@dataclass
class _Eval:
    config: Config
    fits: bool
    memory: mem.StageMemory
    step_s: float = 0.0
    plan: StepPlan | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    microbatches: int = 0


Passes = tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]   # (forward, backward) segments


@dataclass(frozen=True)
class _StageFacts:
    """What one pipeline stage holds (all its chunks), on one GPU."""

    params: float
    expert_params: float
    largest_layer_params: float
    layers: int
    moe: bool                 # holds a MoE layer
    output: bool              # holds the output layer


class _JobModel:
    """Everything about one job that does not depend on the auto settings, and the evaluation of a Config.

    Costs that depend only on a chunk's blocks (not on its place in the pipeline) are computed once per
    model and reused by every stage, configuration and evaluation with the same blocks.
    """

    def __init__(self, cluster: Cluster, job: Job) -> None:
        self.cluster, self.job = cluster, job
        self.gpu = cluster.gpu
        self.net = _net(cluster, col.placement(job))
        self.per_replica = job.global_batch // job.dp
        self.dp_shards = job.dp * job.cp
        self.expert_shards = max(1, job.dp * job.cp // job.ep)
        self._grad_comm: dict[float, float] = {}
        self._updates: dict[float, tuple[float, float]] = {}
        self._passes: dict[tuple[Any, ...], Passes] = {}
        self._params: dict[tuple[int, int, bool, bool], float] = {}

    def chunks(self, v: int) -> tuple[tuple[_Stage, ...], ...]:
        return _chunks(self.job.model, self.job.pp, v)

    def stages(self, v: int) -> tuple[_StageFacts, ...]:
        job = self.job
        return _stage_facts(job.model, job.tp, job.ep, job.pp, v)

    # -- per chunk costs -------------------------------------------------------------------------------
    def _chunk_passes(self, st: _Stage, micro_batch: int, recompute: str) -> Passes:
        """Forward and backward segments of one microbatch through the chunk (cached by its blocks)."""
        key = (st.dense, st.moe, st.embedding, st.output, micro_batch, recompute)
        if key not in self._passes:
            self._passes[key] = self._compute_passes(st, _shard(self.job, micro_batch), recompute)
        return self._passes[key]

    def _compute_passes(self, st: _Stage, sh: cm.Shard, recompute: str) -> Passes:
        job, cl, gpu, net = self.job, self.cluster, self.gpu, self.net
        blocks: list[tuple[cm.BlockCost, int]] = []
        if st.dense:
            blocks.append((cm.layer_cost(gpu, job.model, False, sh, recompute), st.dense))
        if st.moe:
            blocks.append((cm.layer_cost(gpu, job.model, True, sh, recompute), st.moe))
        if st.embedding:
            blocks.append((cm.embedding_cost(gpu, job.model, sh), 1))
        if st.output:
            blocks.append((cm.output_cost(gpu, job.model, sh), 1))
        f = {"compute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
        b = dict(f)
        for block, n in blocks:
            for pas, acc in ((block.fwd, f), (block.bwd, b), (block.recompute, b)):
                if pas is None:
                    continue
                acc["compute"] += n * pas.compute_s
                if pas.tp_collectives:
                    acc["tp"] += n * pas.tp_collectives * _tp_time(cl, net, pas.tp_bytes, sh.sp).time_s
                if pas.cp_bytes:
                    step = col.p2p(cl, net.cp, pas.cp_bytes).time_s
                    acc["cp"] += n * (job.cp - 1) * max(0.0, step - pas.cp_overlap_s)
                if pas.ep_bytes:
                    acc["ep"] += n * 2 * col.all_to_all(cl, net.ep, pas.ep_bytes).time_s
        if job.schedule == "dualpipe":
            # the forward of one microbatch runs beside the backward of another: each one's EP all-to-all
            # hides behind the other's compute, which runs on the SMs communication leaves free
            for acc in (f, b):
                acc["compute"] /= DUALPIPE_COMPUTE_SHARE
            f["ep"], b["ep"] = max(0.0, f["ep"] - b["compute"]), max(0.0, b["ep"] - f["compute"])
        if job.zero >= 3:
            # ZeRO-3 gathers the chunk's weights before its forward and its backward, prefetched behind compute
            params = self._chunk_params(st)
            ag = col.all_gather(cl, net.dp, cm.BF16 * params).time_s
            rs = col.reduce_scatter(cl, net.dp, 4.0 * params).time_s
            f["dp"] = max(0.0, ag - f["compute"])
            b["dp"] = max(0.0, ag + rs - b["compute"])
        return tuple(f.items()), tuple(b.items())

    def _chunk_params(self, st: _Stage) -> float:
        key = (st.dense, st.moe, st.embedding, st.output)
        if key not in self._params:
            self._params[key] = _chunk_params(self.job.model, self.job.tp, self.job.ep, self.job.pp, st)
        return self._params[key]

    # -- memory ----------------------------------------------------------------------------------------
    def memory(self, cfg: Config) -> list[mem.StageMemory]:
        job = self.job
        m = self.per_replica // cfg.micro_batch
        sh = _shard(job, cfg.micro_batch)
        fp8 = job.precision == "fp8"
        per_token = {moe: mem.activation_bytes_per_token(job.model, moe, job.tp, sh.sp, cfg.recompute, fp8)
                     for moe in (False, True)}
        full_layer = {moe: mem.activation_bytes_per_token(job.model, moe, job.tp, sh.sp, "none") * sh.tokens
                      for moe in (False, True)}
        chunks = self.chunks(cfg.virtual_stages)
        chunk_bytes = []
        for stage in chunks:
            chunk_bytes.append([])
            for st in stage:
                per_tok = st.dense * per_token[False] + st.moe * per_token[True]
                if st.embedding:
                    per_tok += job.model.hidden * cm.BF16 / (job.tp if sh.sp else 1)
                chunk_bytes[-1].append(per_tok * sh.tokens)
        held = peak_inflight(_sim_schedule(job), job.pp, cfg.virtual_stages, m, chunk_bytes)
        out = []
        for stage, activations in zip(self.stages(cfg.virtual_stages), held):
            layer_full = full_layer[stage.moe]
            transient = layer_full if cfg.recompute == "full" else 0.0
            # one layer's gradient working set (input/output grads, the largest intermediate) during backward
            transient += 2 * sh.tokens * max(job.model.ffn, job.model.hidden) * cm.BF16 * 2 / job.tp
            logits = 0.0
            if stage.output:
                logits = 2 * sh.tokens * job.model.vocab / job.tp * 4.0
            out.append(mem.stage_memory(params=stage.params, expert_params=stage.expert_params,
                                        largest_layer_params=stage.largest_layer_params, zero=job.zero,
                                        dp_shards=self.dp_shards, expert_shards=self.expert_shards,
                                        activations=activations, transient=transient, logits=logits))
            if job.schedule == "dualpipe":
                # DualPipe keeps two copies of the parameters (and their gradients), one per direction
                # (DeepSeek-V3 report 3.2.1)
                sm = out[-1]
                extra = sm.weights + sm.gradients
                out[-1] = dataclasses.replace(sm, weights=2 * sm.weights, gradients=2 * sm.gradients,
                                              reserve=sm.reserve + mem.FRAGMENTATION * extra)
        return out

    # -- one configuration -----------------------------------------------------------------------------
    def check_memory(self, cfg: Config) -> _Eval:
        """The configuration's memory and whether it fits (no simulation)."""
        mems = self.memory(cfg)
        worst = max(mems, key=lambda s: s.total)
        fits = all(s.total <= mem.capacity_bytes(self.gpu) for s in mems)
        return _Eval(cfg, fits, worst, microbatches=self.per_replica // cfg.micro_batch)

    def run(self, ev: _Eval, plan: bool) -> None:
        """Simulate a configuration that fits: its step time, breakdown and (when `plan`) StepPlan."""
        job, cl, cfg = self.job, self.cluster, ev.config
        p, v, m = job.pp, cfg.virtual_stages, ev.microbatches
        chunks = self.chunks(v)
        sh = _shard(job, cfg.micro_batch)
        passes = [[self._chunk_passes(st, cfg.micro_batch, cfg.recompute) for st in stage]
                  for stage in chunks]
        fwd = tuple(tuple(f for f, _ in stage) for stage in passes)
        bwd = tuple(tuple(b for _, b in stage) for stage in passes)
        act = sh.tokens * job.model.hidden * cm.BF16 / (job.tp if sh.sp else 1)
        send = tuple(_p2p_time(cl, self.net, act, r) if p > 1 else 0.0 for r in range(p))
        if job.schedule == "dualpipe":      # PP transfers overlap the paired chunk's compute: latency remains
            send = tuple(min(t, cl.scale_out.latency_us * 1e-6) for t in send)
        send_b = tuple(send[(r - 1) % p] for r in range(p))
        schedule = _sim_schedule(job)
        if m <= MAX_SIM_MICROBATCHES:
            run = _simulate_cached(plan, schedule, p, v, m, fwd, bwd, send, send_b)
            phase_s, ends, last_b = run.phase_seconds(), run.ends, run.last_backward
            intervals = lambda: run.intervals
        else:
            # the steady state repeats: simulate two sizes and extend linearly to m
            step = p if v > 1 else 1
            m2 = max(2 * step, MAX_SIM_MICROBATCHES // step * step)     # two sizes at least a round apart
            m1 = max(step, m2 // 2 // step * step)
            run1 = _simulate_cached(plan, schedule, p, v, m1, fwd, bwd, send, send_b)
            run2 = _simulate_cached(plan, schedule, p, v, m2, fwd, bwd, send, send_b)
            extended, ends, last_b = _extend(run1, run2, m1, m2, m)
            phase_s, intervals = extended.phase_seconds(), lambda: extended
        ev.plan, ev.step_s, ev.breakdown = self._finish(cfg, chunks, phase_s, intervals, ends, last_b, fwd, bwd,
                                                        m, plan)
        if job.schedule == "dualpipe" and p > 2 and v == 1:
            self._dualpipe_bubble(ev, fwd, bwd)

    def _dualpipe_bubble(self, ev: _Eval, fwd: tuple, bwd: tuple) -> None:
        """DualPipe feeds microbatches from both ends of the pipeline: its bubble is (PP/2 - 1)(F&B + B - 3W)
        against 1F1B's (PP - 1)(F + B) (DeepSeek-V3 report, Table 2). F, B: a stage's forward and backward
        of one microbatch; W: the weight-gradient part of B (the forward's GEMMs again, W = min(F, B/2));
        F&B: a forward and a backward overlapped, the sum of their compute. The simulated 1F1B bubble shrinks
        by that ratio (the plan keeps the 1F1B order)."""
        p = self.job.pp
        f = max(sum(sum(d for _, d in c) for c in stage) for stage in fwd)
        b = max(sum(sum(d for _, d in c) for c in stage) for stage in bwd)
        w = min(f, b / 2)
        ratio = min(1.0, (p / 2 - 1) * (f + b + b - 3 * w) / ((p - 1) * (f + b)))
        saved = ev.breakdown.get("bubble", 0.0) * (1.0 - ratio)
        ev.step_s -= saved
        ev.breakdown["bubble"] = round(ev.breakdown.get("bubble", 0.0) - saved, 6)

    def _finish(self, cfg: Config, chunks: Sequence[Sequence[_Stage]], phase_s: np.ndarray,
                intervals: Callable[[], Intervals], ends: list[float],
                last_b: Sequence[Sequence[tuple[float, float]]], fwd: tuple, bwd: tuple, m: int,
                plan: bool) -> tuple[StepPlan | None, float, dict[str, float]]:
        """Add DP gradient reduction, optimizer and parameter all-gather to the pipeline schedule (its seconds
        per phase summed over the stages, and its intervals when a plan is asked for); the breakdown, and the
        StepPlan when `plan`."""
        job = self.job
        p = job.pp
        dp_end: list[float] = []
        dp_busy = 0.0
        ag_time = opt_time = 0.0
        opt_by_stage = []
        ag_by_stage = []
        for r, stage in enumerate(self.stages(cfg.virtual_stages)):
            t_stream = 0.0
            for c in reversed(range(cfg.virtual_stages)):
                st = chunks[r][c]
                if job.zero >= 3:
                    continue          # reduced per microbatch inside the backward (see _compute_passes)
                comm_s = self._gradient_reduction(self._chunk_params(st))
                dp_busy += comm_s / p
                b0, b1 = last_b[r][c]
                n_layers = max(1, st.layers)
                # buckets: the first is ready after one layer's backward, the last after the chunk's
                t_stream = max(max(t_stream, b0 + (b1 - b0) / n_layers) + comm_s, b1 + comm_s / n_layers)
            dp_end.append(max(ends[r], t_stream))
            optimizer, ag = self._update(stage.params)
            opt_by_stage.append(optimizer)
            if job.zero in (1, 2):
                # overlapped with the next step's first forward but for the first layer's bucket
                n_layers = max(1, stage.layers)
                ag_by_stage.append(ag / n_layers)
                dp_busy += ag / p
            else:
                ag_by_stage.append(0.0)
        sync = max(dp_end)
        opt_time = max(opt_by_stage)
        ag_time = max(ag_by_stage)
        step = sync + opt_time + ag_time
        after = []                 # each stage's intervals after its pipeline schedule
        for r in range(p):
            iv = []
            if dp_end[r] > ends[r]:
                iv.append((ends[r], dp_end[r], "dp"))
            if sync > dp_end[r]:
                iv.append((dp_end[r], sync, "bubble"))
            iv.append((sync, sync + opt_by_stage[r], "optimizer"))
            if sync + opt_by_stage[r] < sync + opt_time:
                iv.append((sync + opt_by_stage[r], sync + opt_time, "bubble"))
            if ag_by_stage[r] > 0:
                iv.append((sync + opt_time, sync + opt_time + ag_by_stage[r], "dp"))
            if sync + opt_time + ag_by_stage[r] < step:
                iv.append((sync + opt_time + ag_by_stage[r], step, "bubble"))
            after.append(iv)
        # every stage's intervals cover [0, step] end to end: each phase's time is the sum of its intervals'
        # lengths, as a mean over the stages
        tail = Intervals.of(after)
        totals = dict(zip(PHASE_NAMES, ((phase_s + tail.phase_seconds()) / p).tolist()))
        order = ["compute", "tp", "cp", "ep", "pp", "dp", "bubble", "optimizer"]
        breakdown = {k: round(totals.get(k, 0.0), 6) for k in order if totals.get(k, 0.0) > 0 or k in
                     ("compute", "bubble", "optimizer")}
        if not plan:
            return None, step, breakdown
        runs = _merge(intervals().then(tail), step, p)
        tokens = job.global_batch * job.seq_len
        flops = cm.model_flops_per_token(job.model, job.seq_len) * tokens
        tier_load = self._tier_load(cfg, fwd, bwd, m, step, dp_busy)
        stages: list[list[Interval]] = [[] for _ in range(p)]
        for r, a, b, code in zip(runs.stage.tolist(), runs.start.tolist(), runs.end.tolist(),
                                 runs.phase.tolist()):
            stages[r].append(Interval(a, b, PHASE_NAMES[code]))
        return (StepPlan(step_time_s=step, stages=tuple(map(tuple, stages)), tier_load=tier_load,
                         tokens=tokens, model_flops=flops), step, breakdown)

    def _update(self, params: float) -> tuple[float, float]:
        """Seconds of the optimizer step and of the parameter all-gather (ZeRO-1/2) for a stage's params."""
        if params not in self._updates:
            shards = self.dp_shards if self.job.zero >= 1 else 1
            ag = 0.0
            if self.job.zero in (1, 2):
                ag = col.all_gather(self.cluster, self.net.dp, cm.BF16 * params).time_s
            self._updates[params] = (cm.optimizer_time(self.gpu, params, shards), ag)
        return self._updates[params]

    def _gradient_reduction(self, params: float) -> float:
        """Seconds to reduce a chunk's FP32 gradients (Megatron: accumulated and reduced in FP32) over DP."""
        if params not in self._grad_comm:
            grads, cl, route = 4.0 * params, self.cluster, self.net.dp
            reduce = col.allreduce if self.job.zero == 0 else col.reduce_scatter
            comm = reduce(cl, route, grads)
            self._grad_comm[params] = comm.time_s
        return self._grad_comm[params]

    def _tier_load(self, cfg: Config, fwd: tuple, bwd: tuple, m: int, step: float,
                   dp_busy: float) -> dict[str, float]:
        """Mean load of each tier over the step: each dimension's traffic time times its load, averaged."""
        job, cl, net = self.job, self.cluster, self.net
        sh = _shard(job, cfg.micro_batch)
        load = {t: 0.0 for t in TIERS}
        per_dim: dict[str, tuple[float, dict[str, float]]] = {}
        v = cfg.virtual_stages
        for dim in ("tp", "cp", "ep"):
            busy = sum(dict(fwd[r][c]).get(dim, 0.0) + dict(bwd[r][c]).get(dim, 0.0)
                       for r in range(job.pp) for c in range(v)) * m / job.pp
            if busy <= 0:
                continue
            if dim == "tp":
                comm = _tp_time(cl, net, sh.tokens * job.model.hidden * cm.BF16, sh.sp)
            elif dim == "cp":
                comm = col.p2p(cl, net.cp, sh.tokens * 1.0 * job.model.hidden * cm.BF16)
            else:
                comm = col.all_to_all(cl, net.ep, sh.tokens * 1.0 * job.model.hidden * cm.BF16)
            per_dim[dim] = (busy, comm.load)
        if dp_busy > 0:
            per_dim["dp"] = (dp_busy, col.reduce_scatter(cl, net.dp, 1e9).load)
        if job.pp > 1:
            act = sh.tokens * job.model.hidden * cm.BF16 / (job.tp if sh.sp else 1)
            busy = 2 * m * v * sum(_p2p_time(cl, net, act, r) for r in range(job.pp)) / job.pp
            pp_route = col.route(cl, job, ("pp",))
            per_dim["pp"] = (busy, col.p2p(cl, pp_route, act).load)
        for busy, loads in per_dim.values():
            for tier, u in loads.items():
                load[tier] += u * min(busy, step) / step
        return {t: round(min(1.0, x), 4) for t, x in load.items()}


def _chunk_params(model: Model, tp: int, ep: int, pp: int, st: _Stage) -> float:
    """Parameters of one chunk on one GPU (TP- and EP-sharded)."""
    p = st.dense * cm.layer_params_per_gpu(model, False, tp, ep)
    if st.moe:
        p += st.moe * cm.layer_params_per_gpu(model, True, tp, ep)
    emb = model.vocab * model.hidden / tp
    if st.embedding:
        p += emb
    if st.output and not (model.tied_embeddings and pp == 1):
        p += emb
    return p


def _expert_params(model: Model, tp: int, ep: int, st: _Stage) -> float:
    if not st.moe:
        return 0.0
    experts = model.experts * cm._mlp_params(model.hidden, model.moe_ffn, model.ffn_activation)
    return st.moe * experts / tp / ep


@lru_cache(maxsize=256)
def _stage_facts(model: Model, tp: int, ep: int, pp: int, v: int) -> tuple[_StageFacts, ...]:
    def first_layer(st: _Stage) -> _Stage:
        return _Stage(st.first_layer, 1, False, False, int(cm.is_moe_layer(model, st.first_layer)))

    return tuple(_StageFacts(
        params=sum(_chunk_params(model, tp, ep, pp, st) for st in stage),
        expert_params=sum(_expert_params(model, tp, ep, st) for st in stage),
        largest_layer_params=max((_chunk_params(model, tp, ep, pp, first_layer(st)) for st in stage
                                  if st.layers), default=0.0),
        layers=sum(st.layers for st in stage), moe=any(st.moe for st in stage),
        output=any(st.output for st in stage)) for stage in _chunks(model, pp, v))


@lru_cache(maxsize=64)
def _simulate_cached(plan: bool, schedule: str, p: int, v: int, m: int, fwd: tuple, bwd: tuple, send: tuple,
                     send_b: tuple):  # type: ignore[no-untyped-def]
    """The pipeline's times, kept for the same exact inputs: the SimPy simulation for a step plan, the same
    times evaluated without processes for a search or a sweep (pipeline.evaluate)."""
    return (simulate if plan else evaluate)(schedule, p, v, m, fwd, bwd, send, send_b)


def _extend(run1: Any, run2: Any, m1: int, m2: int, m: int) -> tuple[Intervals, list, list]:
    """A step of m microbatches from simulations of m1 < m2: every stage's end grows linearly in m.

    The extra microbatches are extra rounds of the steady state: the drain, where each chunk's last backward
    runs, comes that much later (it moves with the stage's end), which is what the DP gradient reduction
    overlaps with. For the plan, each stage's intervals of run2 (contiguous from 0) are stretched into new
    arrays: work (compute and communication) by m / m2, the waiting so that the stage ends where the linear
    extension puts it.
    """
    iv = run2.intervals
    p = len(run2.ends)
    bubble = iv.phase == PHASE_CODE["bubble"]
    length = iv.end - iv.start
    work = np.bincount(iv.stage, weights=np.where(bubble, 0.0, length), minlength=p)
    wait = np.bincount(iv.stage, weights=np.where(bubble, length, 0.0), minlength=p)
    k_work = m / m2
    k_wait = []
    for e1, e2, w, idle in zip(run1.ends, run2.ends, work.tolist(), wait.tolist()):
        end = e2 + (m - m2) * (e2 - e1) / (m2 - m1)
        k_wait.append(max(0.0, end - w * k_work) / idle if idle > 0 else 1.0)
    stretched = length * np.where(bubble, np.array(k_wait)[iv.stage], k_work)
    start, finish = np.empty_like(stretched), np.empty_like(stretched)
    bounds = np.searchsorted(iv.stage, np.arange(p + 1)).tolist()
    ends, last_b = [], []
    for r, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        finish[lo:hi] = np.cumsum(stretched[lo:hi])         # the running time, added one interval at a time
        start[lo:hi] = np.concatenate([[0.0], finish[lo:hi - 1]])
        t = float(finish[hi - 1]) if hi > lo else 0.0
        ends.append(t)
        shift = t - run2.ends[r]
        last_b.append([(b0 + shift, b1 + shift) for b0, b1 in run2.last_backward[r]])
    return Intervals(iv.stage, start, finish, iv.phase), ends, last_b


def _merge(iv: Intervals, end: float, stages: int) -> Intervals:
    """Each stage's runs covering [0, end]: what walking its intervals sorted by (start, end, phase) makes of
    them. An interval ending where the covered time already is is dropped, one starting before it is clipped,
    a gap becomes bubble, and adjacent equal phases merge into one run."""
    iv = _sorted(iv, stages)
    bounds = np.searchsorted(iv.stage, np.arange(stages + 1))
    covered = np.empty(len(iv.end))          # covered time after each interval: the stage's running maximum
    for lo, hi in itertools.pairwise(bounds.tolist()):
        covered[lo:hi] = np.maximum.accumulate(iv.end[lo:hi])
    before = np.concatenate([[0.0], covered[:-1]])
    before[bounds[:-1][bounds[:-1] < len(before)]] = 0.0
    before = np.maximum(before, 0.0)         # covered time before each interval
    done = np.array([max(0.0, covered[hi - 1]) if hi > lo else 0.0
                     for lo, hi in itertools.pairwise(bounds.tolist())])
    kept = iv.end > before
    start = np.maximum(iv.start, before)
    gap = kept & (start > before)
    # the pieces: the kept intervals (clipped); before one, the gap it leaves (bubble); at the end of each
    # stage, the bubble until `end`. Gaps and tails are few: they are inserted where they belong.
    kept_ahead = np.concatenate([[0], np.cumsum(kept)])        # kept intervals ahead of each position
    tails, gaps = np.flatnonzero(end > done), np.flatnonzero(gap)
    at = np.concatenate([kept_ahead[bounds[1:][tails]], kept_ahead[gaps]])
    order = np.lexsort((np.arange(len(at)) >= len(tails), at))  # a stage's tail before the next one's gap
    bubble = np.int8(PHASE_CODE["bubble"])

    def pieces(kept_values: np.ndarray, tail_values: Any, gap_values: Any) -> np.ndarray:
        extra = np.concatenate([np.broadcast_to(tail_values, len(tails)),
                                np.broadcast_to(gap_values, len(gaps))])
        return np.insert(kept_values[kept], at[order], extra[order])

    stage = pieces(iv.stage, tails, iv.stage[gaps])
    a, b = pieces(start, done[tails], before[gaps]), pieces(iv.end, end, start[gaps])
    code = pieces(iv.phase, bubble, bubble)
    first = np.ones(len(code), dtype=bool)  # the pieces that start a run
    first[1:] = (code[1:] != code[:-1]) | (stage[1:] != stage[:-1])
    last = np.ones_like(first)               # the pieces that end one
    last[:-1] = first[1:]
    return Intervals(stage[first], a[first], b[last], code[first])


def _sorted(iv: Intervals, stages: int) -> Intervals:
    """Each stage's intervals sorted by (start, end, phase). The schedule emits them in that order but for
    rounding (an operation ending a hair after the next one starts), so sorting is rarely needed."""
    a, b, c, r = iv.start, iv.end, iv.phase, iv.stage
    x, y = slice(None, -1), slice(1, None)
    same_stage = r[x] == r[y]
    if not (same_stage & (a[x] >= a[y])).any():          # the starts increase: in order
        return iv
    in_order = (a[x] < a[y]) | ((a[x] == a[y]) & ((b[x] < b[y]) | ((b[x] == b[y]) & (c[x] <= c[y]))))
    unsorted = np.unique(r[y][~in_order & same_stage])
    if not len(unsorted):
        return iv
    a, b, c = a.copy(), b.copy(), c.copy()
    bounds = np.searchsorted(r, np.arange(stages + 1))
    for s in unsorted.tolist():
        lo, hi = bounds[s], bounds[s + 1]
        idx = lo + np.lexsort((c[lo:hi], b[lo:hi], a[lo:hi]))
        a[lo:hi], b[lo:hi], c[lo:hi] = a[idx], b[idx], c[idx]
    return Intervals(r, a, b, c)


# ----------------------------------------------------------------------------------------------- search

def _sim_schedule(job: Job) -> str:
    """The schedule the pipeline simulation runs: DualPipe's order is 1F1B's with paired chunks overlapped
    (the overlap is in the chunk costs, see _compute_passes)."""
    return "1f1b" if job.schedule == "dualpipe" else job.schedule


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(job: Job) -> list[Config]:
    """Every configuration the "auto" settings may take (fixed settings stay as given)."""
    per_replica = job.global_batch // job.dp
    mbs = [job.micro_batch] if job.micro_batch != "auto" else [d for d in _divisors(per_replica) if d <= 64]
    if job.virtual_stages != "auto":
        vs = [int(job.virtual_stages)]
    elif job.pp == 1 or job.schedule == "gpipe":
        vs = [1]
    else:
        vs = [v for v in range(1, job.model.layers // job.pp + 1)]
    rcs = [job.recompute] if job.recompute != "auto" else list(RECOMPUTE_MODES)
    out = []
    for mb, v, rc in itertools.product(mbs, vs, rcs):
        if check(_sim_schedule(job), job.pp, v, per_replica // mb) is None:
            out.append(Config(int(mb), v, rc))
    return out


def _search(model: _JobModel, configs: list[Config], plan: bool = True) -> tuple[_Eval, bool]:
    """The fastest configuration that fits, or (the one needing least memory, False) when none fits.

    Only the chosen configuration gets a StepPlan (when `plan`): the others are compared by step time.
    """
    evals = [model.check_memory(c) for c in configs]
    fitting = [e for e in evals if e.fits]
    if not fitting:
        return min(evals, key=lambda e: e.memory.total), False
    if len(fitting) == 1:
        model.run(fitting[0], plan)
        return fitting[0], True
    # cheap lower bound first: fewer recomputation, more interleaving, bigger microbatches tend to win
    best: _Eval | None = None
    for e in sorted(fitting, key=lambda e: _guess(model, e.config)):
        if best is not None and _lower_bound(model, e.config) >= best.step_s:
            continue
        model.run(e, plan=False)
        if best is None or e.step_s < best.step_s - 1e-12:
            best = e
    assert best is not None
    if plan:
        model.run(best, plan=True)     # the same schedule, now simulated with SimPy for its plan
    return best, True


def _work(model: _JobModel, cfg: Config) -> float:
    """Busiest stage's compute time per step (no waiting): a lower bound of the step."""
    m = model.per_replica // cfg.micro_batch
    worst = 0.0
    for stage in model.chunks(cfg.virtual_stages):
        t = 0.0
        for st in stage:
            f, b = model._chunk_passes(st, cfg.micro_batch, cfg.recompute)
            t += sum(d for _, d in f) + sum(d for _, d in b)
        worst = max(worst, t)
    return worst * m


def _lower_bound(model: _JobModel, cfg: Config) -> float:
    return _work(model, cfg)


def _guess(model: _JobModel, cfg: Config) -> float:
    m = model.per_replica // cfg.micro_batch
    p = model.job.pp
    return _work(model, cfg) * (1 + (p - 1) / (cfg.virtual_stages * m))


# ------------------------------------------------------------------------------------------------- API

def estimate_job(scenario: Scenario, job: Job, plan: bool = True, hints: bool = True) -> JobEstimate:
    """The cost of one training step of `job` on the scenario's cluster.

    plan=False leaves out the StepPlan (`plan` is None) and hints=False the hint of settings that would fit
    (`note` stays empty): a sweep needs neither, and every other figure is the same.
    """
    if job.is_inference:
        return _estimate_inference(scenario, job, plan)
    cluster = scenario.cluster
    model = _JobModel(cluster, job)
    configs = candidates(job)
    if not configs:
        per_replica = job.global_batch // job.dp
        raise UserError(f"job {job.name!r}: no micro_batch / virtual_stages combination can run the "
                        f"{job.schedule} schedule with pp = {job.pp} and {per_replica} "
                        f"sequence{'s' if per_replica != 1 else ''} per replica")
    best, fits = _search(model, configs, plan)
    cfg = best.config
    resolved = dataclasses.replace(job, micro_batch=cfg.micro_batch, virtual_stages=cfg.virtual_stages,
                                   recompute=cfg.recompute)
    chosen = {k: getattr(cfg, k) for k in ("micro_batch", "virtual_stages", "recompute")
              if getattr(job, k) == "auto"}
    tiers = _tiers(cluster, job)
    mem_gb = best.memory.parts_gb()
    total_gb = round(best.memory.total / mem.GB, 2)
    cap = round(mem.capacity_bytes(cluster.gpu) / mem.GB, 2)
    common: dict[str, Any] = {"name": job.name, "gpus": job.gpus, "memory_gb": mem_gb,
                               "memory_gb_per_gpu": total_gb, "capacity_gb": cap, "chosen": chosen,
                               "tiers": tiers, "job": resolved, "microbatches": best.microbatches}
    if not fits:
        common["note"] = _fit_hint(model, job) if hints else ""
        return JobEstimate(fits=False, step_time_s=None, tokens_per_s=None, model_tflops_per_gpu=None,
                           hardware_tflops_per_gpu=None, mfu=None, breakdown_s={}, plan=None, **common)
    v = scenario.variability
    # synchronous training waits for the slowest GPU every step: its expected extra time (the plan stays a
    # nominal GPU's step: the engine run draws the speeds and stretches it itself)
    wait = best.step_s * (straggler_factor(v.straggler_sigma, v.slow_gpu_fraction, v.slow_gpu_factor,
                                           job.gpus) - 1.0)
    step = best.step_s + wait
    breakdown = dict(best.breakdown)
    if wait > 0:
        breakdown["stragglers"] = round(wait, 6)
    tokens = job.global_batch * job.seq_len
    model_flops = cm.model_flops_per_token(job.model, job.seq_len) * tokens
    hw_flops = model_flops + recompute_flops_per_token(job, cfg.recompute) * tokens
    model_tf = model_flops / step / job.gpus / 1e12
    return JobEstimate(fits=True, step_time_s=step, tokens_per_s=tokens / step,
                       model_tflops_per_gpu=model_tf, hardware_tflops_per_gpu=hw_flops / step / job.gpus / 1e12,
                       mfu=model_tf / cluster.gpu.peak_tflops(job.precision), breakdown_s=breakdown,
                       plan=best.plan, **common)


def _estimate_inference(scenario: Scenario, job: Job, plan: bool) -> JobEstimate:
    """An inference job: one replica serving its share of the requests (engine/inference.py)."""
    from .inference import serve

    cluster = scenario.cluster
    r = serve(scenario, job)
    memory_gb = {"weights": round(r.weights_gb, 2), "kv_cache": round(r.kv_cache_gb, 2),
                 "reserve": round(r.reserve_gb, 2)}
    common: dict[str, Any] = {
        "name": job.name, "gpus": job.gpus, "memory_gb": memory_gb,
        "memory_gb_per_gpu": round(r.weights_gb + r.kv_cache_gb + r.reserve_gb, 2),
        "capacity_gb": round(r.capacity_gb, 2), "chosen": {}, "tiers": _tiers(cluster, job), "job": job,
        "kind": "inference"}
    if not r.fits:
        return JobEstimate(fits=False, step_time_s=None, tokens_per_s=None, model_tflops_per_gpu=None,
                           hardware_tflops_per_gpu=None, mfu=None, breakdown_s={}, plan=None,
                           note="the weights leave no room for one sequence's K/V cache: add GPUs to tp or pp",
                           **common)
    step = r.plan.step_time_s if r.plan is not None else r.decode_s
    busy = r.busy
    breakdown = {"prefill": round(step * busy * r.prefill_share, 6),
                 "decode": round(step * busy * (1 - r.prefill_share), 6),
                 "idle": round(step * max(0.0, 1 - busy), 6)}
    serving = {"requests_per_s": round(r.requests_per_s, 3), "batch_limit": r.batch_limit,
               "mean_batch": round(r.mean_batch, 2), "busy": round(r.busy, 4),
               "prefill_share": round(r.prefill_share, 4), "prefill_s": round(r.prefill_s, 6),
               "decode_step_s": round(r.decode_s, 6)}
    return JobEstimate(fits=True, step_time_s=step, tokens_per_s=r.tokens_per_s,
                       model_tflops_per_gpu=r.model_tflops_per_gpu, hardware_tflops_per_gpu=r.model_tflops_per_gpu,
                       mfu=r.model_tflops_per_gpu / cluster.gpu.peak_tflops(job.precision), breakdown_s=breakdown,
                       plan=r.plan if plan else None, ttft_s=r.ttft_s, tpot_s=r.tpot_s, serving=serving, **common)


_TIERS: dict[tuple[Cluster, col.Placement], dict[str, str | None]] = {}


def _tiers(cluster: Cluster, job: Job) -> dict[str, str | None]:
    """The tier each parallel dimension crosses: it depends on the job's placement only (kept for the next
    job with the same placement, as a sweep has many)."""
    key = (cluster, col.placement(job))
    tiers = _TIERS.get(key)
    if tiers is None:                        # (no lookup after the store: safe with threads, as Dask runs)
        if len(_TIERS) >= 256:
            _TIERS.clear()
        layout = Layout(job, Topology.of(cluster)).tiers()
        tiers = _TIERS[key] = {d: layout[d] for d in DIMS}
    return dict(tiers)


def _fit_hint(model: _JobModel, job: Job) -> str:
    """When fixed settings do not fit: the settings that would, with every auto setting searched."""
    autos = {k: "auto" for k in ("micro_batch", "virtual_stages", "recompute")}
    best, fits = _search(model, candidates(dataclasses.replace(job, **autos)), plan=False)
    if not fits:
        return "no micro_batch, virtual_stages or recompute setting fits: add GPUs to tp, pp or zero sharding"
    changed = [f"{k} = {getattr(best.config, k)!r}" for k in autos if getattr(best.config, k) != getattr(job, k)]
    return "fits with " + ", ".join(changed) + " (or set them to \"auto\")"


@lru_cache(maxsize=256)
def straggler_factor(sigma: float, slow_fraction: float, slow_factor: float, n: int) -> float:
    """E[max over n GPUs of 1 / speed]: how much longer a synchronous step takes than a nominal GPU's.

    Each GPU's speed is lognormal around 1 (sigma) and, for a fraction of GPUs, times slow_factor, as the
    engine run draws them (engine/run.py). 1/speed = exp(-sigma Z) / s has the CDF
    F(x) = (1 - f) Phi(ln x / sigma) + f Phi((ln x + ln s) / sigma); the slowest of n has CDF F^n, and
    E[max] = x0 + integral from x0 of (1 - F(x)^n) dx (order statistics; for the lognormal part alone this grows
    like exp(sigma sqrt(2 ln n))).
    """
    if n <= 1 or (sigma <= 0 and slow_fraction <= 0):
        return 1.0
    ln_s = np.log(slow_factor) if slow_fraction > 0 else 0.0
    if sigma <= 0:
        p_any = 1.0 - (1.0 - slow_fraction) ** n
        return 1.0 + p_any * (1.0 / slow_factor - 1.0)
    from math import erf, sqrt

    y = np.linspace(-8 * sigma, 8 * sigma - ln_s, 4001)          # ln x
    phi = np.vectorize(lambda z: 0.5 * (1 + erf(z / sqrt(2))))
    cdf = (1 - slow_fraction) * phi(y / sigma) + slow_fraction * phi((y + ln_s) / sigma)
    x = np.exp(y)
    tail = 1.0 - np.clip(cdf, 0.0, 1.0) ** n
    return float(x[0] + np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(x)))


def recompute_flops_per_token(job: Job, recompute: str) -> float:
    """FLOPs recomputation adds per token: one more forward of the layers under full recomputation."""
    if recompute != "full":
        return 0.0
    model = job.model
    return (cm.model_flops_per_token(model, job.seq_len) - 6.0 * model.hidden * model.vocab) / 3.0


def cluster_summary(cluster: Cluster) -> dict[str, float]:
    topo = Topology.of(cluster)
    it_mw = cluster.gpus * facility.it_w_per_gpu(cluster.gpu) / 1e6
    return {"gpus": cluster.gpus, "nodes": topo.nodes, "pods": topo.pods, "buildings": topo.buildings,
            "it_power_mw": round(it_mw, 6), "facility_power_mw": round(it_mw * cluster.pue, 6)}


def estimate(scenario: Scenario, plan: bool = True, hints: bool = True) -> ScenarioEstimate:
    """Every job of the scenario, in scenario order (plan, hints: as for estimate_job)."""
    out = ScenarioEstimate(scenario=scenario.name, cluster=cluster_summary(scenario.cluster))
    out.jobs = [estimate_job(scenario, job, plan, hints) for job in scenario.jobs]
    return out


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def to_json(est: ScenarioEstimate) -> dict[str, Any]:
    """The --json form: {"scenario", "cluster", "jobs": [...]}."""
    jobs = []
    for j in est.jobs:
        jobs.append({
            "name": j.name, "gpus": j.gpus, "step_time_s": _round(j.step_time_s),
            "tokens_per_s": _round(j.tokens_per_s, 1), "model_tflops_per_gpu": _round(j.model_tflops_per_gpu, 2),
            "mfu": _round(j.mfu, 6), "hardware_tflops_per_gpu": _round(j.hardware_tflops_per_gpu, 2),
            "memory_gb_per_gpu": j.memory_gb_per_gpu, "fits": j.fits, "breakdown_s": j.breakdown_s,
            "memory_gb": j.memory_gb, "chosen": j.chosen,
            "layout": {d: getattr(j.job, d) for d in DIMS}, "tiers": j.tiers,
            "capacity_gb": j.capacity_gb, "microbatches": j.microbatches, "kind": j.kind,
        })
        if j.kind == "inference":
            jobs[-1].update({"ttft_s": _round(j.ttft_s, 6), "tpot_s": _round(j.tpot_s, 6), **j.serving})
    return {"scenario": est.scenario, "cluster": est.cluster, "jobs": jobs}
