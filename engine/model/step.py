"""One training step of one job under one configuration: its chunks, their costs, the pipeline and the tail.

`JobModel` holds everything about a job that does not depend on the "auto" settings (its placement's routes,
its layers in chunks (engine/model/chunks.py), the costs of each distinct chunk) and evaluates a `Config`:
the memory each stage needs (engine/model/memory.py), the forward and backward segments of every chunk
(compute from engine/model/compute.py, communication of each parallel dimension on the tiers it crosses from
engine/model/collectives.py), the pipeline of one replica (engine/model/pipeline.py), then the data-parallel
gradient reduction (overlapped with the last backward in buckets), the optimizer step and the parameter
all-gather; and, when asked, the StepPlan the run replays (its phases the stream's codes, as the schedule
made them).

Costs that depend only on a chunk's blocks, a job's placement or its layout are cached for the next job that
shares them (a sweep has thousands).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..config.catalog import Model
from ..config.cluster import Cluster
from ..config.geometry import TIERS, Geometry
from ..config.job import Job
from ..config.phases import CODE, PHASES
from ..config.units import GB
from . import chunks as chunking
from . import collectives as col
from . import compute as cm
from . import memory as mem
from . import scaleup
from .chunks import Chunk, chunk_params
from .kernels import BF16
from .pipeline import Intervals, PipelineRun, Segment, evaluate, peak_inflight
from .plan import StepPlan, Timelines, extend_run, merge_runs

# Simulate at most this many microbatches; beyond, the steady state repeats and is extended linearly.
MAX_SIM_MICROBATCHES = 256
# DualPipe (DeepSeek-V3 report, section 3.2.1): a forward chunk and a backward chunk run together, the
# all-to-all and PP traffic of one hidden behind the other's compute; 20 of the H800's 132 SMs run the
# communication, so the overlapped compute runs on the other 112.
DUALPIPE_COMPUTE_SHARE = 112 / 132


@dataclass(frozen=True)
class Config:
    micro_batch: int
    virtual_stages: int
    recompute: str


# ------------------------------------------------------------------------------------------------ inputs

def _scores(job: Job) -> float:
    """Attention scores kept per token on one GPU (heads x keys), when the kernel keeps them in memory."""
    return job.model.heads / job.tp * job.seq_len if job.attention_kernel in cm.SCORES_IN_MEMORY else 0.0


def shard(job: Job, micro_batch: int) -> cm.Shard:
    return cm.Shard(tokens=micro_batch * job.seq_len // job.cp, seq_len=job.seq_len, tp=job.tp, cp=job.cp,
                    attention=job.attention_kernel, dropout=job.dropout, fused=job.fused_kernels,
                    ce_fused=job.cross_entropy_fusion, expert_gemm=job.expert_gemm,
                    sp=job.sequence_parallel and job.tp > 1, ep=job.ep, precision=job.precision)


# ------------------------------------------------------------------------------------------ communication

@dataclass(frozen=True)
class Net:
    tp: col.Route
    cp: col.Route
    ep: col.Route
    dp: col.Route
    pp_tiers: tuple[int, ...]      # tier index crossed by each stage boundary r -> r+1 (and p-1 -> 0)
    pp_slowdown: float
    pp_hops: tuple[int, ...] = ()  # torus hops between neighbouring stages inside a scale-up domain
    pp_tier: str | None = None     # the outermost tier the PP groups cross
    # seconds of collectives over these routes (JobModel._kept): the jobs of one placement share them
    seconds: dict[tuple[object, ...], float] = field(default_factory=dict, compare=False, repr=False)


MAX_KEPT_SECONDS = 4096            # collectives' seconds kept per placement (Net.seconds)


ROUTE_DIMS = {"tp": (("tp",), "ring"), "cp": (("cp",), "ring"), "ep": (("ep",), "all2all"),
              "pp": (("pp",), "ring")}


def route_dims(job: col.Placement | Job, dim: str) -> tuple[tuple[str, ...], str]:
    """The group dimensions and pattern of one parallel dimension's traffic (DP groups include CP)."""
    if dim == "dp":
        return (("dp", "cp") if job.cp > 1 else ("dp",)), "ring"
    return ROUTE_DIMS[dim]


@lru_cache(maxsize=64)
def _net(cluster: Cluster, job: col.Placement, background: col.Background = ()) -> Net:
    """The routes of a job's placement (jobs that differ only in batch, recomputation, ... share them), with
    other jobs' traffic on the tiers it shares (`background`, engine/model/contention.py)."""
    topo = Geometry.of(cluster)
    stride = job.geometry().stride("pp")
    first = job.first_gpu
    r = np.arange(job.pp)
    tiers = tuple(topo.tier_between(first + r * stride, first + (r + 1) % job.pp * stride).tolist())

    def route(dim: str) -> col.Route:
        return col.route(cluster, job, *route_dims(job, dim), background)

    pp = route("pp")
    return Net(tp=route("tp"), cp=route("cp"),
                ep=route("ep") if job.ep > 1 else col.Route(1, 1, 1, None, 1.0, {}),
                dp=route("dp"), pp_tiers=tiers, pp_slowdown=pp.slowdown, pp_hops=pp.hops, pp_tier=pp.tier)


