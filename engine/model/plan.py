"""The contract between the cost model and the engine run: one training step of one representative replica.

The cost model (engine/model/step.py) produces a StepPlan; the engine run repeats it over simulated time and
broadcasts each pipeline stage's timeline to every GPU of that stage (all DP replicas behave the same).
Phases are the stream's codes (engine/config/phases.py) from the schedule to the samples. Here also how a
plan's per-stage intervals are put together: merged into runs that cover the step, and extended from two
simulated sizes to a long step.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..config.phases import CODE, PHASES
from .pipeline import Intervals, PipelineRun

BUBBLE = CODE["bubble"]
# The place of each code's phase name in alphabetical order. merge_runs walks a stage's intervals sorted by
# (start, end, NAME_RANK[code]): of two with the same start and end, the one whose phase name comes first
# covers that time and the other is dropped. (The schedule's codes were once name-sorted; this keeps plans
# as they were.)
NAME_RANK = np.array([sorted(PHASES).index(name) for name in PHASES], dtype=np.int8)


class Interval(NamedTuple):
    """A stretch of one stage's step in one phase. A named tuple, not a dataclass: a plan holds thousands
    (the flagship's 16 stages 5,175), and their frozen-dataclass inits were a quarter of the
    flagship's estimate."""

    start_s: float     # from the start of the step
    end_s: float
    phase: int         # a code of engine.config.phases (CODE)


@dataclass(frozen=True)
class StepPlan:
    step_time_s: float
    # stages[p] is the timeline of pipeline stage p: contiguous, non-overlapping intervals covering
    # [0, step_time_s]. Every GPU of stage p follows it.
    stages: tuple[tuple[Interval, ...], ...]
    # Mean load (0..1 of the tier's capacity) each link tier carries over the step, per tier name.
    tier_load: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    model_flops: float = 0.0       # per step, whole job (model FLOPs: no recomputation)
    memory_gb: tuple[float, ...] = ()   # memory per GPU of each pipeline stage (GB)
    serving: dict[str, Any] = field(default_factory=dict)     # inference: the header's serving figures


def extend_run(run1: PipelineRun, run2: PipelineRun, m1: int, m2: int,
               m: int) -> tuple[Intervals, list[float], list[list[tuple[float, float]]]]:
    """A step of m microbatches from simulations of m1 < m2: every stage's end grows linearly in m.

    The extra microbatches are extra rounds of the steady state: the drain, where each chunk's last backward
    runs, comes that much later (it moves with the stage's end), which is what the DP gradient reduction
    overlaps with. For the plan, each stage's intervals of run2 (contiguous from 0) are stretched into new
    arrays: work (compute and communication) by m / m2, the waiting so that the stage ends where the linear
    extension puts it.
    """
    iv = run2.intervals
    p = len(run2.ends)
    bubble = iv.phase == BUBBLE
    length = iv.end - iv.start
    work = np.bincount(iv.stage, weights=np.where(bubble, 0.0, length), minlength=p)
    wait = np.bincount(iv.stage, weights=np.where(bubble, length, 0.0), minlength=p)
    k_work = m / m2
    k_wait = []
    for e1, e2, w, idle in zip(run1.ends, run2.ends, work.tolist(), wait.tolist()):
        end = e2 + (m - m2) * (e2 - e1) / (m2 - m1)
        k_wait.append(max(0.0, end - w * k_work) / idle if idle > 0 else 1.0)
    stretched = length * np.where(bubble, np.array(k_wait)[iv.stage], k_work)
    start, finish = np.empty_like(stretched), np.empty_like(stretched)
    bounds = np.searchsorted(iv.stage, np.arange(p + 1)).tolist()
    ends: list[float] = []
    last_b: list[list[tuple[float, float]]] = []
    for r, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        finish[lo:hi] = np.cumsum(stretched[lo:hi])         # the running time, added one interval at a time
        start[lo:hi] = np.concatenate([[0.0], finish[lo:hi - 1]])
        t = float(finish[hi - 1]) if hi > lo else 0.0
        ends.append(t)
        shift = t - run2.ends[r]
        last_b.append([(b0 + shift, b1 + shift) for b0, b1 in run2.last_backward[r]])
    return Intervals(iv.stage, start, finish, iv.phase), ends, last_b


def merge_runs(iv: Intervals, end: float, stages: int) -> Intervals:
    """Each stage's runs covering [0, end]: what walking its intervals sorted by (start, end, phase name)
    makes of them. An interval ending where the covered time already is is dropped, one starting before it
    is clipped, a gap becomes bubble, and adjacent equal phases merge into one run."""
    iv = _sorted(iv, stages)
    bounds = np.searchsorted(iv.stage, np.arange(stages + 1))
    covered = np.empty(len(iv.end))          # covered time after each interval: the stage's running maximum
    for lo, hi in itertools.pairwise(bounds.tolist()):
        covered[lo:hi] = np.maximum.accumulate(iv.end[lo:hi])
    before = np.concatenate([[0.0], covered[:-1]])
    before[bounds[:-1][bounds[:-1] < len(before)]] = 0.0
    before = np.maximum(before, 0.0)         # covered time before each interval
    done = np.array([max(0.0, covered[hi - 1]) if hi > lo else 0.0
                     for lo, hi in itertools.pairwise(bounds.tolist())])
    kept = iv.end > before
    start = np.maximum(iv.start, before)
    gap = kept & (start > before)
    # the pieces: the kept intervals (clipped); before one, the gap it leaves (bubble); at the end of each
    # stage, the bubble until `end`. Gaps and tails are few: they are inserted where they belong.
    kept_ahead = np.concatenate([[0], np.cumsum(kept)])        # kept intervals ahead of each position
    tails, gaps = np.flatnonzero(end > done), np.flatnonzero(gap)
    at = np.concatenate([kept_ahead[bounds[1:][tails]], kept_ahead[gaps]])
    order = np.lexsort((np.arange(len(at)) >= len(tails), at))  # a stage's tail before the next one's gap
    bubble = np.int8(BUBBLE)

    def pieces(kept_values: np.ndarray, tail_values: Any, gap_values: Any) -> np.ndarray:
        extra = np.concatenate([np.broadcast_to(tail_values, len(tails)),
                                np.broadcast_to(gap_values, len(gaps))])
        return np.insert(kept_values[kept], at[order], extra[order])

    stage = pieces(iv.stage, tails, iv.stage[gaps])
    a, b = pieces(start, done[tails], before[gaps]), pieces(iv.end, end, start[gaps])
    code = pieces(iv.phase, bubble, bubble)
    first = np.ones(len(code), dtype=bool)  # the pieces that start a run
    first[1:] = (code[1:] != code[:-1]) | (stage[1:] != stage[:-1])
    last = np.ones_like(first)               # the pieces that end one
    last[:-1] = first[1:]
    return Intervals(stage[first], a[first], b[last], code[first])


def _sorted(iv: Intervals, stages: int) -> Intervals:
    """Each stage's intervals sorted by (start, end, phase name). The schedule emits them in that order but
    for rounding (an operation ending a hair after the next one starts), so sorting is rarely needed."""
    a, b, c, r = iv.start, iv.end, iv.phase, iv.stage
    x, y = slice(None, -1), slice(1, None)
    same_stage = r[x] == r[y]
    if not (same_stage & (a[x] >= a[y])).any():          # the starts increase: in order
        return iv
    k = NAME_RANK[c]
    in_order = (a[x] < a[y]) | ((a[x] == a[y]) & ((b[x] < b[y]) | ((b[x] == b[y]) & (k[x] <= k[y]))))
    unsorted = np.unique(r[y][~in_order & same_stage])
    if not len(unsorted):
        return iv
    a, b, c = a.copy(), b.copy(), c.copy()
    bounds = np.searchsorted(r, np.arange(stages + 1))
    for s in unsorted.tolist():
        lo, hi = bounds[s], bounds[s + 1]
        idx = lo + np.lexsort((k[lo:hi], b[lo:hi], a[lo:hi]))
        a[lo:hi], b[lo:hi], c[lo:hi] = a[idx], b[idx], c[idx]
    return Intervals(r, a, b, c)
