"""A stand-in for engine.model.estimate while the performance model is written:
roofline-ish arithmetic, same JSON shape.

`estimate(scenario)` and `to_json(result)` mirror the real API; `estimate_json` chains them (the sweep's
estimator signature). Step time: 6N FLOPs per token at a shape-dependent fraction of peak, a pipeline bubble
of (pp-1)/(v m), TP and DP traffic on the node and scale-out links. Memory: weights, gradients and Adam state
sharded by ZeRO, plus activations of the microbatches in flight. A job whose footprint exceeds the GPU's HBM
does not fit ("fits": false, "step_time_s": null). Deterministic pure-Python arithmetic.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from clustertop.engine.config.scenario import Job, Scenario


@dataclass(frozen=True)
class FakeEstimate:
    scenario: Scenario
    jobs: tuple[dict[str, Any], ...]


def _params(job: Job) -> float:
    m = job.model
    attention = 2 * m.hidden * m.hidden + 2 * m.hidden * m.kv_heads * m.dim_head
    mlp = (3 if m.ffn_activation == "swiglu" else 2) * m.hidden * m.ffn
    return m.layers * (attention + mlp) + m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def _job(s: Scenario, job: Job) -> dict[str, Any]:
    gpu, cluster, m = s.cluster.gpu, s.cluster, job.model
    params = _params(job)
    micro = 1 if job.micro_batch == "auto" else job.micro_batch
    v = 1 if job.virtual_stages == "auto" else job.virtual_stages
    recompute = "selective" if job.recompute == "auto" else job.recompute
    microbatches = job.global_batch // (job.dp * micro)
    shard = params / (job.tp * job.pp)
    weights = shard * 2 / (job.dp if job.zero >= 3 else 1)
    grads = shard * 2 / (job.dp if job.zero >= 2 else 1)
    optimizer = shard * 12 / (job.dp if job.zero >= 1 else 1)
    s_len, h = job.seq_len // job.cp, m.hidden
    per_layer = {"none": s_len * micro * h * (34 + 5 * m.heads * s_len / h) / job.tp,
                 "selective": s_len * micro * h * 34 / job.tp,
                 "full": 2 * s_len * micro * h}[recompute]
    activations = per_layer * m.layers / job.pp * min(job.pp, microbatches)
    memory = {"weights": weights / 1e9, "gradients": grads / 1e9, "optimizer": optimizer / 1e9,
              "activations": activations / 1e9}
    total_gb = sum(memory.values())
    fits = total_gb <= gpu.hbm_gb
    peak = gpu.peak_tflops(job.precision) * 1e12
    efficiency = 0.75 / (1 + 0.08 * math.log2(job.tp)) / (1 + 0.02 * math.log2(job.cp))
    model_flops = 6 * params * job.tokens_per_step
    hardware_flops = model_flops * (8 / 6 if recompute == "full" else 1.0)
    compute = hardware_flops / (job.gpus * peak * efficiency)
    bubble = compute * (job.pp - 1) / (v * microbatches)
    node_link = cluster.node_link if job.tp <= cluster.gpus_per_node else cluster.scale_out
    tp = compute * 0.04 * (job.tp - 1) * 370.0 / node_link.busbw_gb_s
    dp = 0.2 * 2 * (job.dp - 1) / job.dp * shard * 2 / (cluster.scale_out.busbw_gb_s * 1e9)
    dp *= cluster.pod_oversubscription ** 0.5
    step = compute + bubble + tp + dp
    tflops = model_flops / step / job.gpus / 1e12
    return {"name": job.name, "gpus": job.gpus,
            "step_time_s": step if fits else None,
            "tokens_per_s": job.tokens_per_step / step if fits else None,
            "model_tflops_per_gpu": tflops if fits else None,
            "mfu": tflops * 1e12 / peak if fits else None,
            "hardware_tflops_per_gpu": hardware_flops / step / job.gpus / 1e12 if fits else None,
            "memory_gb_per_gpu": total_gb, "fits": fits,
            "breakdown_s": {"compute": compute, "tp": tp, "bubble": bubble, "dp": dp},
            "memory_gb": memory,
            "chosen": {"micro_batch": micro, "virtual_stages": v, "recompute": recompute}}


def estimate(s: Scenario, plan: bool = True, hints: bool = True) -> FakeEstimate:
    return FakeEstimate(s, tuple(_job(s, job) for job in s.jobs))


def to_json(result: FakeEstimate) -> dict[str, Any]:
    c = result.scenario.cluster
    return {"scenario": result.scenario.name,
            "cluster": {"gpu": c.gpu.name, "gpus": c.gpus, "scale_out": c.scale_out.name,
                        "pod_oversubscription": c.pod_oversubscription},
            "jobs": [dict(job) for job in result.jobs]}


def estimate_json(s: Scenario) -> dict[str, Any]:
    """The sweep's estimator signature: scenario -> the `estimate --json` object."""
    return to_json(estimate(s))


def pid_estimator(s: Scenario) -> dict[str, Any]:
    """estimate_json plus the id of the process that ran it: proves a pool really spreads the points.

    Each point takes 50 ms, so that no worker can finish every task before the other has started.
    """
    time.sleep(0.05)
    return {**estimate_json(s), "pid": os.getpid()}


def dies_at_tp_4(s: Scenario) -> dict[str, Any]:
    """estimate_json, except that the process estimating a point with tp = 4 is killed (as by the OOM
    killer)."""
    if s.jobs[0].tp == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return estimate_json(s)
