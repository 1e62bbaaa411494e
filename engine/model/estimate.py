"""What one training step costs: time, throughput, FLOP/s, memory, and the plan the engine run replays.

For each job: resolve the "auto" settings by searching the feasible space (every micro_batch dividing the
sequences per replica, every virtual_stages count the schedule allows, every recompute mode) for the fastest
step that fits in memory; each configuration is one step of engine/model/step.py. Inference jobs are served
(engine/model/inference.py).

A sweep estimates thousands of jobs: `estimate(s, plan=False, hints=False)` skips the StepPlan and the fit
hint (the figures are the same), and what depends only on a job's placement or layout (routes, tiers, what
each stage holds) is cached for the next job that shares it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..config import facility
from ..config.cluster import Cluster
from ..config.errors import UserError, quote
from ..config.geometry import DIMS, Geometry
from ..config.job import Job
from ..config.scenario import Scenario
from ..config.units import GB
from . import chunks, contention, pipeline, scaleup, step, uncertainty
from . import collectives as col
from . import compute as cm
from . import economics as econ
from . import memory as mem
from .layout import Layout
from .pipeline import check
from .plan import StepPlan
from .step import Config, Eval, JobModel, sim_schedule
from .uncertainty import Band

RECOMPUTE_MODES = ("none", "selective", "full")


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
    serving: dict[str, Any] = field(default_factory=dict)     # inference: the other serving figures
    stack: dict[str, Any] = field(default_factory=dict)       # the software stack (software_stack)
    economics: dict[str, Any] = field(default_factory=lambda: dict(econ.NO_FIGURES))   # economics.figures
    busy_s: dict[str, float] = field(default_factory=dict)    # seconds per step each dimension
                                                              # is on the links
    contention: dict[str, Any] = field(default_factory=dict)  # several jobs: alone vs with neighbours
    band: Band | None = None             # how far to trust it (engine/model/uncertainty.py)
    output_layer_s: float | None = None  # training: the last stage's output layer per step (in compute)

    def step_time_range_s(self) -> tuple[float, float] | None:
        """The step time's band: where the true step of a run like the published ones falls (training)."""
        if self.band is None or self.step_time_s is None or self.kind == "inference":
            return None
        return self.band.step(self.step_time_s)

    def tokens_per_s_range(self) -> tuple[float, float] | None:
        """The throughput's band: a prediction too high by u means a true rate of tokens_per_s / (1 + u)."""
        if self.band is None or not self.tokens_per_s:
            return None
        return self.band.rate(self.tokens_per_s)


@dataclass
class ScenarioEstimate:
    scenario: str
    cluster: dict[str, Any]
    jobs: list[JobEstimate] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- search


MAX_MICRO_BATCH = 64        # the largest micro_batch "auto" tries
MAX_AUTO_VIRTUAL_STAGES = 64    # the most chunks per stage "auto" tries (Megatron-LM runs use a handful)


