"""What a job's tokens cost in joules and dollars, from the power model and the scenario's [economics].

A job's facility power while it trains is its GPUs' mean draw over a step (each phase of the step's breakdown
at its phase's watts: engine/model/power.py), plus their servers, storage and switches (x 1.1), plus its share
of the site's optics (its share of the GPUs), times the PUE. Then, per job:

- energy per step = facility power x step time; joules per token = facility power / tokens per second;
- tokens per second per MW of facility power;
- dollars per hour: owned accelerators cost capex / (depreciation years x 8,760 h) each, plus the electricity
  of the facility power; rented ones (`cloud_usd_per_accelerator_hour` > 0) cost that price each,
  power included;
- dollars per million tokens = dollars per hour / (tokens per second x 3,600) x 1e6;
- a 54-day run (Llama 3's snapshot) at that steady state: MWh and dollars, no interruptions counted (`record`
  simulates them: its `energy_mwh` and `cost_usd` are of the run as it went).

docs/performance-model.md section 11 derives the flagship's figures.
"""

from __future__ import annotations

from typing import Any

from ..config.cluster import Cluster
from ..config.scenario import Economics
from .power import job_facility_w, phase_watts

RUN_DAYS = 54                     # Llama 3's 54-day training snapshot
# breakdown entries that are not phases: the GPUs they describe are in this phase
PHASE_OF = {"stragglers": "dp", "prefill": "compute", "decode": "memory"}


def facility_w(cluster: Cluster, breakdown: dict[str, float], step_s: float, gpus: int) -> float:
    """A job's facility watts: its GPUs' mean draw over a step (the seconds its breakdown gives each phase at
    that phase's watts), with their share of the site (engine/model/power.py job_facility_w)."""
    gpu = cluster.gpu
    energy = sum(seconds * phase_watts(gpu, PHASE_OF.get(name, name)) for name, seconds in breakdown.items())
    gpu_w = energy / step_s * gpus if step_s > 0 else 0.0
    return job_facility_w(gpu_w, gpus, cluster.gpus, gpu.server_overhead(), cluster.transceivers.watts,
                          cluster.pue)


def figures(econ: Economics, facility_w: float, gpus: int, step_s: float,
            tokens_per_s: float) -> dict[str, float]:
    """A job's energy and cost figures (the `estimate --json` keys),
    from its facility power and throughput."""
    per_hour = econ.usd_per_hour(gpus, facility_w)
    hours = RUN_DAYS * 24
    run_mwh = facility_w / 1e6 * hours
    return {"power_mw": round(facility_w / 1e6, 6),
            "energy_j_per_step": round(facility_w * step_s, 1),
            "energy_j_per_token": round(facility_w / tokens_per_s, 6),
            "tokens_per_s_per_mw": round(tokens_per_s / (facility_w / 1e6), 1),
            "usd_per_hour": round(per_hour, 4),
            "usd_per_mtoken": round(per_hour / (tokens_per_s * 3600) * 1e6, 6),
            "run_54d_mwh": round(run_mwh, 1),
            "run_54d_usd": round(econ.run_cost(gpus, run_mwh, hours), 0)}


NO_FIGURES: dict[str, Any] = dict.fromkeys(("power_mw", "energy_j_per_step", "energy_j_per_token",
                                            "tokens_per_s_per_mw", "usd_per_hour", "usd_per_mtoken",
                                            "run_54d_mwh", "run_54d_usd"))
