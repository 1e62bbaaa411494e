"""Jobs that share a fabric slow each other: each job's collectives meet the others' traffic on the tiers they
share.

Alone, a job's routes (engine/model/collectives.py) already share each oversubscribed block's uplinks among
the job's own groups. On a site, the racks, pods and buildings a job's traffic leaves may also carry other
jobs' traffic. Each job's *footprint* is, for every block of every tier above the leaf, the connections (NICs'
worth of traffic) its dimensions send out of the block while they communicate, times the share of its step
each one communicates. Phases of different jobs are independent, so that is the load a job's collective meets
from the others on average: it is added to the job's own connections on the blocks it uses (ECMP then hashes
all of them onto the uplinks), the job is estimated again, and since a slower step sends less per second, the
footprints are recomputed from the new steps until no step moves by more than 0.1%
(damped: each round moves halfway).

A job that shares nothing (its own pods, or tiers at full bisection with room to spare) keeps its step. Each
job reports its step alone, the slowdown its neighbours cause, the tier where it loses the most, and its share
of that tier's busiest shared block.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config.cluster import Cluster
from ..config.geometry import Geometry
from ..config.job import Job
from ..config.scenario import Scenario
from . import collectives as col
from .step import route_dims

if TYPE_CHECKING:
    from .estimate import JobEstimate

MAX_ROUNDS = 12
TOLERANCE = 1e-3       # rounds stop when no step moves by more than this
LOSS = 5e-4            # a slowdown below this names no tier
QUANTUM = 20           # others' connections per block are counted in 1/20ths: rounds that barely move them
                       # meet the same background and reuse its routes (each costs ~17 ms at 2M GPUs)


def _blocks(topo: Geometry) -> dict[str, int]:
    return {tier: -(-topo.gpus // size) for tier, size in topo.block_sizes().items()}


def footprint(cluster: Cluster, est: JobEstimate, step_s: float) -> dict[str, np.ndarray]:
    """Connections the job sends out of each block of each shared tier, averaged over a step of `step_s`."""
    counts = _blocks(Geometry.of(cluster))
    out: dict[str, np.ndarray] = {}
    for dim, seconds in est.busy_s.items():
        dims, pattern = route_dims(est.job, dim)
        share = min(1.0, seconds / step_s)
        for tier, demand in col.route(cluster, est.job, dims, pattern).demand.items():
            acc = out.setdefault(tier, np.zeros(counts[tier]))
            acc[:demand.size] += share * demand[:counts[tier]]
    return out


def _background(prints: dict[int, dict[str, np.ndarray]], me: int) -> col.Background:
    """The others' footprints added up, per tier, rounded (QUANTUM) so that equal backgrounds share cached
    routes."""
    total: dict[str, np.ndarray] = {}
    for other, tiers in prints.items():
        if other == me:
            continue
        for tier, load in tiers.items():
            total[tier] = total.get(tier, 0.0) + load
    return tuple((tier, tuple((np.round(load * QUANTUM) / QUANTUM).tolist()))
                 for tier, load in sorted(total.items()) if np.any(load > 0))


def _shares(own: dict[str, np.ndarray], background: col.Background) -> dict[str, float]:
    """Per shared tier: the job's share of the traffic on the block where it meets the most of the others'."""
    out = {}
    for tier, theirs in background:
        mine = own.get(tier)
        if mine is None:
            continue
        others = np.asarray(theirs)[:mine.size]
        meet = np.where(mine > 0, others, 0.0)
        if not np.any(meet > 0):
            continue
        b = int(np.argmax(meet))
        out[tier] = round(float(mine[b] / (mine[b] + others[b])), 4)
    return out


def _lost_on(cluster: Cluster, est: JobEstimate, background: col.Background) -> str | None:
    """The tier whose slowdown the neighbours raise the most, over the job's dimensions."""
    worst, tier_of = 1.0 + 1e-6, None
    for dim in est.busy_s:
        dims, pattern = route_dims(est.job, dim)
        alone = col.route(cluster, est.job, dims, pattern).tier_slowdown
        shared = col.route(cluster, est.job, dims, pattern, background).tier_slowdown
        for tier, value in shared.items():
            ratio = value / alone.get(tier, 1.0)
            if ratio > worst:
                worst, tier_of = ratio, tier
    return tier_of


def solve(scenario: Scenario, estimates: list[JobEstimate],
          again: Callable[[Job, col.Background, bool], JobEstimate],
          running: frozenset[int] | None = None) -> list[JobEstimate]:
    """The estimates of a scenario's jobs with their neighbours' traffic (unchanged for a single job).

    again(job, background, plan) estimates a job again with others' traffic (plan: with its StepPlan). Only
    the jobs in `running` (indices; default all) send traffic:
    the others are down and keep their estimate alone.
    """
    if len(scenario.jobs) < 2:
        return estimates
    cluster = scenario.cluster
    sharing = [i for i, e in enumerate(estimates) if e.fits and e.kind == "training" and e.busy_s
               and (running is None or i in running)]
    current = list(estimates)
    steps = {i: float(estimates[i].step_time_s or math.inf) for i in sharing}
    backgrounds: dict[int, col.Background] = {i: () for i in sharing}
    for _ in range(MAX_ROUNDS if len(sharing) > 1 else 0):
        prints = {i: footprint(cluster, current[i], steps[i]) for i in sharing}
        for i in sharing:
            background = _background(prints, i)
            if background != backgrounds[i]:
                backgrounds[i] = background
                current[i] = again(scenario.jobs[i], background, False) if background else estimates[i]
        moved = 0.0
        for i in sharing:
            new = float(current[i].step_time_s or math.inf)
            damped = (steps[i] + new) / 2
            moved = max(moved, abs(damped / steps[i] - 1.0))
            steps[i] = damped
        if moved < TOLERANCE:
            break
    out = []
    for i, est in enumerate(estimates):
        if not backgrounds.get(i):
            out.append(dataclasses.replace(est, contention=_alone(est) if est.kind == "training" else {}))
            continue
        final = again(scenario.jobs[i], backgrounds[i], True) if est.plan is not None else current[i]
        slowdown = float(final.step_time_s or 0.0) / float(est.step_time_s or 1.0)
        own = footprint(cluster, est, float(est.step_time_s or math.inf))
        out.append(dataclasses.replace(final, contention={
            "step_time_alone_s": round(float(est.step_time_s or 0.0), 4),
            "contention_slowdown": round(slowdown, 4),
            "contention_tier": _lost_on(cluster, est, backgrounds[i]) if slowdown > 1 + LOSS else None,
            "contention_shares": _shares(own, backgrounds[i]),
        }))
    return out


class Sharing:
    """A scenario's jobs estimated with each other's traffic, for any set of jobs running (a run re-solves
    when a job stops or restarts): one solution per set, cached."""

    def __init__(self, scenario: Scenario, alone: list[JobEstimate],
                 again: Callable[[Job, col.Background, bool], JobEstimate]) -> None:
        self.scenario, self.alone, self.again = scenario, alone, again
        self._solved: dict[frozenset[int], list[JobEstimate]] = {}

    def solve(self, running: frozenset[int]) -> list[JobEstimate]:
        if running not in self._solved:
            self._solved[running] = solve(self.scenario, self.alone, self.again, running)
        return self._solved[running]


def _alone(est: JobEstimate) -> dict[str, Any]:
    step = round(float(est.step_time_s), 4) if est.step_time_s is not None else None
    return {"step_time_alone_s": step, "contention_slowdown": 1.0 if step is not None else None,
            "contention_tier": None, "contention_shares": {}}
