"""Jobs that share tiers in the run: each job trains at its step with its neighbours' traffic, solved again
whenever a job stops or comes back (a fault, a maintenance window, a restart).

The cost model solves a set of running jobs once (engine/model/contention.py; cached per set). When the set
changes, every running job whose step changes takes its new step at its next step boundary (a step in flight
finishes at the speed it started with), and a "contention" event lists each running job's slowdown and share
(docs/events.md). A checkpoint's stall is too short to count: the job's traffic is taken to go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config.scenario import Scenario
from ..model.contention import Sharing
from ..stream import schema
from . import variability
from .activity import CompiledPlan
from .hooks import Emit

if TYPE_CHECKING:
    from ..model.estimate import JobEstimate
    from .track import JobTrack


class SharedTiers:
    """The run's jobs' steps with their neighbours: the set of jobs running and each job's plan for it.
    `tracks` is the run's list of jobs (filled in as each is planned); `emit` writes contention events."""

    def __init__(self, sharing: Sharing, scenario: Scenario, phase_w: np.ndarray, tracks: list[JobTrack],
                 emit: Emit) -> None:
        self.sharing, self.scenario, self.phase_w = sharing, scenario, phase_w
        self.tracks, self.emit = tracks, emit
        self.running = frozenset(i for i, e in enumerate(sharing.alone) if e.plan is not None)
        self._compiled: dict[tuple[int, frozenset[int]], CompiledPlan] = {}

    def plan(self, index: int) -> CompiledPlan | None:
        """A job's plan with every job running (None: it does not fit)."""
        est = self.sharing.solve(self.running)[index]
        return self._compile(index, est) if est.plan is not None else None

    def header(self, index: int) -> dict[str, Any]:
        """A job's contention keys for the header (alone, slowdown, tier, shares)."""
        return dict(self.sharing.solve(self.running)[index].contention)

    def update(self) -> None:
        """A job stopped or restarted: solve the running set again; jobs whose step changes take it at their
        next step boundary."""
        tracks = self.tracks
        running = frozenset(t.index for t in tracks
                            if t.plan is not None and (t.driver is None or not t.driver.down))
        if running == self.running:
            return
        self.running = running
        solved = self.sharing.solve(running)
        for track in tracks:
            if track.index in running and track.plan is not None:
                self._switch(track, solved[track.index])
        figures = schema.CONTENTION_KEYS
        self.emit(schema.CONTENTION, running=[tracks[i].job.name for i in sorted(running)],
                  jobs=[{"job": tracks[i].job.name, **{k: solved[i].contention.get(k) for k in figures}}
                        for i in sorted(running) if solved[i].contention])

    def _compile(self, index: int, est: JobEstimate) -> CompiledPlan:
        key = (index, self.running)
        if key not in self._compiled:
            assert est.plan is not None
            self._compiled[key] = CompiledPlan.of(self.scenario, est.job, est.plan)
        return self._compiled[key]

    def _switch(self, track: JobTrack, est: JobEstimate) -> None:
        plan = self._compile(track.index, est)
        old = track.plan
        if old is not None and (plan.plan.step_time_s, plan.plan.tier_load) == (old.plan.step_time_s,
                                                                                 old.plan.tier_load):
            return
        track.plan = plan
        variability.restretch(self.scenario, track, self.phase_w)
        if track.driver is not None:
            track.driver.replan()