def ep_network_share(job: Job, nodes: int) -> float:
    """Of an MoE dispatch's token copies bound for other nodes, the share that crosses the network. NCCL's
    all-to-all sends every copy (1.0). DeepEP sends a token once to each node that holds any of its experts
    and forwards it there over NVLink (DeepSeek-V3 report 3.2.2): with k experts spread evenly over the
    group's nodes, N (1 - (1 - 1/N)^k) distinct nodes, at most the model's `routed_nodes`, of k copies."""
    model = job.model
    k = model.experts_per_token
    if job.ep_dispatch != "deepep" or nodes <= 1 or k <= 1:
        return 1.0
    distinct = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    if model.routed_nodes:
        distinct = min(distinct, model.routed_nodes)
    return distinct / k


def _tp_time(cluster: Cluster, net: Net, nbytes: float, sp: bool) -> col.Comm:
    """One TP exchange of a full activation: all-reduce, or reduce-scatter + all-gather with SP."""
    if sp:
        rs = col.reduce_scatter(cluster, net.tp, nbytes)
        return col.Comm(2 * rs.time_s, rs.load)
    return col.allreduce(cluster, net.tp, nbytes)


def _p2p_time(cluster: Cluster, net: Net, nbytes: float, tier: int) -> float:
    """One point-to-point transfer between neighbouring stages across `tier` (an index into TIERS)."""
    if nbytes <= 0:
        return 0.0
    if tier == 0:
        return scaleup.p2p(cluster, net.pp_hops, nbytes)
    return nbytes / (col.net_busbw(cluster) / net.pp_slowdown) + col.net_latency(cluster, TIERS[tier])


# ------------------------------------------------------------------------------------------- evaluation

@dataclass
class Eval:
    config: Config
    fits: bool
    memory: mem.StageMemory[float]
    step_s: float = 0.0
    plan: StepPlan | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    microbatches: int = 0
    busy: dict[str, float] = field(default_factory=dict)     # seconds per step each dimension is on the links


Passes = tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]   # (forward, backward) segments
StageSegments = tuple[tuple[tuple[Segment, ...], ...], ...]   # [stage][chunk]: a microbatch's segments
Sends = tuple[float, ...]      # per stage r: seconds of its transfer to the next stage (or the previous one)


