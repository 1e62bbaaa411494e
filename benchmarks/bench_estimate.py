"""Speed of `clustertop estimate` on the 16K-GPU flagship: fixed settings, and every setting "auto".

Keys:
- estimate_flagship_s: one estimate of llama3-405b-16k with its plan (what `clustertop estimate` and the
  engine run need), caches cleared before each run. The plan's per-stage Interval tuples are made when first
  read (StepPlan.stages is a Timelines): the engine run makes them as it compiles the plan, an estimate that
  only prints figures never does.
- estimate_flagship_auto_s: the same with micro_batch, virtual_stages and recompute all "auto" (the search).
- estimate_flagship_fast_s: the flagship without the plan and the fit hint (what a sweep asks for).
- estimate_megatron_1t_fast_s: the same fast estimate (no plan, no hint) of Megatron's 1T model on 3,072 A100
  (TP 4, PP 64, DP 12, micro batch 4, full recomputation: the run analytical models publish as their example),
  its scenario built as `clustertop validate` builds a published run's (engine/model/calibration.py).
- estimate_site_10_jobs_s: ten training jobs on meta-129k-h100's fabric, solved with each other's traffic
  (engine/model/contention.py), plans included.
"""

from __future__ import annotations

import dataclasses
import time

from clustertop.engine.model.estimate import clear_caches

FLAGSHIP = "llama3-405b-16k"
SITE = "meta-129k-h100"


def _time(fn, repeat: int = 20) -> float:  # type: ignore[no-untyped-def]
    """Best of `repeat` cold runs (caches cleared before each), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        clear_caches()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run() -> dict[str, float]:
    from clustertop.engine.config import scenario
    from clustertop.engine.model.estimate import estimate

    fixed = _time(lambda: estimate(scenario.load(FLAGSHIP)))
    fast = _time(lambda: estimate(scenario.load(FLAGSHIP), plan=False, hints=False))
    megatron = megatron_1t()
    t_1t = _time(lambda: estimate(megatron, plan=False, hints=False))
    base = scenario.load(FLAGSHIP)
    auto_jobs = tuple(dataclasses.replace(j, micro_batch="auto", virtual_stages="auto", recompute="auto")
                      for j in base.jobs)
    auto = dataclasses.replace(base, jobs=auto_jobs)
    t_auto = _time(lambda: estimate(auto))
    site = site_with_ten_jobs()
    t_site = _time(lambda: estimate(site))
    return {"estimate_flagship_s": round(fixed, 4), "estimate_flagship_auto_s": round(t_auto, 4),
            "estimate_flagship_fast_s": round(fast, 4), "estimate_megatron_1t_fast_s": round(t_1t, 4),
            "estimate_site_10_jobs_s": round(t_site, 4)}


# Megatron-LM's 1T GPT (Narayanan et al., SC21, Table 1: 128 layers, hidden 25600, 160 heads, seq 2048, the
# GPT-2 vocabulary padded to 51200) on 3,072 A100 80GB: TP 4 inside the node, PP 64, DP 12, batch 3,072 in
# micro batches of 4 (64 per replica), full recomputation, sequence parallelism, Megatron's fused softmax.
MEGATRON_1T_MODEL = {"layers": 128, "hidden": 25600, "heads": 160, "ffn": 102400, "ffn_activation": "gelu",
                     "vocab": 51200, "norm": "layernorm", "rotary": False}
MEGATRON_1T_JOB = {"name": "run", "model": MEGATRON_1T_MODEL, "seq_len": 2048, "global_batch": 3072,
                   "micro_batch": 4, "tp": 4, "pp": 64, "dp": 12, "virtual_stages": 1, "zero": 1,
                   "recompute": "full", "precision": "bf16", "sequence_parallel": True,
                   "attention_kernel": "fused_softmax", "grad_reduce_dtype": "bf16"}


def megatron_1t():  # type: ignore[no-untyped-def]
    """The 1T run as a scenario: a DGX A100 cluster as the calibration set writes one (8 GPUs a node on
    NVSwitch, 8 HDR InfiniBand NICs, racks of 16), validated like a scenario file."""
    from clustertop.engine.config.fields import Context
    from clustertop.engine.config.scenario import parse

    cluster = {"gpu": "a100-sxm-80gb", "gpus": 3072, "gpus_per_node": 8, "scale_up": "nvswitch",
               "scale_out": "ib-hdr-200g", "nics_per_node": 8, "gpus_per_rack": 16}
    name = "megatron-1t a100 3072 GPUs tp4 pp64 dp12"
    return parse({"name": name, "description": name, "cluster": cluster, "jobs": [MEGATRON_1T_JOB]},
                 Context(f"benchmarks/bench_estimate.py: {name}"))


def site_with_ten_jobs():  # type: ignore[no-untyped-def]
    """meta-129k-h100's four jobs and six more ablations in the GPUs left: ten training jobs on one fabric."""
    from clustertop.engine.config import scenario

    base = scenario.load(SITE)
    first = max(j.first_gpu + j.gpus for j in base.jobs)
    template = next(j for j in base.jobs if j.name == "ablation-8b")
    extra = tuple(dataclasses.replace(template, name=f"ablation-{k}", first_gpu=first + k * template.gpus)
                  for k in range(6))
    return dataclasses.replace(base, jobs=base.jobs + extra)
