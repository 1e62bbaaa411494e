"""The site's load as the run goes: its level, its instantaneous extremes,
and the power swings between levels.

Besides the exact means of the samples (engine/sim/sampling.py), the run follows the site's load level (each
running job at its step-mean power, everything else at its phase's power) and its instantaneous extremes (a
step's highest and lowest draw: all stages computing, all waiting together). When the level jumps by more than
the threshold of engine/model/power.py (a checkpoint, a fault, a restart), a `power_swing` event says from and
to what.
"""

from __future__ import annotations

import math
from typing import Any

import simpy

from ..config.phases import CODE
from ..model.power import PowerModel
from ..stream import schema
from .activity import WAIT, Constant, Running
from .hooks import Emit
from .overrides import Override
from .track import JobTrack, idle_gpus

COMPUTE = CODE["compute"]
KEPT = 256                # site levels and swings kept (_levels, _swings); the oldest go first
KNOWN = 16                # step plans and phases of a job whose watts are kept (plans come back: checkpoints,
#                           restarts, the day's clocks)


class SitePower:
    """The site's load level and extremes over one run; `changed()` whenever what GPUs draw changes. It reads
    the run's jobs and overrides in force (lists the run keeps current) and writes `power_swing` events with
    `emit`."""

    def __init__(self, env: simpy.Environment, emit: Emit, power: PowerModel, tracks: list[JobTrack],
                 overrides: list[Override], gpus: int) -> None:
        self.env, self.emit, self.power = env, emit, power
        self.tracks, self.overrides, self.gpus = tracks, overrides, gpus
        self.idle_gpus = idle_gpus(tracks, gpus)
        self._idle_w = self.idle_gpus * power.idle_w      # GPU watts of the GPUs without a job
        self.level_mw: float | None = None     # the site's load level (power swings)
        self.min_mw = math.inf                 # instantaneous extremes of site power over the run
        self.max_mw = -math.inf
        self.pending: simpy.Event | None = None   # the look at the level once this instant is done (changed)
        self._last: dict[int, tuple[object, tuple[float, float, float]]] = {}   # job: (activity, W) last seen
        # per job, by id of a step plan or phase it has had: (that plan or phase, W), the oldest go first
        self._known: dict[int, dict[int, tuple[object, tuple[float, float, float]]]] = {}
        # the site's MW by the jobs' watts (no override in force), and a swing's fields by (from, to) MW: the
        # site goes back and forth between a few levels (training, checkpoints)
        self._levels: dict[tuple[tuple[float, float, float], ...], tuple[float, float, float]] = {}
        self._swings: dict[tuple[float, float], dict[str, Any]] = {}

    def changed(self) -> None:
        """Something changed what GPUs draw: look at the site once everything at this instant is done."""
        if self.pending is not None:
            return
        self.pending = self.env.timeout(0)
        self.pending.callbacks.append(self.look)

    def look(self, _event: Any = None) -> None:
        """The site's level now: its extremes, and a swing if it jumped (the pending event's callback, or run
        in its place: engine/sim/shortcut.py). It schedules nothing."""
        self.pending = None
        level, lo, hi = self.now()
        self.min_mw = min(self.min_mw, lo)
        self.max_mw = max(self.max_mw, hi)
        prev, self.level_mw = self.level_mw, level
        if prev is None:
            return
        swing = self._swings.get((prev, level))
        if swing is None:
            swing = self._swing(prev, level)
            if len(self._swings) >= KEPT:
                del self._swings[next(iter(self._swings))]
            self._swings[(prev, level)] = swing
        if swing:
            self.emit(schema.POWER_SWING, **swing)

    def _swing(self, prev: float, level: float) -> dict[str, Any]:
        """The fields of a power swing from `prev` to `level` (MW), or none if the change is not one."""
        power = self.power
        if not abs(level - prev) > power.swing_threshold_mw(prev):
            return {}
        fields: dict[str, Any] = {"from_mw": round(prev, 3), "to_mw": round(level, 3),
                                  "delta_mw": round(level - prev, 3)}
        if power.over_budget(level):
            fields["over_budget"] = True
        return fields

    def job_watts(self, track: JobTrack) -> tuple[float, float, float]:
        """GPU watts of one job now: its level (a running job's step mean), lowest and highest instants
        (computed once per step plan or phase: a job's restarts and checkpoints come back to the same)."""
        act = track.segments[-1].activity if track.segments else None
        last = self._last.get(track.index)
        if last is not None and last[0] is act:          # the same segment as last time
            return last[1]
        what: object = (act.plan if isinstance(act, Running) else act.phase if isinstance(act, Constant)
                        else None)
        known = self._known.setdefault(track.index, {})
        got = known.get(id(what))
        if got is not None and got[0] is what:
            watts = got[1]
        else:
            watts = self._job_watts(track, act)
            if len(known) >= KNOWN:
                del known[next(iter(known))]
            known[id(what)] = (what, watts)
        self._last[track.index] = (act, watts)
        return watts

    def _job_watts(self, track: JobTrack, act: object) -> tuple[float, float, float]:
        power = self.power
        w = power.phase_w
        if isinstance(act, Running):
            reps = track.job.dp
            watts = act.plan.watts
            level, lo, hi = watts[0] * reps, watts[1] * reps, watts[2] * reps
            st = track.stragglers
            if st is not None and act.plan.extra is not None:
                share = float(act.plan.extra.full[0, 0]) / act.plan.step_time_s
                level += float(st.phi.sum()) * share * (w[COMPUTE] - w[WAIT])
            return level, lo, hi
        if isinstance(act, Constant):
            x = float(w[CODE[act.phase]]) * track.job.gpus
            return x, x, x
        x = power.idle_w * track.job.gpus
        return x, x, x

    def now(self) -> tuple[float, float, float]:
        """Site MW now: (level, lowest, highest), with the overrides in force."""
        job_watts, last = self.job_watts, self._last
        watts = []
        for track in self.tracks:
            segments = track.segments
            got = last.get(track.index)
            if got is not None and segments and got[0] is segments[-1].activity:     # job_watts, inlined
                watts.append(got[1])
            else:
                watts.append(job_watts(track))
        now = self.env.now
        active = [o for o in self.overrides if o.start <= now < o.end] if self.overrides else None
        if active:
            return self._site(watts, active)
        key = tuple(watts)
        got_mw = self._levels.get(key)
        if got_mw is None:
            got_mw = self._site(watts, None)
            if len(self._levels) >= KEPT:
                del self._levels[next(iter(self._levels))]
            self._levels[key] = got_mw
        return got_mw

    def _site(self, watts: list[tuple[float, float, float]],
              active: list[Override] | None) -> tuple[float, float, float]:
        """Site MW (level, lowest, highest) of the jobs' GPU watts (in track order) and the overrides in
        force."""
        power = self.power
        level = lo = hi = self._idle_w
        for a, b, c in watts:
            level += a
            lo += b
            hi += c
        if active:
            idle = power.idle_w
            w = power.phase_w
            per_gpu = [(t.job.first_gpu, t.job.gpus, self.job_watts(t)[0] / t.job.gpus) for t in self.tracks]
            for o in active:
                covered = 0
                delta = 0.0
                for first, count, mean in per_gpu:
                    n = max(0, min(o.first + o.count, first + count) - max(o.first, first))
                    covered += n
                    delta += n * (w[CODE[o.phase]] - mean)
                delta += (o.count - covered) * (w[CODE[o.phase]] - idle)
                level, lo, hi = level + delta, lo + delta, hi + delta
        n = self.gpus
        return float(power.site_mw(level, n)), float(power.site_mw(lo, n)), float(power.site_mw(hi, n))
