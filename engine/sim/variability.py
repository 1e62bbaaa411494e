"""Stragglers and the day's clocks: why a synchronous step takes longer than a nominal GPU's.

Every GPU has a speed factor (lognormal around 1, plus a small fraction of markedly slow GPUs; scenario
[variability]) drawn once per seed. Synchronous training waits for the slowest GPU: a job's step is its plan
plus a wait of (1 / slowest speed - 1) of the step at the end of the step, in which every GPU waits on the
data-parallel reduction ("dp") except the slow ones, which spend their share of it computing. GPUs whose extra
computing changes their utilization by at least one percentage point (the stream's resolution), and the
slowest GPU of each job, are drawn on their own (engine/sim/sampling.py); the others follow the nominal
timeline.

On top, the day's temperatures lower GPU clocks: the step stretches by a factor whose peak-to-trough swing is
the scenario's diurnal_amplitude (a cosine over 24 h, slowest at 14:00; a run starts at midnight), applied per
15 minutes at a step boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..config.phases import CODE
from ..config.scenario import Scenario, Variability
from .activity import CompiledPlan

if TYPE_CHECKING:
    from .track import JobTrack

DAY = 86400.0
HOTTEST_S = 14 * 3600.0   # GPU clocks are lowest at the day's temperature peak, mid-afternoon
#                           (runs start at 00:00)
RETUNE_S = 900.0          # the day's clock factor is applied per 15-minute window, at a step boundary
VARIANTS = 64             # a job's stretched steps kept per clock factor, the least recently used go first (a
#                           day has 49 distinct factors; a site's largest jobs' steps take ~0.6 MB each)
VISIBLE_UTIL = 0.01       # a straggler is drawn on its own when it computes >= 1 point of utilization more
COMPUTE = CODE["compute"]


@dataclass
class Stragglers:
    """A job's GPUs drawn on their own: slow enough that their extra computing shows."""

    gpus: np.ndarray          # global GPU indices, sorted
    stage: np.ndarray         # their pipeline stages
    phi: np.ndarray           # share of the job's wait for the slowest GPU each spends computing (0..1]
    speed: float              # the job's speed: its slowest GPU's factor (1 = nominal)


def draw_speeds(v: Variability, rng: np.random.Generator, n: int) -> np.ndarray | None:
    """Every GPU's speed factor, drawn once per seed: lognormal around 1, times slow_gpu_factor for a few."""
    if v.straggler_sigma <= 0 and v.slow_gpu_fraction <= 0:
        return None
    speeds = np.exp(rng.standard_normal(n) * v.straggler_sigma) if v.straggler_sigma > 0 else np.ones(n)
    if v.slow_gpu_fraction > 0:
        speeds[rng.random(n) < v.slow_gpu_fraction] *= v.slow_gpu_factor
    return speeds


def stretch(scenario: Scenario, track: JobTrack, speeds: np.ndarray | None, phase_w: np.ndarray) -> None:
    """The job's step with the wait for its slowest GPU (track.stretched), and the GPUs drawn on their own
    (track.stragglers)."""
    assert track.plan is not None
    j, nominal = track.job, track.plan
    step = nominal.step_time_s
    slowest = 1.0
    if speeds is not None:
        speeds = speeds[j.first_gpu:j.first_gpu + j.gpus]
        slowest = min(1.0, float(speeds.min()))      # the cost model's step is that of a nominal GPU
    k = 1.0 / slowest
    track.stretched = CompiledPlan.of(scenario, j, nominal.plan, (k - 1.0) * step, phase_w)
    track.stretches[id(nominal)] = (nominal, track.stretched)
    if speeds is None or k == 1.0:
        return
    stage = track.stage_index()
    compute_share = nominal.phases.full[:, COMPUTE] / step                      # per stage
    phi = compute_share[stage] * np.clip(1.0 / speeds - 1.0, 0.0, None) / (k - 1.0)
    shown = phi * (k - 1.0) / k >= VISIBLE_UTIL
    shown[int(np.argmin(speeds))] = True
    idx = np.flatnonzero(shown)
    track.stragglers = Stragglers(j.first_gpu + idx, stage[idx].astype(np.int64), np.minimum(phi[idx], 1.0),
                                  slowest)


def restretch(scenario: Scenario, track: JobTrack, phase_w: np.ndarray) -> None:
    """The stretched step again after the job's plan changed (its neighbours' traffic): the same slowest GPU,
    the same GPUs drawn on their own."""
    assert track.plan is not None
    got = track.stretches.get(id(track.plan))
    if got is not None and got[0] is track.plan:       # a plan it had before (the same neighbours again)
        track.stretched = got[1]
        return
    k = 1.0 / track.stragglers.speed if track.stragglers is not None else 1.0
    track.stretched = CompiledPlan.of(scenario, track.job, track.plan.plan,
                                      (k - 1.0) * track.plan.step_time_s, phase_w)
    track.stretches[id(track.plan)] = (track.plan, track.stretched)


def diurnal(amplitude: float, t: float) -> float:
    """How much longer a step takes at time t than at night: 1 / throughput over the day."""
    if amplitude <= 0:
        return 1.0
    mid = (math.floor(t / RETUNE_S) + 0.5) * RETUNE_S
    return 1.0 / (1.0 - amplitude / 2 * (1.0 + math.cos(2 * math.pi * (mid - HOTTEST_S) / DAY)))


def plan_at(amplitude: float, track: JobTrack, now: float) -> CompiledPlan:
    """The job's stretched step at the day's clock speed now (one variant per 15 minutes of the day)."""
    assert track.stretched is not None
    track.tuned_at = now
    track.factor = factor = diurnal(amplitude, now)
    variants = track.variants
    key = (id(track.stretched), factor)      # track.stretches keeps every stretched step: no id is reused
    plan = variants.pop(key, None)              # the least recently used go first
    if plan is None:
        while len(variants) >= VARIANTS:
            del variants[next(iter(variants))]
        plan = track.stretched.scaled(factor)
    variants[key] = plan
    return plan


def next_retune(amplitude: float, track: JobTrack) -> float:
    """When the day's clock factor next changes for a job (inf: never)."""
    if amplitude <= 0:
        return math.inf
    return (math.floor(track.tuned_at / RETUNE_S + 1e-9) + 1) * RETUNE_S
