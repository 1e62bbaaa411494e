"""Speed of `clustertop estimate` on the 16K-GPU flagship: fixed settings, and every setting "auto"."""

from __future__ import annotations

import dataclasses
import time

FLAGSHIP = "llama3-405b-16k"


def _clear_caches() -> None:
    from engine import collectives, compute, estimate

    for fn in (compute.layer_cost, compute.embedding_cost, compute.output_cost, collectives._route,
               estimate._net, estimate._simulate_cached):
        fn.cache_clear()


def _time(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    """Best of `repeat` cold runs (caches cleared before each), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        _clear_caches()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run() -> dict[str, float]:
    from engine import scenario
    from engine.estimate import estimate

    fixed = _time(lambda: estimate(scenario.load(FLAGSHIP)))
    base = scenario.load(FLAGSHIP)
    auto_jobs = tuple(dataclasses.replace(j, micro_batch="auto", virtual_stages="auto", recompute="auto")
                      for j in base.jobs)
    auto = dataclasses.replace(base, jobs=auto_jobs)
    t_auto = _time(lambda: estimate(auto))
    return {"estimate_flagship_s": round(fixed, 4), "estimate_flagship_auto_s": round(t_auto, 4)}
