"""The stream's header (line 1) and its per-job entries, as every writer builds them (docs/events.md).

One builder for the keys every recording has (schema and version, generator, scenario, topology, jobs, seed,
sampling, tiers, link scopes, phases, power); a writer adds its own figures after them: the simulation its
plan KPIs, checkpoints, economics, scale-up, optics and contention (engine/sim/header.py), real telemetry
its `telemetry` table (engine/telemetry/frames.py).
"""

from __future__ import annotations

from typing import Any

from ..config.geometry import TIERS
from ..config.job import Job
from ..config.phases import PHASES
from . import schema
from .version import generator


def job_entry(job: Job, **figures: Any) -> dict[str, Any]:
    """A job's header entry: where its GPUs are and how its ranks are laid out (what a reader needs to place
    them), then the writer's `figures` in the order given."""
    return {"name": job.name, "kind": job.kind, "model": job.model.name, "first_gpu": job.first_gpu,
            "gpus": job.gpus, "tp": job.tp, "cp": job.cp, "pp": job.pp, "dp": job.dp, "ep": job.ep,
            "virtual_stages": job.virtual_stages, "rank_order": job.rank_order.split("-"), **figures}


def header(*, scenario: dict[str, Any], topology: dict[str, int], jobs: list[dict[str, Any]], seed: int,
           sample_interval_s: float | None, duration_s: float | None, sampling: str, phase_util: list[float],
           power: dict[str, Any], **figures: Any) -> dict[str, Any]:
    """The header line's object: `sampling` is "mean" (samples are means over their interval) or "instant"
    (readings at their time); `figures` follow the common keys in the order given."""
    return {"type": schema.HEADER, "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
            "generator": generator(), "scenario": scenario, "topology": topology, "jobs": jobs, "seed": seed,
            "sample_interval_s": sample_interval_s, "duration_s": duration_s, "sampling": sampling,
            "tiers": list(TIERS), "link_scope": dict(schema.LINK_SCOPE), "phases": list(PHASES),
            "phase_util": phase_util, "power": power, **figures}
