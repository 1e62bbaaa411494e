"""What a run reports when it ends: its counts (lines, steps, samples) and the summary of `record --json`.

The summary: each job's steps, tokens and requests (serving), interruptions (unexpected and planned), the
effective training time (the share of the run whose work was kept), the site's lowest and highest
instantaneous power, checkpoints, and the site's energy and cost, in all and per token kept (work lost to a
fault and redone costs twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..config.scenario import Economics
from .site_power import SitePower
from .track import JobTrack


@dataclass
class RunStats:
    steps: int = 0
    tokens: int = 0
    events: int = 0          # lines after the header
    samples: int = 0
    sim_seconds: float = 0.0


def summary(tracks: list[JobTrack], site: SitePower, energy_mwh: float, econ: Economics, gpus: int,
            end: float) -> dict[str, Any]:
    """The summary of a run that ended at `end` (its duration) on a site of `gpus` accelerators."""
    drivers = [t.driver for t in tracks if t.driver is not None]
    weight = sum(d.track.job.gpus for d in drivers)
    kept = sum(d.track.job.gpus * d.kept_productive_s() for d in drivers)
    return {
        "interruptions_unexpected": sum(d.interruptions for d in drivers),
        "interruptions_planned": sum(d.planned for d in drivers),
        "effective_training_time": round(kept / (weight * end), 4) if weight else None,
        "site_mw_min": round(site.min_mw, 4) if math.isfinite(site.min_mw) else None,
        "site_mw_max": round(site.max_mw, 4) if math.isfinite(site.max_mw) else None,
        "checkpoints": sum(d.checkpoints for d in drivers),
        **_energy(tracks, energy_mwh, econ, gpus, end)}


def jobs(tracks: list[JobTrack]) -> dict[str, dict[str, Any]]:
    """Each job's progress at the end: steps and tokens (kept: a restart rolls a training job back to its
    checkpoint), and a serving job's requests served (its plan's requests per step, over its steps)."""
    out: dict[str, dict[str, Any]] = {}
    for t in tracks:
        entry: dict[str, Any] = {"steps": t.step, "tokens": t.tokens_total, "fits": t.plan is not None}
        if t.job.is_inference and t.plan is not None:
            per_step = t.plan.plan.serving.get("requests_per_s", 0.0) * t.plan.plan.step_time_s
            entry["requests"] = round(t.step * per_step)
        out[t.job.name] = entry
    return out


def _energy(tracks: list[JobTrack], energy_mwh: float, econ: Economics, gpus: int,
            end: float) -> dict[str, Any]:
    """The site's energy over the run, what the run cost (every accelerator of the site, idle or not), and
    both per token kept (the jobs' progress at the end)."""
    cost = econ.run_cost(gpus, energy_mwh, end / 3600.0)
    tokens = sum(t.tokens_total for t in tracks)
    return {"energy_mwh": round(energy_mwh, 4), "cost_usd": round(cost, 2),
            "energy_j_per_token": round(energy_mwh * 3.6e9 / tokens, 6) if tokens else None,
            "usd_per_mtoken": round(cost / tokens * 1e6, 6) if tokens else None}