def candidates(job: Job) -> list[Config]:
    """Every configuration the "auto" settings may take (fixed settings stay as given)."""
    per_replica = job.global_batch // job.dp
    mbs = [int(job.micro_batch)] if job.micro_batch != "auto" else \
        [d for d in range(1, min(per_replica, MAX_MICRO_BATCH) + 1) if per_replica % d == 0]
    if job.virtual_stages != "auto":
        vs = [int(job.virtual_stages)]
    elif job.pp == 1 or job.schedule == "gpipe":
        vs = [1]
    else:
        vs = list(range(1, min(job.model.layers // job.pp, MAX_AUTO_VIRTUAL_STAGES) + 1))
    rcs = [job.recompute] if job.recompute != "auto" else list(RECOMPUTE_MODES)
    out = []
    for mb, v, rc in itertools.product(mbs, vs, rcs):
        if check(sim_schedule(job), job.pp, v, per_replica // mb) is None:
            out.append(Config(int(mb), v, rc))
    return out


def schedule_ops(job: Job, cfg: Config) -> int:
    """Operations of the largest pipeline schedule estimating `cfg` simulates."""
    m = job.global_batch // job.dp // cfg.micro_batch
    return pipeline.operations(job.pp, cfg.virtual_stages,
                               max(step.simulated_sizes(job.pp, cfg.virtual_stages, m)))


def _simulable(job: Job, configs: list[Config]) -> list[Config]:
    """The configurations whose schedule is small enough to simulate (pipeline.MAX_SCHEDULE_OPS)."""
    return [c for c in configs if schedule_ops(job, c) <= pipeline.MAX_SCHEDULE_OPS]


def _too_big(scenario: Scenario, job: Job, configs: list[Config]) -> UserError:
    """The error for a job none of whose configurations can be simulated, with the smallest one's size."""
    smallest = min(configs, key=lambda c: schedule_ops(job, c))
    ops = schedule_ops(job, smallest)
    m = job.global_batch // job.dp // smallest.micro_batch
    i = next((k for k, other in enumerate(scenario.jobs) if other.name == job.name), 0)
    return UserError(f"jobs[{i}].pp: the pipeline of job {quote(job.name)} (pp = {job.pp:,}, "
                     f"virtual_stages = {smallest.virtual_stages:,}, {m:,} microbatches per replica) needs "
                     f"{ops:,} operations simulated, {_size(ops * pipeline.SCHEDULE_BYTES_PER_OP)} of "
                     f"schedule arrays; expected at most {pipeline.MAX_SCHEDULE_OPS:,} "
                     f"({_size(pipeline.MAX_SCHEDULE_OPS * pipeline.SCHEDULE_BYTES_PER_OP)})"
                     ": lower pp or virtual_stages", scenario.path or None)


def _size(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.2f} {unit}"
    return f"{nbytes / 1024:,.0f} KiB"


def _search(model: JobModel, configs: list[Config], plan: bool = True) -> tuple[Eval, bool]:
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
    best: Eval | None = None
    for e in sorted(fitting, key=lambda e: _guess(model, e.config)):
        if best is not None and _lower_bound(model, e.config) >= best.step_s:
            continue
        model.run(e, plan=False)
        if best is None or e.step_s < best.step_s - 1e-12:
            best = e
    assert best is not None
    if plan:
        model.run(best, plan=True)     # the same schedule (its evaluation cached), now with its plan
    return best, True


def _work(model: JobModel, cfg: Config) -> float:
    """Busiest stage's compute time per step (no waiting): a lower bound of the step."""
    m = model.per_replica // cfg.micro_batch
    grid = model.grid(cfg.virtual_stages)
    worst = 0.0
    for stage in grid.stages:          # each distinct stage once
        t = 0.0
        for i in stage:
            f, b = model._chunk_passes(grid.chunks[i], cfg.micro_batch, cfg.recompute)
            t += sum(d for _, d in f) + sum(d for _, d in b)
        worst = max(worst, t)
    return worst * m


def _lower_bound(model: JobModel, cfg: Config) -> float:
    return _work(model, cfg)


def _guess(model: JobModel, cfg: Config) -> float:
    m = model.per_replica // cfg.micro_batch
    p = model.job.pp
    return _work(model, cfg) * (1 + (p - 1) / (cfg.virtual_stages * m))


# ------------------------------------------------------------------------------------------------- API

def estimate_job(scenario: Scenario, job: Job, plan: bool = True, hints: bool = True,
                 background: col.Background = ()) -> JobEstimate:
    """The cost of one training step of `job` on the scenario's cluster.

    plan=False leaves out the StepPlan (`plan` is None) and hints=False the hint of settings that would fit
    (`note` stays empty): a sweep needs neither, and every other figure is the same.
    """
    if job.is_inference:
        return _estimate_inference(scenario, job, plan)
    everything = candidates(job)
    configs = _simulable(job, everything)
    if everything and not configs:
        raise _too_big(scenario, job, everything)
    if not configs:
        per_replica = job.global_batch // job.dp
        raise UserError(f"job {job.name!r}: no micro_batch / virtual_stages combination can run the "
                        f"{job.schedule} schedule with pp = {job.pp} and {per_replica} "
                        f"sequence{'s' if per_replica != 1 else ''} per replica")
    cluster = scenario.cluster
    model = JobModel(cluster, job, background, busy=len(scenario.jobs) > 1)
    best, fits = _search(model, configs, plan)
    cfg = best.config
    settled = (job.micro_batch, job.virtual_stages, job.recompute) == (cfg.micro_batch, cfg.virtual_stages,
                                                                         cfg.recompute)
    resolved = job if settled else dataclasses.replace(job, micro_batch=cfg.micro_batch,
                                                       virtual_stages=cfg.virtual_stages,
                                                       recompute=cfg.recompute)
    chosen = {k: getattr(cfg, k) for k in ("micro_batch", "virtual_stages", "recompute")
              if getattr(job, k) == "auto"}
    tiers = _tiers(cluster, job, model.net)
    mem_gb = best.memory.parts_gb()
    total_gb = round(best.memory.total / GB, 2)
    cap = round(mem.capacity_bytes(cluster.gpu) / GB, 2)
    common: dict[str, Any] = {"name": job.name, "gpus": job.gpus, "memory_gb": mem_gb,
                               "memory_gb_per_gpu": total_gb, "capacity_gb": cap, "chosen": chosen,
                               "tiers": tiers, "job": resolved, "microbatches": best.microbatches,
                               "stack": software_stack(job, cluster.gpu)}
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
                       model_tflops_per_gpu=model_tf,
                       hardware_tflops_per_gpu=hw_flops / step / job.gpus / 1e12,
                       mfu=model_tf / cluster.gpu.peak_tflops(job.precision), breakdown_s=breakdown,
                       plan=best.plan, busy_s=best.busy, band=_band(cluster, job),
                       output_layer_s=_output_layer(model, cfg, best.microbatches),
                       economics=_economics(scenario, job, breakdown, step, tokens / step), **common)


def _output_layer(model: JobModel, cfg: Config, microbatches: int) -> float:
    """Seconds per step the last pipeline stage spends in the output layer (final norm, logits GEMM, the
    loss over the vocabulary), forward and backward of every microbatch: part of its compute."""
    cost = model.block("output", cfg.micro_batch, cfg.recompute)
    return microbatches * (cost.fwd.compute_s + cost.bwd.compute_s)


def _band(cluster: Cluster, job: Job) -> Band | None:
    return uncertainty.band(job.kind, cluster.gpu.name, cm.total_params(job.model)[0], job.zero)


def _economics(scenario: Scenario, job: Job, breakdown: dict[str, float], step: float,
               tokens_per_s: float) -> dict[str, Any]:
    """The job's energy and cost figures (engine/model/economics.py)."""
    facility_w = econ.facility_w(scenario.cluster, breakdown, step, job.gpus)
    return econ.figures(scenario.economics, facility_w, job.gpus, step, tokens_per_s)


def _estimate_inference(scenario: Scenario, job: Job, plan: bool) -> JobEstimate:
    """An inference job: one replica serving its share of the requests (engine/model/inference.py)."""
    from .inference import serve

    cluster = scenario.cluster
    r = serve(scenario, job)
    m = r.memory
    memory_gb = m.breakdown_gb()
    common: dict[str, Any] = {
        "name": job.name, "gpus": job.gpus, "memory_gb": memory_gb,
        "memory_gb_per_gpu": round(sum(memory_gb.values()), 2), "capacity_gb": round(m.capacity / 1e9, 2),
        "chosen": {}, "tiers": _tiers(cluster, job), "job": job, "stack": software_stack(job, cluster.gpu),
        "kind": "inference"}
    step = r.plan.step_time_s if r.plan is not None else 1.0
    breakdown = {k: round(step * v, 6) for k, v in r.breakdown.items() if v > 0}
    # a latency no request had (one-token answers have no TPOT) is null, not NaN: JSON has no NaN
    serving = {"requests_per_s": round(r.requests_per_s, 3), "ttft_mean_s": _round(r.ttft.mean, 6),
               "tpot_mean_s": _round(r.tpot.mean, 6), "ttft_p99_s": _round(r.ttft.p99, 6),
               "tpot_p99_s": _round(r.tpot.p99, 6), "itl_mean_s": _round(r.itl_mean_s, 6),
               "batch_limit": r.batch_limit, "mean_batch": round(r.mean_batch, 2), "busy": round(r.busy, 4),
               "saturated": r.saturated, "preemptions": r.preemptions, "rejected": r.rejected,
               "kv_cache_dtype": m.kv_dtype, "kv_cache_tokens": m.kv_tokens}
    return JobEstimate(fits=True, step_time_s=step, tokens_per_s=r.tokens_per_s,
                       model_tflops_per_gpu=r.model_tflops_per_gpu,
                       hardware_tflops_per_gpu=r.model_tflops_per_gpu,
                       mfu=r.model_tflops_per_gpu / cluster.gpu.peak_tflops(job.precision),
                       breakdown_s=breakdown,
                       plan=r.plan if plan else None, ttft_s=r.ttft.median, tpot_s=r.tpot.median,
                       serving=serving, band=_band(cluster, job),
                       economics=_economics(scenario, job, breakdown, step, r.tokens_per_s) if r.tokens_per_s
                       else dict(econ.NO_FIGURES), **common)


_TIERS: dict[tuple[Cluster, col.Placement], dict[str, str | None]] = {}


def _tiers(cluster: Cluster, job: Job, net: step.Net | None = None) -> dict[str, str | None]:
    """The tier each parallel dimension crosses: its routes' when the estimate has them (each route's groups
    are the dimension's, but DP's with CP > 1, which cross together), else the layout's. It depends on the
    job's placement only (kept for the next job with the same placement, as a sweep has many)."""
    if net is not None and job.cp == 1:
        return {"tp": net.tp.tier, "cp": net.cp.tier, "pp": net.pp_tier, "dp": net.dp.tier, "ep": net.ep.tier}
    key = (cluster, col.placement(job))
    tiers = _TIERS.get(key)
    if tiers is None:                        # (no lookup after the store: safe with threads, as Dask runs)
        if len(_TIERS) >= 256:
            _TIERS.clear()
        layout = Layout(job, Geometry.of(cluster)).tiers()
        tiers = _TIERS[key] = {d: layout[d] for d in DIMS}
    return dict(tiers)


def _fit_hint(model: JobModel, job: Job) -> str:
    """When fixed settings do not fit: the settings that would, with every auto setting searched."""
    autos: dict[str, Any] = {k: "auto" for k in ("micro_batch", "virtual_stages", "recompute")}
    configs = _simulable(job, candidates(dataclasses.replace(job, **autos)))
    best, fits = _search(model, configs, plan=False) if configs else (None, False)
    if not fits or best is None:
        return "no micro_batch, virtual_stages or recompute setting fits: add GPUs to tp, pp or zero sharding"
    changed = [f"{k} = {getattr(best.config, k)!r}" for k in autos
               if getattr(best.config, k) != getattr(job, k)]
    return "fits with " + ", ".join(changed) + " (or set them to \"auto\")"


@lru_cache(maxsize=256)
def straggler_factor(sigma: float, slow_fraction: float, slow_factor: float, n: int) -> float:
    """E[max over n GPUs of 1 / speed]: how much longer a synchronous step takes than a nominal GPU's.

    Each GPU's speed is lognormal around 1 (sigma) and, for a fraction of GPUs, times slow_factor, as the
    engine run draws them (engine/sim/run.py). 1/speed = exp(-sigma Z) / s has the CDF
    F(x) = (1 - f) Phi(ln x / sigma) + f Phi((ln x + ln s) / sigma); the slowest of n has CDF F^n, and
    E[max] = x0 + integral from x0 of (1 - F(x)^n) dx (order statistics; for the lognormal part alone this
    grows like exp(sigma sqrt(2 ln n))).
    """
    if n <= 1 or (sigma <= 0 and slow_fraction <= 0):
        return 1.0
    ln_s = np.log(slow_factor) if slow_fraction > 0 else 0.0
    if sigma <= 0:
        p_any = 1.0 - (1.0 - slow_fraction) ** n
        return 1.0 + p_any * (1.0 / slow_factor - 1.0)
    from math import erf, sqrt

    y = np.linspace(-8 * sigma, 8 * sigma - ln_s, 4001)          # ln x
    root2 = sqrt(2)

    def phi(z: np.ndarray) -> np.ndarray:      # the normal CDF: numpy has no erf, so an erf a point (mapped)
        return 0.5 * (1 + np.array(list(map(erf, (z / root2).tolist()))))

    fast = phi(y / sigma)
    slow = fast if ln_s == 0 else phi((y + ln_s) / sigma)      # no slow GPUs: the same points (y + 0.0 is y)
    cdf = (1 - slow_fraction) * fast + slow_fraction * slow
    x = np.exp(y)
    tail = 1.0 - np.clip(cdf, 0.0, 1.0) ** n
    return float(x[0] + np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(x)))


def recompute_flops_per_token(job: Job, recompute: str) -> float:
    """FLOPs recomputation adds per token: one more forward of the layers under full recomputation."""
    if recompute != "full":
        return 0.0
    model = job.model
    heads = 1 + model.mtp_layers        # the output head, and each MTP module's: not recomputed
    return (cm.model_flops_per_token(model, job.seq_len) - 6.0 * heads * model.hidden * model.vocab) / 3.0


_SUMMARIES: dict[Cluster, dict[str, Any]] = {}


def cluster_summary(cluster: Cluster) -> dict[str, Any]:
    """The cluster's size, its scale-up domain, its optics and its power at full load (kept for the next
    estimate on the same cluster, as a sweep's points mostly are; each caller gets its own copy)."""
    summary = _SUMMARIES.get(cluster)
    if summary is None:                      # (no lookup after the store: safe with threads, as Dask runs)
        if len(_SUMMARIES) >= 64:
            _SUMMARIES.clear()
        summary = _SUMMARIES[cluster] = _summary(cluster)
    copy: dict[str, Any] = _copied(summary)
    return copy


def _copied(value: Any) -> Any:
    """A JSON-like value's own copy (its dicts and lists new, all the way down)."""
    if isinstance(value, dict):
        return {k: _copied(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _summary(cluster: Cluster) -> dict[str, Any]:
    topo = Geometry.of(cluster)
    optics = cluster.transceivers
    it_mw = (cluster.gpus * facility.it_w_per_gpu(cluster.gpu) + optics.watts) / 1e6
    return {"gpus": cluster.gpus, "nodes": topo.nodes, "pods": topo.pods, "buildings": topo.buildings,
            "it_power_mw": round(it_mw, 6), "facility_power_mw": round(it_mw * cluster.pue, 6),
            "scale_up": scaleup.describe(cluster), "transceivers": optics.count,
            "transceivers_by_tier": optics.by_tier(), "optics": cluster.optics,
            "optics_mw": round(optics.watts / 1e6, 6)}


def estimate(scenario: Scenario, plan: bool = True, hints: bool = True) -> ScenarioEstimate:
    """Every job of the scenario, in scenario order (plan, hints: as for estimate_job), each with the traffic
    of the jobs that share its tiers (engine/model/contention.py)."""
    # the jobs first: a job that cannot run raises before the cluster's summary is made
    alone = [estimate_job(scenario, job, plan, hints) for job in scenario.jobs]
    out = ScenarioEstimate(scenario=scenario.name, cluster=cluster_summary(scenario.cluster))
    out.jobs = contention.solve(scenario, alone, _again(scenario, hints))
    return out


def sharing(scenario: Scenario) -> contention.Sharing:
    """The scenario's jobs with their plans, solved again with their neighbours
    for any set of running jobs."""
    return contention.Sharing(scenario, [estimate_job(scenario, job, True, False) for job in scenario.jobs],
                              _again(scenario, False))


def _again(scenario: Scenario, hints: bool) -> Any:
    """estimate_job again with other jobs' traffic: (job, background, plan) -> JobEstimate."""
    return lambda job, background, full: estimate_job(scenario, job, full, full and hints, background)


def software_stack(job: Job, gpu: Any) -> dict[str, Any]:
    """The job's software stack as the model runs it (the attention kernel resolved for the GPU)."""
    kernel = job.attention_kernel if job.attention_kernel in cm.SCORES_IN_MEMORY else \
        gpu.attention_kernel(job.attention_kernel)
    stack = {"attention_kernel": kernel, "fused_kernels": job.fused_kernels,
             "cross_entropy_fusion": job.cross_entropy_fusion and job.fused_kernels,
             "overlap_grad_reduce": job.overlap_grad_reduce, "overlap_param_gather": job.overlap_param_gather,
             "tp_comm_overlap": job.tp_comm_overlap, "overlap_p2p_comm": job.overlap_p2p_comm,
             "grad_reduce_dtype": job.grad_reduce_dtype, "dropout": job.dropout}
    if job.model.is_moe and not job.is_inference:       # how its MoE layers run (performance-model.md 5c)
        stack.update(ep_dispatch=job.ep_dispatch, expert_gemm=job.expert_gemm)
    if job.model.mtp_layers and not job.is_inference:
        stack["mtp_layers"] = job.model.mtp_layers
    return stack


def _round(x: float | None, digits: int = 4) -> float | None:
    """Rounded for --json; None (null) when absent or not finite."""
    return None if x is None or not math.isfinite(x) else round(x, digits)


def _range(band: tuple[float, float] | None, digits: int = 4) -> list[float] | None:
    return None if band is None else [round(band[0], digits), round(band[1], digits)]


def to_json(est: ScenarioEstimate) -> dict[str, Any]:
    """The --json form: {"scenario", "cluster", "jobs": [...]}."""
    jobs = []
    for j in est.jobs:
        jobs.append({
            "name": j.name, "gpus": j.gpus, "step_time_s": _round(j.step_time_s),
            "tokens_per_s": _round(j.tokens_per_s, 1),
            "model_tflops_per_gpu": _round(j.model_tflops_per_gpu, 2),
            "mfu": _round(j.mfu, 6), "hardware_tflops_per_gpu": _round(j.hardware_tflops_per_gpu, 2),
            "memory_gb_per_gpu": j.memory_gb_per_gpu, "fits": j.fits, "breakdown_s": j.breakdown_s,
            "memory_gb": j.memory_gb, "chosen": j.chosen,
            "layout": {d: getattr(j.job, d) for d in DIMS}, "tiers": j.tiers,
            "capacity_gb": j.capacity_gb, "microbatches": j.microbatches, "kind": j.kind,
            "stack": j.stack, **j.economics,
            "uncertainty": None if j.band is None else round(j.band.uncertainty, 4),
            "step_time_range_s": _range(j.step_time_range_s()),
            "tokens_per_s_range": _range(j.tokens_per_s_range(), 1),
            "output_layer_s": _round(j.output_layer_s),
        })
        if j.kind == "inference":
            jobs[-1].update({"ttft_s": _round(j.ttft_s, 6), "tpot_s": _round(j.tpot_s, 6), **j.serving})
        if j.contention:
            jobs[-1].update(j.contention)
    return {"scenario": est.scenario, "cluster": est.cluster, "jobs": jobs}


def clear_caches() -> None:
    """Forget every cached cost, route, chunk and pipeline (benchmarks time a cold start)."""
    for cached in (cm.layer_cost, cm.embedding_cost, cm.output_cost, cm.mtp_cost, cm.total_params,
                   cm.model_flops_per_token, col._route, col.ecmp_max_load, step._net, chunks.grid,
                   chunks.stage_columns, step._evaluate_cached, step.held_activations, pipeline._program,
                   pipeline._waves, pipeline.order):
        cached.cache_clear()
    _TIERS.clear()
    _SUMMARIES.clear()
