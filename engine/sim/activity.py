"""A job's activity over time, as exact integrals: what its GPUs do in each segment of the run.

`Periodic` holds piecewise-constant tracks (one per pipeline stage, or per link tier) repeating with the step:
the integral over any window is whole periods times the per-step integral plus prefix integrals looked up in a
cumulative table, so no step is ever re-simulated. `CompiledPlan` is a job's StepPlan in that form, with the
wait for its slowest GPU and the day's clock stretch. A `Segment` of a job's time has an activity: `Running`
repeats a compiled plan from a start time; `Constant` keeps every GPU of the job in one phase (idle, failed,
checkpoint). engine/sim/run.py appends the segments as the run goes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config.geometry import TIERS
from ..config.job import Job
from ..config.phases import CODE, PHASES
from ..config.scenario import Scenario
from ..model.plan import StepPlan

NPH = len(PHASES)
BOUNDARY = 1e-9           # a time within this share of a step from a step boundary is on it (rounding)
WHOLE = 8                 # CompiledPlan.whole's integrals kept per plan
WAIT = CODE["dp"]         # where GPUs wait for a straggler: the data-parallel gradient reduction


class Periodic:
    """Tracks of a periodic, piecewise-constant vector function: exact integrals over any window, vectorized.

    Track s lives on [s P, (s+1) P) of one "virtual" axis, so one searchsorted answers every track at once.
    """

    def __init__(self, period: float, tracks: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.period = float(period)
        n = len(tracks)
        self.xs = np.concatenate([np.asarray(starts, np.float64) + s * self.period
                                  for s, (starts, _) in enumerate(tracks)])
        self.vals = np.concatenate([np.asarray(v, np.float64) for _, v in tracks])
        lengths = np.diff(np.append(self.xs, n * self.period))
        self.cum = np.concatenate([np.zeros((1, self.vals.shape[1])),
                                   np.cumsum(self.vals * lengths[:, None], axis=0)])
        self.base = np.arange(n, dtype=np.float64) * self.period
        self.cum_scale = 1.0      # `cum` times this is the table (scaled: multiplied at a lookup)
        self.g0 = self._g(self.base)
        self.full: np.ndarray = self._g(self.base + self.period) - self.g0
        self._last: tuple[float, np.ndarray] = (math.nan, self.full)     # at's last answer off a boundary

    def _g(self, q: np.ndarray) -> np.ndarray:
        i = self.xs.searchsorted(q, side="right")
        i -= 1
        np.maximum(i, 0, out=i)
        np.minimum(i, self.xs.size - 1, out=i)
        g: np.ndarray = self.cum.take(i, axis=0)
        if self.cum_scale != 1.0:
            g *= self.cum_scale                   # == (cum * k)[i]
        g += (q - self.xs.take(i))[:, None] * self.vals.take(i, axis=0)
        return g

    def at(self, x: float) -> np.ndarray:
        """Integral of every track from 0 to x (x >= 0): shape (tracks, width)."""
        k = math.floor(x / self.period)
        frac = min(max(x - k * self.period, 0.0), self.period)
        if frac <= BOUNDARY * self.period:           # on a step boundary (segments start and end there)
            return k * self.full
        if frac >= (1.0 - BOUNDARY) * self.period:
            return (k + 1) * self.full
        last = self._last
        if last[0] == x:                # a sample's end is the next sample's start
            return last[1]
        total = self._g(self.base + frac)
        total += k * self.full          # k * full + g, in place (the same sum)
        total -= self.g0
        total.flags.writeable = False   # kept: read-only
        self._last = (x, total)
        return total

    def integral(self, xa: float, xb: float) -> np.ndarray:
        if xa == 0.0:                   # a segment from its start: at(0) is zeros, and x - 0 is x
            return self.at(xb)
        start = self.at(xa)             # first: at(xb) is what the next window asks again
        between: np.ndarray = self.at(xb) - start
        return between

    def scaled(self, k: float) -> Periodic:
        """The same tracks with time stretched by k (every integral scales by k). The cumulative table is
        shared, its rows scaled as they are looked up (a day's clocks stretch a large plan's step every few
        minutes, and few of its rows are ever read): the same products as scaling the table here."""
        out = object.__new__(Periodic)
        out.period = self.period * k
        out.xs, out.vals = self.xs * k, self.vals
        out.cum, out.cum_scale = (self.cum, k) if self.cum_scale == 1.0 else (self.cum * self.cum_scale, k)
        out.base, out.g0, out.full = self.base * k, self.g0 * k, self.full * k
        out._last = (math.nan, out.full)
        return out

    def extremes(self, weights: np.ndarray) -> tuple[float, float]:
        """Lowest and highest instantaneous sum over the tracks of `vals @ weights`
        (e.g. watts of all stages)."""
        w = self.vals @ weights
        track = np.searchsorted(self.base, self.xs, side="right") - 1
        grid = np.unique(self.xs - self.base[track])
        total = np.zeros(grid.size)
        for b in self.base:
            total += w[np.clip(np.searchsorted(self.xs, grid + b, side="right") - 1, 0, w.size - 1)]
        return float(total.min()), float(total.max())


def _kpi(tokens: int, flops: float, gpus: int, peak: float, period: float) -> dict[str, Any]:
    tflops = flops / period / gpus / 1e12
    return {"step_time_s": round(period, 6), "tokens": tokens, "tokens_per_s": round(tokens / period, 1),
            "tflops_per_gpu": round(tflops, 2), "mfu": round(tflops / peak, 6)}


@dataclass
class CompiledPlan:
    """A StepPlan prepared for exact integrals, with the per-step KPIs of its step events.

    With `extra_s` > 0 every stage waits ("dp") for that long after the plan's step: the wait for the job's
    slowest GPU. `scaled(k)` stretches the whole step (the day's clocks).
    """

    plan: StepPlan
    phases: Periodic          # tracks: pipeline stages; width: phase codes (one-hot)
    tiers: Periodic           # tracks: TIERS; width 1 (load 0..1)
    kpi: dict[str, Any]
    extra: Periodic | None = None     # one track, width 1: 1 during the wait for the slowest GPU
    watts: tuple[float, float, float] = (0.0, 0.0, 0.0)   # GPU W of one replica: step mean, lowest, highest
    figures: tuple[int, float, int, float] = (0, 0.0, 1, 1.0)   # tokens, model FLOPs, GPUs, peak TFLOP/s
    # integrals over whole steps from a segment's start, by the number of steps (whole)
    _whole: dict[int, tuple[np.ndarray, np.ndarray, float]] = field(default_factory=dict, repr=False,
                                                                     compare=False)
    step_time_s: float = field(init=False, default=0.0, compare=False)     # the period (__post_init__)

    @classmethod
    def of(cls, scenario: Scenario, job: Job, plan: StepPlan, extra_s: float = 0.0,
           phase_w: np.ndarray | None = None) -> CompiledPlan:
        step = float(plan.step_time_s)
        if not (step > 0 and math.isfinite(step)):
            raise ValueError(f"plan for job {job.name!r} has step_time_s = {step}")
        if len(plan.stages) != job.pp:
            raise ValueError(f"plan for job {job.name!r} has {len(plan.stages)} stage timelines, "
                             f"expected pp = {job.pp}")
        period = step + extra_s
        eye = np.eye(NPH)
        tracks = []
        for s, stage in enumerate(plan.stages):
            starts = np.array([iv.start_s for iv in stage], dtype=np.float64)
            if starts.size == 0 or abs(starts[0]) > 1e-9 or np.any(np.diff(starts) < 0):
                raise ValueError(f"plan for job {job.name!r}: stage {s} does not cover the step from 0 "
                                 "in order")
            starts[0] = 0.0
            codes = [iv.phase for iv in stage]
            if extra_s > 0:
                starts, codes = np.append(starts, step), codes + [WAIT]
            tracks.append((starts, eye[codes]))
        tier_tracks = []
        for tier in TIERS:
            starts, load = _tier_track(plan, tier)
            if extra_s > 0:
                starts, load = np.append(starts, step), np.vstack([load, [[0.0]]])
            tier_tracks.append((starts, load))
        extra = Periodic(period, [(np.array([0.0, step]), np.array([[0.0], [1.0]]))]) if extra_s > 0 else None
        tokens = int(plan.tokens or job.tokens_per_step)
        figures = (tokens, float(plan.model_flops), job.gpus, scenario.cluster.gpu.peak_tflops(job.precision))
        phases = Periodic(period, tracks)
        watts = (0.0, 0.0, 0.0)
        if phase_w is not None:
            lo, hi = phases.extremes(phase_w)
            width = job.tp * job.cp
            watts = (float((phases.full @ phase_w).sum()) / period * width, lo * width, hi * width)
        return cls(plan, phases, Periodic(period, tier_tracks), _kpi(*figures, period), extra, watts, figures)

    def __post_init__(self) -> None:
        self.step_time_s = self.phases.period         # read at every step and wait: an attribute

    def integrals(self, xa: float, xb: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Over [xa, xb] of the step repeated from 0: seconds per stage in each phase, each tier's
        load-seconds, the seconds waiting for the slowest GPU (Running.integrals)."""
        if xa == 0.0:
            period = self.phases.period               # the period of every track (tiers, extra) alike
            k = math.floor(xb / period)
            frac = min(max(xb - k * period, 0.0), period)
            n = k if frac <= BOUNDARY * period else k + 1 if frac >= (1.0 - BOUNDARY) * period else -1
            if n >= 0:
                return self.whole(n)
        extra = self.extra
        return (self.phases.integral(xa, xb), self.tiers.integral(xa, xb)[:, 0],
                0.0 if extra is None else float(extra.integral(xa, xb)[0, 0]))

    def whole(self, n: int) -> tuple[np.ndarray, np.ndarray, float]:
        """`integrals` over n whole steps from 0 (Periodic.at on a boundary: n times a step's), read-only;
        kept per n (a job's stretches between checkpoints are mostly as many steps long)."""
        got = self._whole.get(n)
        if got is None:
            phases, tiers = n * self.phases.full, (n * self.tiers.full)[:, 0]
            phases.flags.writeable = tiers.flags.writeable = False
            extra = 0.0 if self.extra is None else float((n * self.extra.full)[0, 0])
            if len(self._whole) >= WHOLE:
                del self._whole[next(iter(self._whole))]
            got = self._whole[n] = (phases, tiers, extra)
        return got

    def scaled(self, k: float) -> CompiledPlan:
        """The plan with every interval stretched by k: same power, k times the step time."""
        if k == 1.0:
            return self
        return CompiledPlan(self.plan, self.phases.scaled(k), self.tiers.scaled(k),
                            _kpi(*self.figures, self.step_time_s * k),
                            self.extra.scaled(k) if self.extra is not None else None,
                            self.watts, self.figures)


def _tier_track(plan: StepPlan, tier: str) -> tuple[np.ndarray, np.ndarray]:
    """A tier's load over one step: its mean load over the step."""
    return np.zeros(1), np.array([[float(plan.tier_load.get(tier, 0.0))]])


class Activity:
    """What a job's GPUs do during one segment of time. Subclasses give exact integrals over a window."""

    running = False

    def durations(self, a: float, b: float) -> np.ndarray:
        """Seconds each pipeline stage spends in each phase over [a, b]: shape (pp, phases)."""
        raise NotImplementedError

    def integrals(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray | None, float]:
        """Over [a, b] at once (a sample takes all three): `durations`; the integral of each tier's load
        (load-seconds, in TIERS order; None: no load); the seconds in which the job waits for its slowest
        GPU."""
        return self.durations(a, b), None, 0.0


class Running(Activity):
    """Training: the plan's step repeated from t0; steps step0+1, step0+2, ... end at t0 + k * step_time_s."""

    running = True

    def __init__(self, plan: CompiledPlan, t0: float, step0: int = 0, tokens0: int = 0) -> None:
        self.plan = plan
        self.t0 = t0
        self.step0 = step0
        self.tokens0 = tokens0
        self.emitted = 0          # steps of this segment already written
        self.due = self.next_due()

    def next_due(self) -> float:
        """A time safely before the end of the next step to write (engine/sim/run.py's `advance` writes a
        step that ends by its time within a tolerance of 1e-9 of a step): no step is due before it."""
        return self.t0 + (self.emitted + 1 - 1e-6) * self.plan.step_time_s

    def durations(self, a: float, b: float) -> np.ndarray:
        return self.plan.phases.integral(a - self.t0, b - self.t0)

    def integrals(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray | None, float]:
        return self.plan.integrals(a - self.t0, b - self.t0)


class Constant(Activity):
    """Every GPU of the job in one phase (idle, failed, checkpoint, ...)."""

    def __init__(self, phase: str, pp: int) -> None:
        self.phase = phase
        self.code = CODE[phase]             # the one column of `onehot` that is not zero
        self.onehot = _onehot(phase, pp)

    def durations(self, a: float, b: float) -> np.ndarray:
        return self.onehot * (b - a)



@functools.cache
def _onehot(phase: str, pp: int) -> np.ndarray:
    """Every stage in one phase, shape (pp, phases): one read-only array per phase and depth (a site's jobs
    checkpoint every few steps: a new array each time cost more than the rest of the switch)."""
    onehot = np.zeros((pp, NPH))
    onehot[:, CODE[phase]] = 1.0
    onehot.flags.writeable = False
    return onehot


@dataclass
class Segment:
    start: float
    end: float
    activity: Activity
