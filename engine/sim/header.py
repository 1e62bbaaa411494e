"""A run's header line: the stream's header (engine/stream/header.py) with the simulation's figures.

Per job: its tiers, whether it fits, its plan's step time and MFU, its checkpoints, memory per GPU, serving
figures, contention with its neighbours, its stragglers and its economics. For the run: the resolved
scenario (with the seed and duration used), the power model, the scale-up domain and the optics. Everything
a replay needs, with no scenario file and no engine.
"""

from __future__ import annotations

import math
from typing import Any

from ..config.geometry import Geometry
from ..config.scenario import Scenario
from ..model import economics, scaleup, uncertainty
from ..model.checkpoint import checkpoint_plan
from ..model.compute import total_params
from ..model.power import PowerModel
from ..stream.header import header, job_entry
from .sampling import PHASE_UTIL
from .sharing import SharedTiers
from .track import JobTrack


def run_header(scenario: Scenario, tracks: list[JobTrack], *, seed: int, duration_s: float, sample_s: float,
               topology: Geometry, power: PowerModel, shared: SharedTiers | None) -> dict[str, Any]:
    """Line 1 of a run's stream."""
    s = scenario.to_dict()
    s["seed"], s["duration_s"] = seed, duration_s
    s["path"] = s["path"].replace("\\", "/").rsplit("/", 1)[-1]   # no machine-specific directories
    s["cluster"]["node_fabric"] = s["cluster"]["scale_up"]    # its older name, for readers that know only it
    jobs = [_job(scenario, t, topology, power, shared) for t in tracks]
    return header(scenario=s, topology=topology.summary(), jobs=jobs, seed=seed, sample_interval_s=sample_s,
                  duration_s=duration_s, sampling="mean", phase_util=[float(u) for u in PHASE_UTIL],
                  power=power.describe(), scale_up=scaleup.describe(scenario.cluster),
                  optics=_optics(scenario))


def _job(scenario: Scenario, track: JobTrack, topology: Geometry, power: PowerModel,
         shared: SharedTiers | None) -> dict[str, Any]:
    """A job's entry: where it runs, then its plan's figures (when it fits)."""
    j, plan = track.job, track.plan
    entry = job_entry(j, tiers=track.layout.tiers(), fits=plan is not None,
                      **({k: plan.kpi[k] for k in ("step_time_s", "mfu")} if plan else {}))
    if plan is None:
        return entry
    ck = checkpoint_plan(scenario, j)
    entry["checkpoint"] = {"mode": ck.mode, "gb": round(ck.state_bytes / 1e9, 1),
                           "write_s": round(ck.write_s, 3), "stall_s": round(ck.stall_s, 3),
                           "interval_s": round(ck.interval_s, 1) if math.isfinite(ck.interval_s) else None}
    memory = plan.plan.memory_gb
    if memory:      # memory per GPU: one figure, or one per pipeline stage when they differ
        entry["memory_gb"] = memory[0] if len(set(memory)) == 1 else list(memory)
    entry.update(plan.plan.serving)       # inference: latencies, requests/s, batch, K/V cache use
    band = uncertainty.band(j.kind, scenario.cluster.gpu.name, total_params(j.model)[0], j.zero)
    if band is not None:                  # how far to trust the plan's step (engine/model/uncertainty.py)
        entry["uncertainty"] = round(band.uncertainty, 4)
        step = float(plan.kpi["step_time_s"])
        if not j.is_inference:
            entry["step_time_range_s"] = [round(step * (1 - band.uncertainty), 4),
                                          round(step * (1 + band.uncertainty), 4)]
    if shared is not None:
        entry.update(shared.header(track.index))
    st = track.stragglers
    entry["speed"] = round(st.speed, 4) if st else 1.0
    entry["slow_gpus"] = st.gpus.tolist() if st else []
    entry["economics"] = _economics(scenario, track, topology, power)
    return entry


def _optics(scenario: Scenario) -> dict[str, Any]:
    optics = scenario.cluster.transceivers
    return {"kind": scenario.cluster.optics, "transceivers": optics.count,
            "transceivers_by_tier": optics.by_tier(), "optics_mw": round(optics.watts / 1e6, 6)}


def _economics(scenario: Scenario, track: JobTrack, topology: Geometry, power: PowerModel) -> dict[str, Any]:
    """A job's energy and cost figures at its step in this run (with the wait for its slowest GPU)."""
    plan = track.stretched or track.plan
    assert plan is not None
    j, step = track.job, plan.step_time_s
    tokens_per_s = plan.kpi["tokens"] / step
    if not tokens_per_s:
        return dict(economics.NO_FIGURES)
    facility_w = power.job_w(plan.watts[0] * j.dp, j.gpus, topology.gpus)
    return economics.figures(scenario.economics, facility_w, j.gpus, step, tokens_per_s)
