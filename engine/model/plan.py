"""The contract between the cost model and the engine run: one training step of one representative replica.

The cost model (engine/model/step.py) produces a StepPlan; the engine run repeats it over simulated time and
broadcasts each pipeline stage's timeline to every GPU of that stage (all DP replicas behave the same).
Phases are the stream's codes (engine/config/phases.py) from the schedule to the samples. Here also how a
plan's per-stage intervals are put together: merged into runs that cover the step, and extended from two
simulated sizes to a long step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

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


class Timelines(Sequence[tuple[Interval, ...]]):
    """Every stage's runs (merge_runs: stage after stage) as a sequence of Interval tuples, one per stage,
    each made when it is first read (tuple.__new__ over the zipped columns, in C): the flagship's plan
    holds 5,175 intervals, a quarter of its estimate when made at once, and an estimate that does not replay
    its plan never reads them."""

    def __init__(self, runs: Intervals, stages: int) -> None:
        self._runs = runs
        self._bounds: list[int] = np.searchsorted(runs.stage, np.arange(stages + 1)).tolist()
        self._made: list[tuple[Interval, ...] | None] = [None] * stages

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, index: int) -> tuple[Interval, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[tuple[Interval, ...], ...]: ...

    def __getitem__(self, index: int | slice) -> tuple[Interval, ...] | tuple[tuple[Interval, ...], ...]:
        if isinstance(index, slice):
            return tuple(self[r] for r in range(*index.indices(len(self))))
        made = self._made[index]           # (an index out of range raises here, as a tuple's would)
        if made is None:
            r = index % len(self._made)
            lo, hi = self._bounds[r], self._bounds[r + 1]
            runs = self._runs
            rows = zip(runs.start[lo:hi].tolist(), runs.end[lo:hi].tolist(), runs.phase[lo:hi].tolist())
            made = self._made[r] = tuple(map(tuple.__new__, itertools.repeat(Interval), rows))
        return made

    def __iter__(self) -> Iterator[tuple[Interval, ...]]:
        return (self[r] for r in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]      # (equal to a tuple of the same tuples: not hashable)

    def __repr__(self) -> str:
        return repr(tuple(self))


@dataclass(frozen=True)
class StepPlan:
    step_time_s: float
    # stages[p] is the timeline of pipeline stage p: contiguous, non-overlapping intervals covering
    # [0, step_time_s]. Every GPU of stage p follows it. (A tuple of tuples, or Timelines that make each
    # stage's tuple from arrays when it is read.)
    stages: Sequence[tuple[Interval, ...]]
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
    last = covered[np.maximum(bounds[1:] - 1, 0)] if len(covered) else np.zeros(stages)
    done = np.where((bounds[1:] > bounds[:-1]) & (last > 0.0), last, 0.0)     # max(0, the stage's last)
    kept = iv.end > before
    start = np.maximum(iv.start, before)
    gap = kept & (start > before)
    # the pieces: the kept intervals (clipped); before one, the gap it leaves (bubble); at the end of each
    # stage, the bubble until `end`. Gaps and tails are few: they are inserted where they belong (as
    # np.insert puts them, ties in the order given: a stage's tail before the next one's gap).
    kept_ahead = np.concatenate([[0], np.cumsum(kept)])        # kept intervals ahead of each position
    tails, gaps = np.flatnonzero(end > done), np.flatnonzero(gap)
    at = np.concatenate([kept_ahead[bounds[1:][tails]], kept_ahead[gaps]])
    order = np.lexsort((np.arange(len(at)) >= len(tails), at))
    inserted = at[order] + np.arange(len(at))                  # where each inserted piece lands
    taken = np.ones(int(kept_ahead[-1]) + len(at), dtype=bool)  # where the kept intervals land
    taken[inserted] = False
    bubble = np.int8(BUBBLE)

    def pieces(kept_values: np.ndarray, tail_values: Any, gap_values: Any) -> np.ndarray:
        extra = np.concatenate([np.broadcast_to(tail_values, len(tails)),
                                np.broadcast_to(gap_values, len(gaps))])
        out = np.empty(len(taken), dtype=kept_values.dtype)
        out[inserted] = extra[order]
        out[taken] = kept_values[kept]
        return out

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
