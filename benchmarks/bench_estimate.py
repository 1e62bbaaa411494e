"""Speed of `clustertop estimate` on the 16K-GPU flagship: fixed settings, and every setting "auto".

Keys:
- estimate_flagship_s: one estimate of llama3-405b-16k with its plan (what `clustertop estimate` and the
  engine run need), caches cleared before each run.
- estimate_flagship_auto_s: the same with micro_batch, virtual_stages and recompute all "auto" (the search).
- estimate_flagship_fast_s: the flagship without the plan and the fit hint (what a sweep asks for).
- estimate_site_10_jobs_s: ten training jobs on meta-129k-h100's fabric, solved with each other's traffic
  (engine/model/contention.py), plans included.
"""

from __future__ import annotations

import dataclasses
import time

from clustertop.engine.model.estimate import clear_caches

FLAGSHIP = "llama3-405b-16k"
SITE = "meta-129k-h100"


def _time(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
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
    base = scenario.load(FLAGSHIP)
    auto_jobs = tuple(dataclasses.replace(j, micro_batch="auto", virtual_stages="auto", recompute="auto")
                      for j in base.jobs)
    auto = dataclasses.replace(base, jobs=auto_jobs)
    t_auto = _time(lambda: estimate(auto))
    site = site_with_ten_jobs()
    t_site = _time(lambda: estimate(site))
    return {"estimate_flagship_s": round(fixed, 4), "estimate_flagship_auto_s": round(t_auto, 4),
            "estimate_flagship_fast_s": round(fast, 4), "estimate_site_10_jobs_s": round(t_site, 4)}


def site_with_ten_jobs():  # type: ignore[no-untyped-def]
    """meta-129k-h100's four jobs and six more ablations in the GPUs left: ten training jobs on one fabric."""
    from clustertop.engine.config import scenario

    base = scenario.load(SITE)
    first = max(j.first_gpu + j.gpus for j in base.jobs)
    template = next(j for j in base.jobs if j.name == "ablation-8b")
    extra = tuple(dataclasses.replace(template, name=f"ablation-{k}", first_gpu=first + k * template.gpus)
                  for k in range(6))
    return dataclasses.replace(base, jobs=base.jobs + extra)
