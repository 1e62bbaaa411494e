"""A synthetic but realistic planner for the stream's tests: fast, and independent of the performance model,
so a change to the model does not move what these tests expect.

It builds a StepPlan the way the real cost model does: a list schedule of 1F1B over `pp` stages with
`v * m` chunk-microbatches (interleaving approximated by v chunks per microbatch, so the bubble is about
(p-1)/(v m + p - 1) of the pipelined span), fixed compute times derived from the model's FLOPs at a fixed
fraction of peak, a TP wait inside every compute op, PP point-to-point waits between stages, an exposed DP
reduction and an optimizer step at the end. For the flagship (llama3-405b-16k) the step is about 6.3 s with
about 14% bubble and an MFU near 41%. A job whose weights and optimizer state exceed 90% of HBM gets None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertop.engine.config.geometry import Geometry
from clustertop.engine.config.phases import CODE
from clustertop.engine.config.scenario import Job, Scenario
from clustertop.engine.model.layout import Layout
from clustertop.engine.model.plan import Interval, StepPlan

EFFICIENCY = 0.55        # achieved fraction of dense peak inside compute ops
TP_SHARE = 0.08          # share of every op spent waiting on TP collectives (when tp > 1)
CP_SHARE = 0.05          # share spent waiting on the CP K/V exchange (when cp > 1)
P2P_S = 0.002            # one pipeline point-to-point transfer
DP_EXPOSED_S = 0.12      # exposed part of the gradient reduction (when dp > 1)
OPTIMIZER_S = 0.08
BUBBLE_TARGET = 0.15


def params(job: Job) -> float:
    m = job.model
    kv = m.hidden * m.kv_heads / m.heads
    per_layer = 2 * m.hidden * m.hidden + 2 * m.hidden * kv + 3 * m.hidden * m.ffn
    return m.layers * per_layer + 2 * m.vocab * m.hidden


def model_flops(job: Job) -> float:
    m = job.model
    tokens = job.tokens_per_step
    return 6 * params(job) * tokens + 6 * m.layers * job.seq_len * m.hidden * tokens


def fits(scenario: Scenario, job: Job) -> bool:
    n = params(job) / (job.tp * job.pp)
    optimizer = 12 * n / (job.dp if job.zero >= 1 else 1)
    return (4 * n + optimizer) / 1e9 < 0.9 * scenario.cluster.gpu.hbm_gb


def chunks(job: Job, m: int) -> int:
    """Virtual chunks per microbatch: the job's, or the fewest that bring the bubble to about 15%."""
    if isinstance(job.virtual_stages, int) and job.virtual_stages > 1:
        return job.virtual_stages
    p = job.pp
    if p == 1:
        return 1
    v = math.ceil((p - 1) * (1 - BUBBLE_TARGET) / (BUBBLE_TARGET * m))
    return max(1, min(v, job.model.layers // p))


def schedule(p: int, n: int, f: float, b: float, c: float) -> list[list[tuple[str, float, float, float]]]:
    """1F1B list schedule: per stage, its ops in order as (kind, start, end, ready)
    with ready = input arrival."""
    order: list[list[tuple[str, int]]] = []
    for s in range(p):
        warm = min(p - s - 1, n)
        ops = [("F", i) for i in range(warm)]
        for i in range(n - warm):
            ops += [("F", warm + i), ("B", i)]
        ops += [("B", i) for i in range(n - warm, n)]
        order.append(ops)
    done: dict[tuple[str, int, int], float] = {}
    out: list[list[tuple[str, float, float, float]]] = [[] for _ in range(p)]
    pos = [0] * p
    free = [0.0] * p
    remaining = p * 2 * n
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(order[s]):
                kind, i = order[s][pos[s]]
                if kind == "F":
                    dep = ("F", s - 1, i) if s > 0 else None
                else:
                    dep = ("B", s + 1, i) if s < p - 1 else ("F", s, i)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (c if dep[1] != s else 0.0)
                start = max(free[s], ready)
                end = start + (f if kind == "F" else b)
                done[(kind, s, i)] = end
                out[s].append((kind, start, end, ready))
                free[s] = end
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("1F1B schedule deadlocked")
    return out


def fake_planner(scenario: Scenario, job: Job) -> StepPlan | None:
    """A StepPlan for the job, or None when it does not fit in GPU memory."""
    if not fits(scenario, job):
        return None
    mb = job.micro_batch if isinstance(job.micro_batch, int) else 1
    m = max(1, job.global_batch // (job.dp * mb))
    v = chunks(job, m)
    n = v * m
    peak = scenario.cluster.gpu.peak_tflops(job.precision) * 1e12
    flops = model_flops(job)
    compute = flops / job.gpus / (peak * EFFICIENCY)      # per GPU per step, compute phases only
    waits = (TP_SHARE if job.tp > 1 else 0.0) + (CP_SHARE if job.cp > 1 else 0.0)
    op = compute / (1 - waits) / n                        # one forward + backward chunk, waits included
    f, b = op / 3, 2 * op / 3
    c = P2P_S if job.pp > 1 else 0.0
    ops = schedule(job.pp, n, f, b, c)
    dp_s = DP_EXPOSED_S if job.dp > 1 else 0.0
    end = max(stage[-1][2] for stage in ops)
    step = end + dp_s + OPTIMIZER_S
    stages: list[tuple[Interval, ...]] = []
    for stage in ops:
        iv: list[Interval] = []
        now = 0.0
        for kind, start, stop, ready in stage:
            if start > now + 1e-12:
                pp_wait = min(start - now, c) if now > 0 else 0.0
                if start - pp_wait > now + 1e-12:
                    iv.append(Interval(now, start - pp_wait, CODE["bubble"]))
                if pp_wait > 0:
                    iv.append(Interval(start - pp_wait, start, CODE["pp"]))
            dur = stop - start
            cut = start + dur * (1 - waits)
            iv.append(Interval(start, cut, CODE["compute"]))
            if job.tp > 1:
                mid = cut + dur * TP_SHARE
                iv.append(Interval(cut, mid, CODE["tp"]))
                cut = mid
            if job.cp > 1:
                iv.append(Interval(cut, stop, CODE["cp"]))
            now = stop
        if dp_s:
            iv.append(Interval(now, now + dp_s, CODE["dp"]))
            now += dp_s
        iv.append(Interval(now, now + OPTIMIZER_S, CODE["optimizer"]))
        now += OPTIMIZER_S
        if step > now + 1e-12:
            iv.append(Interval(now, step, CODE["bubble"]))
        stages.append(tuple(_merge(iv, step)))
    tiers = Layout(job, Geometry.of(scenario.cluster)).tiers()
    load: dict[str, float] = {}
    for dim, share in (("tp", 0.35), ("cp", 0.3), ("pp", 0.05), ("ep", 0.4)):
        tier = tiers.get(dim)
        if tier:
            load[tier] = min(1.0, load.get(tier, 0.0) + share)
    if tiers.get("dp"):
        tier = tiers["dp"]
        window = (step * 0.6, end + dp_s)           # gradient buckets from mid-backward to the exposed tail
        load[tier] = min(1.0, load.get(tier, 0.0) + 0.8 * (window[1] - window[0]) / step)
    return StepPlan(step_time_s=step, stages=tuple(stages), tier_load=load,
                    tokens=job.tokens_per_step, model_flops=flops)


def _merge(intervals: list[Interval], step: float) -> list[Interval]:
    """Join neighbours of the same phase and make the timeline cover [0, step] exactly."""
    out: list[Interval] = []
    for iv in intervals:
        if iv.end_s <= iv.start_s:
            continue
        if out and out[-1].phase == iv.phase:
            out[-1] = Interval(out[-1].start_s, iv.end_s, iv.phase)
        else:
            out.append(iv)
    out[-1] = Interval(out[-1].start_s, step, out[-1].phase)
    return out


# Small scenarios for the stream's tests: fast to simulate, with every feature of the flagship (pipeline, DP
# replicas, several pods) plus a job that does not fit and idle GPUs.
_CLUSTER = """
[cluster]
gpu = "h100-sxm-80gb"
gpus = {gpus}
gpus_per_node = 8
gpus_per_rack = 16
racks_per_pod = 2

[[jobs]]
name = "train"
model = "llama3.1-8b"
seq_len = 4096
global_batch = 64
tp = 2
pp = 4
dp = 8
"""

SMALL = """\
name = "small"
description = "64 GPUs in 2 pods: Llama 3.1 8B, TP 2, PP 4, DP 8"
seed = 7
duration = "30s"
""" + _CLUSTER.format(gpus=64)

MIXED = """\
name = "mixed"
description = "96 GPUs: a 64-GPU job, an 8-GPU job that does not fit, 24 idle GPUs"
seed = 3
duration = "20s"
""" + _CLUSTER.format(gpus=96) + """
[[jobs]]
name = "too-big"
model = "llama3.1-70b"
seq_len = 4096
global_batch = 16
tp = 8
pp = 1
dp = 1
zero = 0
"""


def checkpoint_for(seconds: float):  # type: ignore[no-untyped-def]
    """A checkpoint-like perturbation (engine/sim/run.py Run.interrupt): the job's GPUs write for `seconds`,
    then training resumes from that step."""
    from clustertop.engine.sim.activity import Constant

    def checkpoint(run, track):  # type: ignore[no-untyped-def]
        run.emit("checkpoint_start", job=track.job.name, step=track.step)
        run.switch(track, Constant("checkpoint", track.job.pp))
        yield run.env.timeout(seconds)
        run.emit("checkpoint_end", job=track.job.name)
        run.resume(track)

    return checkpoint


def write_scenario(directory: object, text: str = SMALL, name: str = "small.toml") -> str:
    """Write a scenario file into a directory (a pytest tmp_path) and return its path."""
    from pathlib import Path

    path = Path(str(directory)) / name
    path.write_text(text)
    return str(path)


# No faults, checkpoints or stragglers: steps then follow the plan exactly (those have their own tests:
# test_run_faults*.py); append to a scenario's text.
QUIET = """
[faults]
enabled = false
rate_scale = 0.0
planned_per_day = 0.0

[variability]
straggler_sigma = 0.0
slow_gpu_fraction = 0.0
diurnal_amplitude = 0.0
"""


@dataclass(frozen=True)
class Texts:
    """The scenario texts by name (the `texts` fixture): written as they are, joined (`texts.small +
    texts.quiet`) or edited first."""

    small: str = SMALL
    mixed: str = MIXED
    quiet: str = QUIET
