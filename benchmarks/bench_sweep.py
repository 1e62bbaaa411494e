"""Sweep throughput: a 1,000-point sweep of the flagship's layouts (llama3-405b-16k), all cores.

Keys:
- sweep_points_per_s: points estimated per second with the performance model (engine.model.estimate), writing
  the JSON Lines records to a file, pool start-up included; best of 3 runs, each with new workers whose caches
  start empty (the parent process never estimates a point).
- sweep_trivial_points_per_s: the same sweep with an estimator that does no work (a constant record of the
  real shape): the ceiling the sweep machinery itself allows.
- sweep_overhead_us_per_point: CPU time per point of the machinery in one process (build the point's table,
  validate it with the loader, serialize the record, rank it), trivial estimator.
- sweep_cpu_us_per_point: CPU time per point of the whole sweep with the performance model in one process
  (best of 3, so with the caches warm: schedule waves, routes): steadier than a wall-clock rate on a machine
  other work shares; sweep_points_per_s also pays the pool start and every worker filling its caches.
- sweep_invalid_points: how many of the 1,000 points the loader refuses (the axes include invalid ones).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from clustertop.engine.config.scenario import Scenario
from clustertop.engine.sweep.evaluate import estimate_json
from clustertop.engine.sweep.results import Ranking
from clustertop.engine.sweep.run import sweep_to
from clustertop.engine.sweep.space import Estimator, plan

BASE = "llama3-405b-16k"
# 5 x 5 x 5 x 2 x 2 x 2 = 1,000 points; 484 of them invalid, as a real design-space search meets them: 224
# with too few sequences per replica for the micro_batch or the interleaving, 160 with dp*micro_batch beyond
# the global batch of 2,048, 100 with pp*virtual_stages = 128 beyond the 126 layers
AXES = ["jobs[0].tp=2,4,8,16,32", "jobs[0].pp=4,8,16,32,64", "jobs[0].micro_batch=1,2,4,8,16",
        "jobs[0].virtual_stages=1,2", "jobs[0].recompute=selective,full", "jobs[0].zero=1,3"]

_JOB = {"step_time_s": 10.0, "tokens_per_s": 1.6e6, "model_tflops_per_gpu": 400.0, "mfu": 0.4,
        "hardware_tflops_per_gpu": 410.0, "memory_gb_per_gpu": 60.0, "fits": True,
        "breakdown_s": {"compute": 8.0, "tp": 0.5, "pp": 0.1, "dp": 0.4, "bubble": 1.0, "optimizer": 0.1},
        "memory_gb": {"weights": 6.4, "gradients": 6.4, "optimizer": 0.3, "activations": 40.0,
                      "buffers": 6.9},
        "chosen": {"micro_batch": 1, "virtual_stages": 1, "recompute": "none"}}


def trivial(s: Scenario) -> dict[str, Any]:
    """An estimator that does no work: a constant record of the real shape."""
    return {"scenario": s.name, "cluster": {"gpus": s.cluster.gpus},
            "jobs": [{"name": j.name, "gpus": j.gpus, **_JOB} for j in s.jobs]}


def _time(estimator: Estimator, workers: int | None, repeat: int) -> tuple[float, Ranking]:
    """Best wall time of `repeat` full runs (plan, pool, records to a file)."""
    best, ranking = float("inf"), None
    for _ in range(repeat):
        with tempfile.TemporaryFile() as sink:
            started = time.perf_counter()
            ranking = sweep_to(plan(BASE, AXES, estimator), sink, workers=workers)
            best = min(best, time.perf_counter() - started)
    assert ranking is not None and ranking.total == 1000
    return best, ranking


def _cpu(estimator: Estimator, repeat: int) -> float:
    """Least CPU time of `repeat` full runs in this process (one worker)."""
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryFile() as sink:
            started = time.process_time()
            sweep_to(plan(BASE, AXES, estimator), sink, workers=1)
            best = min(best, time.process_time() - started)
    return best


def run() -> dict[str, float]:
    figures: dict[str, float] = {}
    elapsed, ranking = _time(estimate_json, None, 3)
    figures["sweep_points_per_s"] = round(1000 / elapsed, 1)
    figures["sweep_invalid_points"] = float(ranking.invalid)
    elapsed, _ = _time(trivial, None, 3)
    figures["sweep_trivial_points_per_s"] = round(1000 / elapsed, 1)
    elapsed, _ = _time(trivial, 1, 3)
    figures["sweep_overhead_us_per_point"] = round(elapsed / 1000 * 1e6, 1)
    figures["sweep_cpu_us_per_point"] = round(_cpu(estimate_json, 3) / 1000 * 1e6, 1)
    return figures
