"""The performance model against published training runs (engine/config/catalogs/reference_runs.toml).

Each run is a scenario plus a published TFLOP/s per GPU, the FLOPs convention the publication used and a
tolerance. The prediction is the model's step time expressed in the publication's convention, so predicted and
published figures compare like with like.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..config import scenario as sc
from ..config.fields import Context
from ..config.scenario import Job
from .estimate import JobEstimate, estimate_job

REFERENCE_FILE = "reference_runs.toml"


@dataclass(frozen=True)
class Check:
    name: str
    label: str
    source: str
    metric: str
    published: float
    predicted: float | None
    tolerance: float
    chosen: dict[str, Any]
    estimate: JobEstimate

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.published - 1.0

    @property
    def ok(self) -> bool:
        return self.error is not None and abs(self.error) <= self.tolerance


@dataclass(frozen=True)
class OrderCheck:
    runs: tuple[str, ...]
    source: str
    ok: bool


@cache
def reference() -> dict[str, Any]:
    with resources.files("clustertop.engine.config.catalogs").joinpath(REFERENCE_FILE).open("rb") as f:
        return tomllib.load(f)


def scenarios() -> dict[str, sc.Scenario]:
    """Each reference run's scenario, validated like a scenario file."""
    ctx = Context(f"engine/config/catalogs/{REFERENCE_FILE}")
    return {run["name"]: sc.parse(run["scenario"], ctx, REFERENCE_FILE) for run in reference()["runs"]}


def megatron_flops_per_step(job: Job, recompute: str) -> float:
    """Narayanan et al. (SC21) eq. 3: 72 (or 96 with full recomputation) B s l h^2 (1 + s/6h + V/(12|16) l h)."""
    m = job.model
    b, s, l, h, v = job.global_batch, job.seq_len, m.layers, m.hidden, m.vocab
    if recompute == "full":
        return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


def predicted(metric: str, est: JobEstimate) -> float | None:
    if not est.fits or est.step_time_s is None:
        return None
    if metric == "model":
        return est.model_tflops_per_gpu
    if metric == "hardware":
        return est.hardware_tflops_per_gpu
    if metric == "megatron":
        job = est.job
        return megatron_flops_per_step(job, str(job.recompute)) / est.step_time_s / est.gpus / 1e12
    raise ValueError(f"unknown metric {metric!r} in {REFERENCE_FILE}")


def run_checks(names: list[str] | None = None) -> tuple[list[Check], list[OrderCheck]]:
    """Estimate every reference run (or those named) and compare with the published figures."""
    scs = scenarios()
    checks = []
    for run in reference()["runs"]:
        if names and run["name"] not in names:
            continue
        scen = scs[run["name"]]
        est = estimate_job(scen, scen.jobs[0])
        checks.append(Check(run["name"], run["label"], run["source"], run["metric"], float(run["published"]),
                            predicted(run["metric"], est), float(run["tolerance"]), est.chosen, est))
    by_name = {c.name: c for c in checks}
    orders = []
    for o in reference().get("order", []):
        if not all(n in by_name for n in o["runs"]):
            continue
        values = [by_name[n].predicted for n in o["runs"]]
        ok = all(v is not None for v in values) and all(a > b for a, b in itertools.pairwise(values))  # type: ignore[operator]
        orders.append(OrderCheck(tuple(o["runs"]), o.get("source", ""), ok))
    return checks, orders
