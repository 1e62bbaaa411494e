"""Speed of `clustertop estimate` on the 16K-GPU flagship: fixed settings, and every setting "auto".

Keys:
- estimate_flagship_s: one estimate of llama3-405b-16k with its plan (what `clustertop estimate` and the
  engine run need), caches cleared before each run.
- estimate_flagship_auto_s: the same with micro_batch, virtual_stages and recompute all "auto" (the search).
- estimate_flagship_fast_s: the flagship without the plan and the fit hint (what a sweep asks for).
"""

from __future__ import annotations

import dataclasses
import time

from clustertop.engine.model.estimate import clear_caches

FLAGSHIP = "llama3-405b-16k"


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
    return {"estimate_flagship_s": round(fixed, 4), "estimate_flagship_auto_s": round(t_auto, 4),
            "estimate_flagship_fast_s": round(fast, 4)}
