"""One job in the run: its layout, plan, segments of activity over time, and progress (what the parts read).

A job's time is a list of segments (engine/sim/activity.py), each with an activity; the integrals over any
window add the segments' parts in it. The run appends segments as the job trains, checkpoints, fails and
restarts, and drops those that no later sample can overlap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config.geometry import TIERS, JobGeometry
from ..config.job import Job
from ..model.layout import Layout
from .activity import NPH, Activity, CompiledPlan, Constant, Segment

if TYPE_CHECKING:
    from .lifecycle import JobDriver
    from .variability import Stragglers


@dataclass
class JobTrack:
    """One job in the run: its layout, plan, segments of activity and progress."""

    index: int
    job: Job
    layout: Layout
    plan: CompiledPlan | None            # the cost model's step (the header's figures)
    segments: list[Segment] = field(default_factory=list)
    step: int = 0
    tokens_total: int = 0
    last_kpi: dict[str, Any] = field(default_factory=dict)
    process: Any = None
    stretched: CompiledPlan | None = None    # the step with the wait for the slowest GPU
    stragglers: Stragglers | None = None
    driver: JobDriver | None = None
    productive_s: float = 0.0                # time of the steps completed (since the restart's checkpoint)
    tuned_at: float = 0.0                    # when the day's clock factor was last applied
    factor: float = 1.0                      # that factor
    # the stretched step at each factor, by (id of the stretched step, factor): the least recently used go
    # first past variability.VARIANTS (a job whose neighbours come and go returns to its earlier steps)
    variants: dict[tuple[int, float], CompiledPlan] = field(default_factory=dict)
    replan: bool = False                     # a new step (its neighbours' traffic) waits for a step boundary
    # per plan it has had (by id): (that plan, its stretched step), for when it comes back
    stretches: dict[int, tuple[CompiledPlan, CompiledPlan]] = field(default_factory=dict)

    @property
    def activity(self) -> Activity:
        return self.segments[-1].activity

    def stage_index(self) -> np.ndarray:
        """Pipeline stage of each of the job's GPUs (job-local order; engine/config/geometry.py)."""
        return JobGeometry.of(self.job).stage_of()

    def durations(self, a: float, b: float) -> np.ndarray:
        total = np.zeros((self.job.pp, NPH))
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.end)
            if hi > lo:
                total += seg.activity.durations(lo, hi)
        return total

    def integrals(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Over [a, b], in one pass over the segments (a sample takes all three; each the sum over the
        segments in order, as alone): seconds per stage in each phase (`durations`), each tier's load-seconds,
        and the seconds the job waits for its slowest GPU (Activity.integrals)."""
        total = _zeros(self.job.pp).copy()    # np.zeros of a few kB lets go of the interpreter lock (calloc):
        loads = _zeros(0).copy()              # a copy keeps it, so the gzip thread does not cut in
        extra = 0.0
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.end)
            if hi > lo:
                act = seg.activity
                if act.__class__ is Constant:     # its seconds in its one column (its durations, without
                    total[:, act.code] += hi - lo     # adding the zeros of the other columns)
                    continue
                d, load, e = act.integrals(lo, hi)
                total += d
                if load is not None:
                    loads += load
                extra += e
        return total, loads, extra


@functools.cache
def _zeros(pp: int) -> np.ndarray:
    """Zeros to start a job's sums from: (pp, phases), or the tiers for pp = 0 (read-only: copied)."""
    out = np.zeros((pp, NPH)) if pp else np.zeros(len(TIERS))
    out.flags.writeable = False
    return out


def idle_gpus(tracks: list[JobTrack], gpus: int) -> int:
    """GPUs of the cluster that run no job."""
    return gpus - sum(t.job.gpus for t in tracks)