class JobModel:
    """Everything about one job that does not depend on the auto settings, and the evaluation of a Config.

    Costs that depend only on a chunk's blocks (not on its place in the pipeline) are computed once per
    model and reused by every stage, configuration and evaluation with the same blocks.
    """

    def __init__(self, cluster: Cluster, job: Job, background: col.Background = (),
                 busy: bool = False) -> None:
        self.cluster, self.job = cluster, job
        self.gpu = cluster.gpu
        self.background = background
        self.want_busy = busy          # Eval.busy even without a plan (jobs that share tiers: contention.py)
        self.net = _net(cluster, col.placement(job), background)
        self.per_replica = job.global_batch // job.dp
        self.dp_shards = job.dp * job.cp
        self.expert_shards = max(1, job.dp * job.cp // job.ep)
        self._ep_net_share = ep_network_share(job, self.net.ep.k)
        self._updates: dict[float, tuple[float, float]] = {}
        self._passes: dict[tuple[Chunk, int, str], Passes] = {}
        self._params: dict[Chunk, float] = {}
        self._shards: dict[int, cm.Shard] = {}
        self._blocks: dict[tuple[str, int, str], cm.BlockCost] = {}
        self._memory: dict[Config, mem.StageMemory[np.ndarray]] = {}

    def grid(self, v: int) -> chunking.Grid:
        """The job's chunks with v per stage, each distinct one once (engine/model/chunks.py)."""
        return chunking.grid(self.job.model, self.job.pp, v)

    def stages(self, v: int) -> chunking.StageColumns:
        job = self.job
        return chunking.stage_columns(job.model, job.tp, job.ep, job.pp, v)

    # -- per chunk costs -------------------------------------------------------------------------------
    def _chunk_passes(self, st: Chunk, micro_batch: int, recompute: str) -> Passes:
        """Forward and backward segments of one microbatch through the chunk (cached by its blocks)."""
        key = (st, micro_batch, recompute)
        if key not in self._passes:
            self._passes[key] = self._compute_passes(st, micro_batch, recompute)
        return self._passes[key]

    def shard(self, micro_batch: int) -> cm.Shard:
        """The job's shard of a microbatch (`shard`), kept per size."""
        sh = self._shards.get(micro_batch)
        if sh is None:
            sh = self._shards[micro_batch] = shard(self.job, micro_batch)
        return sh

    def block(self, kind: str, micro_batch: int, recompute: str) -> cm.BlockCost:
        """The cost of one block ("dense" or "moe" layer, "embedding", "output", "mtp") of a microbatch, kept
        for the job's chunks (engine/model/compute.py caches them for every job alike)."""
        key = (kind, micro_batch, recompute)
        cost = self._blocks.get(key)
        if cost is None:
            gpu, model, sh = self.gpu, self.job.model, self.shard(micro_batch)
            cost = self._blocks[key] = \
                cm.layer_cost(gpu, model, kind == "moe", sh, recompute) if kind in ("dense", "moe") else \
                cm.embedding_cost(gpu, model, sh) if kind == "embedding" else \
                cm.output_cost(gpu, model, sh) if kind == "output" else cm.mtp_cost(gpu, model, sh)
        return cost

    def _compute_passes(self, st: Chunk, micro_batch: int, recompute: str) -> Passes:
        job, cl, gpu, net = self.job, self.cluster, self.gpu, self.net
        sh = self.shard(micro_batch)
        blocks: list[tuple[cm.BlockCost, int]] = []
        if st.dense:
            blocks.append((self.block("dense", micro_batch, recompute), st.dense))
        if st.moe:
            blocks.append((self.block("moe", micro_batch, recompute), st.moe))
        if st.embedding:
            blocks.append((self.block("embedding", micro_batch, recompute), 1))
        if st.output:
            blocks.append((self.block("output", micro_batch, recompute), 1))
        if st.mtp:      # each multi-token prediction module: a layer, its own parts, the output head again
            layer = "moe" if cm.mtp_is_moe(job.model) else "dense"
            blocks += [(self.block(layer, micro_batch, recompute), st.mtp),
                       (self.block("mtp", micro_batch, recompute), st.mtp),
                       (self.block("output", micro_batch, recompute), st.mtp)]
        f = {"compute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
        b = dict(f)
        for block, n in blocks:
            for pas, acc in ((block.fwd, f), (block.bwd, b), (block.recompute, b)):
                if pas is None:
                    continue
                acc["compute"] += n * pas.compute_s
                if pas.tp_collectives:
                    comm = n * pas.tp_collectives * self._tp_seconds(pas.tp_bytes, sh.sp)
                    if job.tp_comm_overlap:
                        # each GEMM is split in tp chunks whose transfers overlap the other chunks' compute:
                        # the first chunk's transfer, and what the GEMMs cannot cover, stay exposed
                        comm = max(comm / job.tp, comm - n * pas.gemm_s)
                    acc["tp"] += comm
                if pas.cp_bytes:
                    step = col.p2p(cl, net.cp, pas.cp_bytes).time_s
                    acc["cp"] += n * (job.cp - 1) * max(0.0, step - pas.cp_overlap_s)
                if pas.ep_bytes:
                    acc["ep"] += n * 2 * col.all_to_all(cl, net.ep, pas.ep_bytes, self._ep_net_share).time_s
        if job.schedule == "dualpipe":
            # the forward of one microbatch runs beside the backward of another: each one's EP all-to-all
            # hides behind the other's compute, which runs on the SMs communication leaves free
            for acc in (f, b):
                acc["compute"] /= DUALPIPE_COMPUTE_SHARE
            f["ep"], b["ep"] = max(0.0, f["ep"] - b["compute"]), max(0.0, b["ep"] - f["compute"])
        if job.offload == "activations":
            # each layer's saved activations go to host memory during the forward and come back during the
            # backward, over the host link (each direction on its own): what the chunk's compute cannot
            # cover, the GPU waits for
            copy = self._activation_bytes(st, sh, recompute) / (gpu.host_link_gb_s * 1e9)
            f["compute"] += max(0.0, copy - f["compute"])
            b["compute"] += max(0.0, copy - b["compute"])
        if job.zero >= 3:
            # ZeRO-3 (FSDP) gathers each layer's weights before its forward and its backward and
            # reduce-scatters its gradients after, every microbatch: prefetched behind the other layers'
            # compute when overlapped, but for the first layer's gather and the last layer's reduction
            params = self._chunk_params(st)
            layers = max(1, st.layers)
            ag = self._dp_seconds("reduce_scatter", BF16 * params)          # (an all-gather costs the same)
            rs = self._dp_seconds("reduce_scatter", self._grad_bytes * params)
            f["dp"] = max(ag / layers, ag - f["compute"]) if job.overlap_param_gather else ag
            hidden = b["compute"] if job.overlap_grad_reduce else 0.0
            b["dp"] = max((ag + rs) / layers, ag + rs - hidden) if job.overlap_param_gather else \
                ag + max(rs / layers, rs - hidden)
        return tuple(f.items()), tuple(b.items())

    def _activation_bytes(self, st: Chunk, sh: cm.Shard, recompute: str) -> float:
        """The activations one microbatch leaves for the backward in the chunk's layers, on one GPU."""
        job = self.job
        per_token = 0.0
        mtp_moe = cm.mtp_is_moe(job.model)       # an MTP module's layer is of the last layers' kind
        for moe, n in ((False, st.dense + (0 if mtp_moe else st.mtp)),
                       (True, st.moe + (st.mtp if mtp_moe else 0))):
            if n:
                per_token += n * mem.activation_bytes_per_token(job.model, moe, job.tp, sh.sp, recompute,
                                                                job.precision == "fp8", _scores(job),
                                                                job.dropout > 0)
        return per_token * sh.tokens

    def _kept(self, key: tuple[object, ...], seconds: Callable[[], float]) -> float:
        """seconds(), kept with the placement's routes (Net.seconds) by `key`: a collective over them takes
        what its routes and `key` (the operation, the dimension, the bytes) say, so every job of the placement
        (a sweep's points) shares it."""
        memo = self.net.seconds
        value = memo.get(key)
        if value is None:          # (no lookup after the store: safe with threads, as Dask runs)
            if len(memo) >= MAX_KEPT_SECONDS:
                memo.clear()
            value = memo[key] = seconds()
        return value

    def _tp_seconds(self, nbytes: float, sp: bool) -> float:
        """One TP exchange (_tp_time): a job's chunks and passes exchange a few sizes many times."""
        return self._kept(("tp", sp, nbytes), lambda: _tp_time(self.cluster, self.net, nbytes, sp).time_s)

    def _dp_seconds(self, reduce: str, nbytes: float) -> float:
        """One all-reduce (`reduce` "allreduce") or reduce-scatter / all-gather ("reduce_scatter") of
        `nbytes` over the DP route."""
        collective = col.allreduce if reduce == "allreduce" else col.reduce_scatter
        cluster, route = self.cluster, self.net.dp
        return self._kept((reduce, "dp", nbytes), lambda: collective(cluster, route, nbytes).time_s)

    def _sends(self, nbytes: float) -> tuple[float, ...]:
        """Seconds of each stage boundary's transfer of `nbytes` (r -> r + 1): it depends on the tier crossed
        only, so once per tier (a deep pipeline has 64 boundaries and two or three tiers)."""
        tiers = self.net.pp_tiers
        by_tier = {tier: _p2p_time(self.cluster, self.net, nbytes, tier) for tier in set(tiers)}
        return tuple(map(by_tier.__getitem__, tiers))

    def _chunk_params(self, st: Chunk) -> float:
        if st not in self._params:
            self._params[st] = chunk_params(self.job.model, self.job.tp, self.job.ep, self.job.pp, st)
        return self._params[st]

    # -- memory ----------------------------------------------------------------------------------------
    def memory(self, cfg: Config) -> mem.StageMemory[np.ndarray]:
        """What one GPU of each pipeline stage holds under `cfg`: a StageMemory whose fields are arrays over
        the stages, computed together (elementwise, the same operations as for one stage: a deep pipeline has
        64); kept for the plan, which shows it again."""
        held = self._memory.get(cfg)
        if held is None:
            held = self._memory[cfg] = self._stage_memory(cfg)
        return held

    def _stage_memory(self, cfg: Config) -> mem.StageMemory[np.ndarray]:
        job = self.job
        m = self.per_replica // cfg.micro_batch
        sh = self.shard(cfg.micro_batch)
        fp8 = job.precision == "fp8"
        scores = _scores(job)
        kinds = (False, True) if job.model.is_moe else (False,)   # a dense model's chunks hold no MoE layer
        per_token = {moe: mem.activation_bytes_per_token(job.model, moe, job.tp, sh.sp, cfg.recompute, fp8,
                                                         scores, job.dropout > 0) for moe in kinds}
        full_layer = {moe: mem.activation_bytes_per_token(job.model, moe, job.tp, sh.sp, "none") * sh.tokens
                      for moe in kinds}
        grid = self.grid(cfg.virtual_stages)
        per_chunk = []              # each distinct chunk's activations of one microbatch
        for st in grid.chunks:
            per_tok = st.dense * per_token[False]
            if st.moe:
                per_tok += st.moe * per_token[True]
            if st.embedding:
                per_tok += job.model.hidden * BF16 / (job.tp if sh.sp else 1)
            if st.mtp:      # each module's layer and its projection's 2h-wide input
                per_tok += st.mtp * (per_token[cm.mtp_is_moe(job.model)] + 2 * job.model.hidden * BF16)
            per_chunk.append(per_tok * sh.tokens)
        held = held_activations(sim_schedule(job), job.model, job.pp, cfg.virtual_stages, m, tuple(per_chunk))
        if job.offload == "activations":    # on the GPU: the layer being computed and the one being copied
            largest = max(per_token.values()) * sh.tokens * 2
            held = tuple(min(h, largest) for h in held)
        stages = self.stages(cfg.virtual_stages)
        transient: float | np.ndarray = 0.0
        if cfg.recompute == "full":
            transient = np.where(stages.moe, full_layer[True], full_layer[False]) if job.model.is_moe else \
                np.full(job.pp, full_layer[False])
        # one layer's gradient working set (input/output grads, the largest intermediate) during backward
        transient = transient + 2 * sh.tokens * max(job.model.ffn, job.model.hidden) * BF16 * 2 / job.tp
        # the output layer's BF16 logits and the loss's FP32 working copy (its gradient is written in place by
        # a fused cross-entropy)
        logits = np.where(stages.output, sh.tokens * job.model.vocab / job.tp * (BF16 + 4.0), 0.0)
        out = mem.stage_memory(params=stages.params, expert_params=stages.expert_params,
                               largest_layer_params=stages.largest_layer_params, zero=job.zero,
                               dp_shards=self.dp_shards, expert_shards=self.expert_shards,
                               activations=np.array(held), transient=transient, logits=logits,
                               grad_bytes=self._grad_bytes,
                               optimizer_bytes=0.0 if job.offload == "optimizer" else mem.OPTIMIZER_BYTES)
        if job.schedule == "dualpipe":
            # DualPipe keeps two copies of the parameters (and their gradients), one per direction
            # (DeepSeek-V3 report 3.2.1)
            extra = out.weights + out.gradients
            out = dataclasses.replace(out, weights=2 * out.weights, gradients=2 * out.gradients,
                                      reserve=out.reserve + mem.FRAGMENTATION * extra)
        return out

    # -- one configuration -----------------------------------------------------------------------------
    def check_memory(self, cfg: Config) -> Eval:
        """The configuration's memory and whether it fits (no simulation): the fullest stage's."""
        stages = self.memory(cfg)
        totals = stages.total
        worst = stages.stage(int(np.argmax(totals)))        # the first fullest, as max() picks
        fits = bool(np.all(totals <= mem.capacity_bytes(self.gpu)))
        return Eval(cfg, fits, worst, microbatches=self.per_replica // cfg.micro_batch)

    def run(self, ev: Eval, plan: bool) -> None:
        """Simulate a configuration that fits: its step time, breakdown and (when `plan`) StepPlan."""
        job, cl, cfg = self.job, self.cluster, ev.config
        p, v, m = job.pp, cfg.virtual_stages, ev.microbatches
        grid = self.grid(v)
        sh = self.shard(cfg.micro_batch)
        passes = [self._chunk_passes(st, cfg.micro_batch, cfg.recompute) for st in grid.chunks]
        fwd = grid.spread([f for f, _ in passes])
        bwd = grid.spread([b for _, b in passes])
        act = sh.tokens * job.model.hidden * BF16 / (job.tp if sh.sp else 1)
        send = self._sends(act) if p > 1 else (0.0,)
        if job.schedule == "dualpipe":      # PP transfers overlap the paired chunk's compute: latency remains
            send = tuple(min(t, cl.scale_out.latency_us * 1e-6) for t in send)
        send_b = send[-1:] + send[:-1]      # stage r's gradient to r - 1 crosses boundary r - 1
        interleaved = v > 1 or job.schedule == "dualpipe"     # Megatron overlaps sends interleaved only
        if p > 1 and (not job.overlap_p2p_comm or not interleaved):
            fwd, bwd, send, send_b = _blocking_sends(fwd, bwd, send, send_b)
        schedule = sim_schedule(job)
        if m <= MAX_SIM_MICROBATCHES:
            run = _pipeline(plan, schedule, p, v, m, fwd, bwd, send, send_b)
            phase_s, ends, last_b = run.phase_seconds(), run.end[:, -1], _last_backward(run)
            intervals = lambda: run.intervals
        else:
            # the steady state repeats: simulate two sizes and extend linearly to m
            m1, m2 = simulated_sizes(p, v, m)
            run1 = _pipeline(plan, schedule, p, v, m1, fwd, bwd, send, send_b)
            run2 = _pipeline(plan, schedule, p, v, m2, fwd, bwd, send, send_b)
            extended, end_list, b_list = extend_run(run1, run2, m1, m2, m)
            phase_s, intervals = extended.phase_seconds(), lambda: extended
            both = np.array(b_list)
            ends, last_b = np.array(end_list), (both[:, :, 0], both[:, :, 1])
        ev.plan, ev.step_s, ev.breakdown, ev.busy = self._finish(cfg, phase_s, intervals, ends, last_b, fwd,
                                                                 bwd, m, plan)
        if job.schedule == "dualpipe" and p > 2 and v == 1:
            self._dualpipe_bubble(ev, fwd, bwd)

    def _dualpipe_bubble(self, ev: Eval, fwd: StageSegments, bwd: StageSegments) -> None:
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

    def _finish(self, cfg: Config, phase_s: np.ndarray, intervals: Callable[[], Intervals], ends: np.ndarray,
                last_b: tuple[np.ndarray, np.ndarray], fwd: StageSegments, bwd: StageSegments, m: int,
                plan: bool) -> tuple[StepPlan | None, float, dict[str, float], dict[str, float]]:
        """Add DP gradient reduction, optimizer and parameter all-gather to the pipeline schedule (its seconds
        per phase summed over the stages, when each stage ends (`ends`) and each chunk's last backward starts
        and ends (last_b: two [stage, chunk] arrays), and its intervals when a plan is asked for); the
        breakdown, and the StepPlan when `plan`. Every stage at once: arrays over the stages."""
        job = self.job
        p, v = job.pp, cfg.virtual_stages
        grid, stages = self.grid(v), self.stages(v)
        t_stream: float | np.ndarray = 0.0     # each stage's gradient reduction, its chunks from the last
        comm = None
        if job.zero < 3:               # (ZeRO-3 reduces per microbatch inside the backward: _compute_passes)
            comm = np.array([self._gradient_reduction(self._chunk_params(st)) for st in grid.chunks])[grid.at]
            if job.overlap_grad_reduce:
                # buckets: the first is ready after one layer's backward, the last after the chunk's
                b0, b1 = last_b
                layers = np.maximum(1, grid.layers)
                ready, done = b0 + (b1 - b0) / layers, b1 + comm / layers
                for c in reversed(range(v)):
                    t_stream = np.maximum(np.maximum(t_stream, ready[:, c]) + comm[:, c], done[:, c])
            else:
                for c in reversed(range(v)):        # after the stage's whole backward
                    t_stream = np.maximum(t_stream, ends) + comm[:, c]
        dp_end = np.maximum(ends, t_stream)
        updates = np.array([self._update(f.params) for f in stages.kinds]).take(stages.at, axis=0)
        opt_by_stage, ag = updates[:, 0], updates[:, 1]
        if job.zero in (1, 2):
            # overlapped with the next step's first forward but for the first layer's bucket, or exposed
            ag_by_stage = ag / np.maximum(1, stages.layers) if job.overlap_param_gather else ag
        else:
            ag_by_stage = np.zeros(p)
        sync, opt_time, ag_time = float(dp_end.max()), float(opt_by_stage.max()), float(ag_by_stage.max())
        step = sync + opt_time + ag_time
        # each stage's intervals after its pipeline schedule cover [its end, step]: the gradient reduction
        # left, waiting for the slowest stage, the optimizer, waiting, the parameter all-gather, waiting;
        # their lengths here by phase: dp (the reduction, the all-gather), bubble (the waits), optimizer
        opt_end, ag_start = sync + opt_by_stage, sync + opt_time
        ag_end = ag_start + ag_by_stage
        length = np.empty((p, 6))
        for k, (b, a) in enumerate(((dp_end, ends), (ag_end, ag_start), (sync, dp_end), (ag_start, opt_end),
                                    (step, ag_end), (opt_end, sync))):
            np.subtract(b, a, out=length[:, k])           # 0 where the interval is left out
        # each phase's time is the sum of its intervals' lengths (stage after stage, each stage's in order, as
        # the intervals' phase_seconds would add them), as a mean over the stages
        tail = np.zeros(len(PHASES))
        for phase, cols in (("dp", slice(0, 2)), ("bubble", slice(2, 5)), ("optimizer", slice(5, 6))):
            tail[CODE[phase]] = np.add.accumulate(length[:, cols].ravel())[-1]
        totals = dict(zip(PHASES, ((phase_s + tail) / p).tolist()))
        order = ["compute", "tp", "cp", "ep", "pp", "dp", "bubble", "optimizer"]
        breakdown = {k: round(totals.get(k, 0.0), 6) for k in order if totals.get(k, 0.0) > 0 or k in
                     ("compute", "bubble", "optimizer")}
        busy: dict[str, float] = {}
        if plan or self.want_busy:
            # the DP traffic per step: each stage's chunks' gradient reductions (the last chunk's first; none
            # with ZeRO-3) and its parameter all-gather, in that order
            parts = [] if comm is None else [comm[:, ::-1] / p]
            if job.zero in (1, 2):
                parts.append(ag[:, None] / p)
            dp_busy = float(np.add.accumulate(np.hstack(parts).ravel())[-1]) if parts else 0.0
            busy = self._busy(cfg, fwd, bwd, m, dp_busy)
        if not plan:
            return None, step, breakdown, busy
        # the intervals in their order: dp, bubble, optimizer (even of no time), bubble, dp (when there is an
        # all-gather), bubble
        present = length[:, [0, 2, 5, 3, 1, 4]] > 0
        present[:, 2] = True
        present[:, 4] = ag_by_stage > 0
        full = np.full((p, 3), (sync, ag_start, step))
        edges = np.stack([ends, dp_end, full[:, 0], opt_end, full[:, 1], ag_end, full[:, 2]], axis=1)
        phases = np.array([CODE[x] for x in ("dp", "bubble", "optimizer", "bubble", "dp", "bubble")],
                          dtype=np.int8)
        stage = np.broadcast_to(np.arange(p)[:, None], present.shape)
        after = Intervals(stage[present], edges[:, :-1][present], edges[:, 1:][present],
                          np.broadcast_to(phases, present.shape)[present])
        runs = merge_runs(intervals().then(after), step, p)
        tokens = job.global_batch * job.seq_len
        flops = cm.model_flops_per_token(job.model, job.seq_len) * tokens
        tier_load = self._tier_load(cfg, busy, step)
        memory = tuple(round(total / GB, 2) for total in self.memory(cfg).total.tolist())
        return (StepPlan(step_time_s=step, stages=Timelines(runs, p), tier_load=tier_load,
                         tokens=tokens, model_flops=flops, memory_gb=memory), step, breakdown, busy)

    def _update(self, params: float) -> tuple[float, float]:
        """Seconds of the optimizer step and of the parameter all-gather (ZeRO-1/2) for a stage's params."""
        if params not in self._updates:
            shards = self.dp_shards if self.job.zero >= 1 else 1
            ag = 0.0
            if self.job.zero in (1, 2):
                ag = self._dp_seconds("reduce_scatter", BF16 * params)      # (an all-gather costs the same)
            if self.job.offload == "optimizer":
                update = cm.host_optimizer_time(self.gpu, params / shards, self._grad_bytes)
            else:
                update = cm.optimizer_time(self.gpu, params, shards)
            self._updates[params] = (update, ag)
        return self._updates[params]

    @property
    def _grad_bytes(self) -> float:
        """Bytes per gradient as reduced: FP32 (Megatron's default, Llama 3) or BF16 (grad_reduce_dtype)."""
        return 4.0 if self.job.grad_reduce_dtype == "fp32" else 2.0

    def _gradient_reduction(self, params: float) -> float:
        """Seconds to reduce a chunk's gradients over DP (in grad_reduce_dtype)."""
        reduce = "allreduce" if self.job.zero == 0 else "reduce_scatter"
        return self._dp_seconds(reduce, self._grad_bytes * params)

    def _busy(self, cfg: Config, fwd: StageSegments, bwd: StageSegments, m: int,
              dp_busy: float) -> dict[str, float]:
        """Seconds per step each parallel dimension's traffic is on the links (per stage, averaged)."""
        job = self.job
        v = cfg.virtual_stages
        busy = {}
        for dim in ("tp", "cp", "ep"):
            seconds = sum(dict(fwd[r][c]).get(dim, 0.0) + dict(bwd[r][c]).get(dim, 0.0)
                          for r in range(job.pp) for c in range(v)) * m / job.pp
            if seconds > 0:
                busy[dim] = seconds
        if dp_busy > 0:
            busy["dp"] = dp_busy
        if job.pp > 1:
            act = self.shard(cfg.micro_batch).tokens * job.model.hidden * BF16 / \
                (job.tp if job.sequence_parallel and job.tp > 1 else 1)
            busy["pp"] = 2 * m * v * sum(self._sends(act)) / job.pp
        return busy

    def _tier_load(self, cfg: Config, busy: dict[str, float], step: float) -> dict[str, float]:
        """Mean load of each tier over the step: each dimension's traffic time times its load, averaged."""
        job, cl, net = self.job, self.cluster, self.net
        sh = self.shard(cfg.micro_batch)
        act = sh.tokens * job.model.hidden * BF16
        comms = {"tp": lambda: _tp_time(cl, net, act, sh.sp), "cp": lambda: col.p2p(cl, net.cp, act),
                 "ep": lambda: col.all_to_all(cl, net.ep, act),
                 "dp": lambda: col.reduce_scatter(cl, net.dp, 1e9),
                 "pp": lambda: col.p2p(cl, col.route(cl, job, ("pp",), "ring", self.background),
                                       act / (job.tp if sh.sp else 1))}
        load = {t: 0.0 for t in TIERS}
        for dim, seconds in busy.items():
            for tier, u in comms[dim]().load.items():
                load[tier] += u * min(seconds, step) / step
        return {t: round(min(1.0, x), 4) for t, x in load.items()}


def _blocking_sends(fwd: StageSegments, bwd: StageSegments, send: Sends,
                    send_b: Sends) -> tuple[StageSegments, StageSegments, Sends, Sends]:
    """Blocking point-to-point (older pipeline engines): the sender waits while its activations (gradients)
    travel, so each operation that sends ends with the transfer ("pp") and its output arrives as it ends. The
    last stage's last chunk sends no forward output, the first stage's first chunk no gradient."""
    made: dict[tuple[int, float], tuple[Segment, ...]] = {}      # chunks alike send alike: one tuple each

    def sending(segs: Sequence[Segment], seconds: float) -> tuple[Segment, ...]:
        key = (id(segs), seconds)
        out = made.get(key)
        if out is None:
            out = made[key] = (*segs, ("pp", seconds))
        return out

    def stages(kind: StageSegments, seconds: Sends, r: int, silent: int) -> StageSegments:
        """Every stage's chunks, each ending with its transfer but stage r's chunk `silent`: stages alike
        (the same chunks, sending alike) built once."""
        keys = list(zip(map(id, kind), seconds))
        rows = {key: tuple(sending(segs, key[1]) for segs in chunks)
                for key, chunks in dict(zip(keys, kind)).items()}
        out = list(map(rows.__getitem__, keys))
        out[r] = tuple(tuple(segs) if c == silent else sending(segs, seconds[r])
                       for c, segs in enumerate(kind[r]))
        return tuple(out)

    p = len(fwd)
    zero = (0.0,) * p
    return stages(fwd, send, p - 1, len(fwd[0]) - 1), stages(bwd, send_b, 0, 0), zero, zero


def _last_backward(run: PipelineRun) -> tuple[np.ndarray, np.ndarray]:
    """[stage, chunk]: when each chunk's last backward starts, and when it ends (PipelineRun.last_backward as
    arrays)."""
    k = run.program.last_backward
    rows = np.arange(k.shape[0])[:, None]
    return run.start[rows, k], run.end[rows, k]


def _pipeline(plan: bool, schedule: str, p: int, v: int, m: int, fwd: StageSegments, bwd: StageSegments,
              send: Sends, send_b: Sends) -> PipelineRun:
    """The pipeline's times (pipeline.evaluate): kept for the same exact inputs for a step plan (the plan of
    an estimate is evaluated again by the engine run), not for a search or a sweep, whose configurations do
    not repeat (hashing their segments to look them up cost more than a search's or a sweep's cache ever
    saved: none of a 1,000-point sweep's 462 evaluations hit)."""
    if plan:
        return _evaluate_cached(schedule, p, v, m, fwd, bwd, send, send_b)
    return evaluate(schedule, p, v, m, fwd, bwd, send, send_b)


@lru_cache(maxsize=64)
def _evaluate_cached(schedule: str, p: int, v: int, m: int, fwd: StageSegments, bwd: StageSegments,
                     send: Sends, send_b: Sends) -> PipelineRun:
    """A step plan's pipeline times, kept for the same exact inputs: pipeline.evaluate, which gives the SimPy
    simulation's times bit for bit without its processes (tests/test_plan_source.py holds the plans of both
    equal)."""
    return evaluate(schedule, p, v, m, fwd, bwd, send, send_b)


@lru_cache(maxsize=256)
def held_activations(schedule: str, model: Model, p: int, v: int, m: int,
                     per_chunk: tuple[float, ...]) -> tuple[float, ...]:
    """Per stage, the largest activation memory it holds (pipeline.peak_inflight) when each distinct chunk of
    the model's grid on p stages of v chunks holds per_chunk's bytes per microbatch: kept, as configurations
    that differ only in what leaves the activations as they are (ZeRO, the data-parallel reduction, ...) share
    it (a sweep's points do, about three in four)."""
    return tuple(peak_inflight(schedule, p, v, m, np.array(per_chunk)[chunking.grid(model, p, v).at]))


def simulated_sizes(p: int, v: int, m: int) -> tuple[int, ...]:
    """The microbatch counts `JobModel.run` simulates for a step of m: m itself, or two sizes at least a round
    apart that it extends from (m > MAX_SIM_MICROBATCHES)."""
    if m <= MAX_SIM_MICROBATCHES:
        return (m,)
    step = p if v > 1 else 1
    m2 = max(2 * step, MAX_SIM_MICROBATCHES // step * step)
    return max(step, m2 // 2 // step * step), m2


def sim_schedule(job: Job) -> str:
    """The schedule the pipeline simulation runs: DualPipe's order is 1F1B's with paired chunks overlapped
    (the overlap is in the chunk costs, see _compute_passes)."""
    return "1f1b" if job.schedule == "dualpipe" else job.schedule
