"""The engine run: a SimPy simulation of a scenario over simulated time, producing the event stream.

Each job's time is a sequence of segments, each with an activity: `Running` (the job's StepPlan repeated
from a start time: a periodic, piecewise-constant timeline per pipeline stage) or `Constant` (every GPU of
the job in one phase: idle, failed, checkpoint). Nothing happens between perturbations that is not already
in the plan, so the run fast-forwards: SimPy only wakes up for samples and perturbations (job start/stop now;
faults, checkpoints and restarts in issue 6), and step events are generated in closed form (step k of a
segment ends at t0 + k * step_time_s) right before any later line is written.

Sampling semantics: the sample at time t carries the exact mean over the sample interval (t - interval, t]
of every per-GPU quantity: utilization and power are time averages, and the phase is the one the GPU spent
most of the interval in. Means are integrals of piecewise-constant functions, computed in closed form (whole
steps times the per-step integral, plus prefix integrals looked up in a cumulative table): no rounding to a
time grid and no re-simulation of steps. The sample at t = 0 is the instantaneous state at the start.

Symmetry: all DP replicas of a stage follow the same timeline, so a sample is computed per stage (a (pp,
phases) matrix of durations per job) and run-length encoded per replica pattern, then tiled over the
replicas; only GPUs with an override (issue 6: a failed node) take the per-GPU numpy path. Encoded arrays
that did not change since an earlier sample are reused as serialized bytes.

Hooks for later issues (docs/events.md, "Extending the run"): `Run.emit` (any discrete event, time-ordered),
`Run.switch` / `Run.resume` (change a job's activity at the current time), `Run.interrupt` (run a
Perturbation inside the job's SimPy process), `Run.override` (a phase for a GPU range, e.g. a failed node),
`Run.rng` (an independent random stream per named process), `Run.add_process`, `Run.site_mw` / `Run.measure`
(exact power and state over any window or at an instant), `Run.summary` (extra keys for `record --json`),
and engine/power.py.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson
import simpy

from . import schema
from .errors import UserError
from .layout import Layout
from .phases import CODE, PHASES
from .power import PowerModel
from .scenario import Job, Scenario
from .timeline import StepPlan
from .topology import TIERS, Topology

Planner = Callable[[Scenario, Job], "StepPlan | None"]

NPH = len(PHASES)
# Utilization (0..1) of a GPU in each phase: the share of its time it does useful work. Memory-bound phases
# keep the GPU busy at a low arithmetic rate.
PHASE_UTIL = np.zeros(NPH, dtype=np.float64)
PHASE_UTIL[CODE["compute"]] = 1.0
PHASE_UTIL[CODE["optimizer"]] = 0.5
PHASE_UTIL[CODE["memory"]] = 0.5

POD_TIERS = ("node", "leaf", "spine")      # tiers inside a pod: one load per pod; core and campus: one load
TARGET_SAMPLES = 5000
NICE_INTERVALS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
                  3600.0, 7200.0, 21600.0, 86400.0)
MAX_SAMPLES = 10_000_000
MAX_STEP_EVENTS = 20_000_000        # ~4 GB of JSON Lines: refuse rather than fill a disk
INSTANT = 1e-9            # the window of the t = 0 sample (its instantaneous state)
OPT = orjson.OPT_APPEND_NEWLINE


def default_sample_interval(duration_s: float) -> float:
    """A round interval giving at most about 5,000 samples: 0.2 s for 10 min, 5 s for 6 h, 20 min for 54 d."""
    want = duration_s / TARGET_SAMPLES
    for nice in NICE_INTERVALS:
        if nice >= want:
            return nice
    return NICE_INTERVALS[-1]


def default_planner(scenario: Scenario, job: Job) -> StepPlan | None:
    """The cost model's plan for a job (None when it does not fit in memory)."""
    try:
        from .estimate import estimate_job  # lazy: the cost model is a separate module
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.estimate":
            raise
        raise UserError("the performance model (engine/estimate.py) is not part of this build") from None
    return estimate_job(scenario, job).plan


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
        self.g0 = self._g(self.base)
        self.full = self._g(self.base + self.period) - self.g0

    def _g(self, q: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(self.xs, q, side="right") - 1, 0, self.xs.size - 1)
        return self.cum[i] + (q - self.xs[i])[:, None] * self.vals[i]

    def at(self, x: float) -> np.ndarray:
        """Integral of every track from 0 to x (x >= 0): shape (tracks, width)."""
        k = math.floor(x / self.period)
        frac = min(max(x - k * self.period, 0.0), self.period)
        return k * self.full + self._g(self.base + frac) - self.g0

    def integral(self, xa: float, xb: float) -> np.ndarray:
        return self.at(xb) - self.at(xa)


@dataclass
class CompiledPlan:
    """A StepPlan prepared for exact integrals, with the per-step KPIs of its step events."""

    plan: StepPlan
    phases: Periodic          # tracks: pipeline stages; width: phase codes (one-hot)
    tiers: Periodic           # tracks: TIERS; width 1 (load 0..1)
    kpi: dict[str, Any]

    @classmethod
    def of(cls, scenario: Scenario, job: Job, plan: StepPlan) -> CompiledPlan:
        period = float(plan.step_time_s)
        if not (period > 0 and math.isfinite(period)):
            raise ValueError(f"plan for job {job.name!r} has step_time_s = {period}")
        if len(plan.stages) != job.pp:
            raise ValueError(f"plan for job {job.name!r} has {len(plan.stages)} stage timelines, "
                             f"expected pp = {job.pp}")
        eye = np.eye(NPH)
        tracks = []
        for s, stage in enumerate(plan.stages):
            starts = np.array([iv.start_s for iv in stage], dtype=np.float64)
            if starts.size == 0 or abs(starts[0]) > 1e-9 or np.any(np.diff(starts) < 0):
                raise ValueError(f"plan for job {job.name!r}: stage {s} does not cover the step from 0 "
                                 "in order")
            starts[0] = 0.0
            tracks.append((starts, eye[[CODE[iv.phase] for iv in stage]]))
        tier_tracks = [_tier_track(period, plan, tier) for tier in TIERS]
        tokens = int(plan.tokens or job.tokens_per_step)
        tflops = plan.model_flops / period / job.gpus / 1e12
        peak = scenario.cluster.gpu.peak_tflops(job.precision)
        kpi = {"step_time_s": round(period, 6), "tokens": tokens, "tokens_per_s": round(tokens / period, 1),
               "tflops_per_gpu": round(tflops, 2), "mfu": round(tflops / peak, 4)}
        return cls(plan, Periodic(period, tracks), Periodic(period, tier_tracks), kpi)

    @property
    def step_time_s(self) -> float:
        return self.phases.period


def _tier_track(period: float, plan: StepPlan, tier: str) -> tuple[np.ndarray, np.ndarray]:
    """A tier's load over one step: its busy periods when the plan gives them, else its mean load."""
    busy = plan.tier_busy.get(tier)
    if not busy:
        return np.zeros(1), np.array([[float(plan.tier_load.get(tier, 0.0))]])
    cuts = sorted({0.0, *(min(max(float(x), 0.0), period) for b in busy for x in b[:2])} - {period})
    starts = np.array(cuts)
    mids = (starts + np.append(starts[1:], period)) / 2
    load = np.zeros(starts.size)
    for a, b, value in busy:
        load += np.where((mids >= a) & (mids < b), float(value), 0.0)
    return starts, load[:, None]


class Activity:
    """What a job's GPUs do during one segment of time. Subclasses give exact integrals over a window."""

    running = False

    def durations(self, a: float, b: float) -> np.ndarray:
        """Seconds each pipeline stage spends in each phase over [a, b]: shape (pp, phases)."""
        raise NotImplementedError

    def tier_load(self, a: float, b: float) -> np.ndarray:
        """Integral of each tier's load over [a, b] (load-seconds), in TIERS order."""
        return np.zeros(len(TIERS))


class Running(Activity):
    """Training: the plan's step repeated from t0; steps step0+1, step0+2, ... end at t0 + k * step_time_s."""

    running = True

    def __init__(self, plan: CompiledPlan, t0: float, step0: int = 0, tokens0: int = 0) -> None:
        self.plan = plan
        self.t0 = t0
        self.step0 = step0
        self.tokens0 = tokens0
        self.emitted = 0          # steps of this segment already written

    def durations(self, a: float, b: float) -> np.ndarray:
        return self.plan.phases.integral(a - self.t0, b - self.t0)

    def tier_load(self, a: float, b: float) -> np.ndarray:
        return self.plan.tiers.integral(a - self.t0, b - self.t0)[:, 0]


class Constant(Activity):
    """Every GPU of the job in one phase (idle, failed, checkpoint, ...)."""

    def __init__(self, phase: str, pp: int) -> None:
        self.phase = phase
        self.onehot = np.zeros((pp, NPH))
        self.onehot[:, CODE[phase]] = 1.0

    def durations(self, a: float, b: float) -> np.ndarray:
        return self.onehot * (b - a)


@dataclass
class Segment:
    start: float
    end: float
    activity: Activity


@dataclass
class JobTrack:
    """One job in the run: its layout, plan, segments of activity and progress."""

    index: int
    job: Job
    layout: Layout
    plan: CompiledPlan | None
    segments: list[Segment] = field(default_factory=list)
    step: int = 0
    tokens_total: int = 0
    last_kpi: dict[str, Any] = field(default_factory=dict)
    process: Any = None
    _stage: np.ndarray | None = None

    @property
    def activity(self) -> Activity:
        return self.segments[-1].activity

    def stage_index(self) -> np.ndarray:
        """Pipeline stage of each of the job's GPUs (job-local order), computed once."""
        if self._stage is None:
            self._stage = self.layout.stage_of()
        return self._stage

    def durations(self, a: float, b: float) -> np.ndarray:
        total = np.zeros((self.job.pp, NPH))
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.end)
            if hi > lo:
                total += seg.activity.durations(lo, hi)
        return total

    def tier_load(self, a: float, b: float) -> np.ndarray:
        total = np.zeros(len(TIERS))
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.end)
            if hi > lo:
                total += seg.activity.tier_load(lo, hi)
        return total


class Perturbation(Protocol):
    """Something that interrupts a job (a fault, a checkpoint): runs inside the job's SimPy process."""

    def __call__(self, run: Run, track: JobTrack) -> Generator[Any, Any, None]: ...


@dataclass
class Override:
    """A phase forced on a GPU range from `start` to `end` (issue 6: a failed node, a straggler's stall)."""

    first: int
    count: int
    phase: str
    start: float
    end: float = math.inf


class Sink(Protocol):
    def write(self, line: bytes) -> None: ...
    def keyframe(self, line: bytes) -> None: ...


class _ListSink:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    keyframe = write


@dataclass
class RunStats:
    steps: int = 0
    tokens: int = 0
    events: int = 0          # lines after the header
    samples: int = 0
    sim_seconds: float = 0.0


class Run:
    """A scenario simulated over time. Construct (plans every job), then `run(sink)` or `lines()`."""

    def __init__(self, scenario: Scenario, *, duration_s: float | None = None, seed: int | None = None,
                 sample_s: float | None = None, planner: Planner | None = None) -> None:
        self.duration_s = float(duration_s if duration_s is not None else scenario.duration_s)
        self.seed = int(seed if seed is not None else scenario.seed)
        self.sample_s = float(sample_s if sample_s is not None else default_sample_interval(self.duration_s))
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise UserError(f"expected a positive duration, got {self.duration_s}")
        if not (self.sample_s > 0 and math.isfinite(self.sample_s)):
            raise UserError(f"expected a positive sampling interval, got {self.sample_s}")
        if self.duration_s / self.sample_s > MAX_SAMPLES:
            raise UserError(f"{self.duration_s / self.sample_s:,.0f} samples is too many; expected at most "
                            f"{MAX_SAMPLES:,} (raise --sample or lower --duration)")
        self.scenario = scenario
        self.topology = Topology.of(scenario.cluster)
        self.power = PowerModel.of(scenario.cluster)
        self.env = simpy.Environment()
        self.stats = RunStats()
        self.summary: dict[str, Any] = {}          # extra keys for `record --json` (issue 6)
        self.overrides: list[Override] = []
        self._extra: list[Callable[[Run], Generator[Any, Any, None]]] = []
        planner = planner or default_planner
        self.tracks: list[JobTrack] = []
        for i, job in enumerate(scenario.jobs):
            plan = planner(scenario, job)
            compiled = CompiledPlan.of(scenario, job, plan) if plan is not None else None
            self.tracks.append(JobTrack(i, job, Layout(job, self.topology), compiled))
        self.by_name = {t.job.name: t for t in self.tracks}
        steps = sum(self.duration_s / t.plan.step_time_s for t in self.tracks if t.plan is not None)
        if steps > MAX_STEP_EVENTS:
            raise UserError(f"{steps:,.0f} training steps in {self.duration_s:,.0f} s would write one event each; "
                            f"expected at most {MAX_STEP_EVENTS:,} (shorten --duration)")
        self._prepare_sampling()
        self._sink: Sink | None = None
        self._cache: dict[Any, tuple[bytes, bytes, bytes]] = {}

    # ----- hooks for later issues -------------------------------------------------------------------------

    def rng(self, name: str) -> np.random.Generator:
        """An independent random stream per named process (adding a process does not shift the others)."""
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def add_process(self, factory: Callable[[Run], Generator[Any, Any, None]]) -> None:
        """A SimPy process started with the run (before the sampler), e.g. a fault or checkpoint source."""
        self._extra.append(factory)

    def emit(self, kind: str, **fields: Any) -> None:
        """Write a discrete event at the current simulated time (steps that ended before it come first)."""
        now = self.env.now
        self.advance(now)
        self._write({"t": _t(now), "type": kind, **fields})

    def switch(self, track: JobTrack, activity: Activity) -> None:
        """From now on the job does `activity` (steps of the segment that ends are written first)."""
        now = self.env.now
        self.advance(now)
        if track.segments:
            track.segments[-1].end = now
        track.segments.append(Segment(now, math.inf, activity))

    def resume(self, track: JobTrack, step: int | None = None, tokens: int | None = None) -> None:
        """Start (or restart, e.g. from a checkpoint's step) training now."""
        assert track.plan is not None
        self.switch(track, Running(track.plan, self.env.now, track.step if step is None else step,
                                   track.tokens_total if tokens is None else tokens))

    def interrupt(self, track: JobTrack, perturbation: Perturbation) -> None:
        """Run `perturbation(run, track)` inside the job's process (it may switch, wait, emit and resume).

        A perturbation that arrives while another runs (a fault during a checkpoint) replaces it.
        """
        track.process.interrupt(perturbation)

    def override(self, first: int, count: int, phase: str) -> Override:
        """Force a phase on GPUs [first, first + count) from now until `clear_override`."""
        self.advance(self.env.now)
        item = Override(first, count, phase, self.env.now)
        self.overrides.append(item)
        return item

    def clear_override(self, item: Override) -> None:
        item.end = self.env.now

    # ----- the run ----------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Line 1: everything needed to replay the recording with no scenario file and no engine."""
        s = self.scenario.to_dict()
        s["seed"], s["duration_s"] = self.seed, self.duration_s
        s["path"] = s["path"].replace("\\", "/").rsplit("/", 1)[-1]   # no machine-specific directories
        jobs = []
        for t in self.tracks:
            j = t.job
            jobs.append({"name": j.name, "kind": "train", "model": j.model.name, "first_gpu": j.first_gpu,
                         "gpus": j.gpus, "tp": j.tp, "cp": j.cp, "pp": j.pp, "dp": j.dp, "ep": j.ep,
                         "virtual_stages": j.virtual_stages, "rank_order": ["tp", "cp", "pp", "dp"],
                         "tiers": t.layout.tiers(), "fits": t.plan is not None,
                         **({k: t.plan.kpi[k] for k in ("step_time_s", "mfu")} if t.plan else {})})
        return {"type": schema.HEADER, "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
                "generator": "clustertop 0.1.0", "scenario": s, "topology": self.topology.summary(),
                "jobs": jobs, "seed": self.seed, "sample_interval_s": self.sample_s,
                "duration_s": self.duration_s, "sampling": "mean", "tiers": list(TIERS),
                "link_scope": {tier: ("pod" if tier in POD_TIERS else "site") for tier in TIERS},
                "phases": list(PHASES), "phase_util": [float(u) for u in PHASE_UTIL],
                "power": self.power.describe()}

    def run(self, sink: Sink, progress: Callable[[float], None] | None = None) -> RunStats:
        """Write the whole stream to `sink`; `progress(t)` after every sample."""
        self._start(sink, progress)
        env, end = self.env, self.duration_s
        while env.peek() <= end:
            env.step()
        self.stats.sim_seconds = self.duration_s
        return self.stats

    def lines(self) -> Iterator[bytes]:
        """The stream as lines, produced as the simulation advances (for an in-process consumer)."""
        sink = _ListSink()
        self._start(sink, None)
        env, end = self.env, self.duration_s
        while True:
            if sink.lines:
                yield from sink.lines
                sink.lines.clear()
            if env.peek() > end:
                break
            env.step()
        self.stats.sim_seconds = self.duration_s

    def _start(self, sink: Sink, progress: Callable[[float], None] | None) -> None:
        if self._sink is not None:
            raise RuntimeError("a Run runs once")
        self._sink = sink
        sink.write(orjson.dumps(self.header(), option=OPT))
        for track in self.tracks:
            track.process = self.env.process(self._job(track))
        for factory in self._extra:
            self.env.process(factory(self))
        self.env.process(self._sampler(progress))

    def _job(self, track: JobTrack) -> Generator[Any, Any, None]:
        if track.plan is None:
            self.switch(track, Constant("idle", track.job.pp))
            self.emit(schema.JOB_STOP, job=track.job.name, reason="out of memory")
            return
        self.emit(schema.JOB_START, job=track.job.name)
        self.resume(track, 0, 0)
        pending: Perturbation | None = None
        while True:
            try:
                if pending is None:
                    yield self.env.event()      # steady state: nothing to do until a perturbation
                else:
                    current, pending = pending, None
                    yield from current(self, track)
            except simpy.Interrupt as stop:
                pending = stop.cause            # a new perturbation replaces the one in progress

    def _sampler(self, progress: Callable[[float], None] | None) -> Generator[Any, Any, None]:
        self._sample(0.0, INSTANT, 0.0)
        prev = 0.0
        k = 1
        while prev < self.duration_s:
            t = min(k * self.sample_s, self.duration_s)
            if self.duration_s - t < 1e-9 * self.sample_s:
                t = self.duration_s
            yield self.env.timeout(max(t - self.env.now, 0.0))
            self._sample(prev, t, t)
            if progress is not None:
                progress(t)
            prev = t
            k += 1

    # ----- step events ------------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Write every step that ended at or before t, across jobs, in time order."""
        pending: list[tuple[float, int, int, JobTrack, Running]] = []
        for track in self.tracks:
            act = track.segments[-1].activity if track.segments else None
            if not isinstance(act, Running):
                continue
            period = act.plan.step_time_s
            last = math.floor((t - act.t0) / period + 1e-9)
            for k in range(act.emitted + 1, last + 1):
                pending.append((act.t0 + k * period, track.index, k, track, act))
            act.emitted = max(act.emitted, last)
        if len(self.tracks) > 1:
            pending.sort(key=lambda p: (p[0], p[1]))
        write = self._write
        for when, _, k, track, act in pending:
            track.step = act.step0 + k
            kpi = act.plan.kpi
            track.tokens_total = act.tokens0 + k * kpi["tokens"]
            track.last_kpi = kpi
            self.stats.steps += 1
            self.stats.tokens += kpi["tokens"]
            write({"t": _t(when), "type": schema.STEP, "job": track.job.name, "step": track.step, **kpi,
                   "tokens_total": track.tokens_total})

    def _write(self, event: dict[str, Any]) -> None:
        assert self._sink is not None
        self._sink.write(orjson.dumps(event, option=OPT))
        self.stats.events += 1

    # ----- samples ----------------------------------------------------------------------------------------

    def _prepare_sampling(self) -> None:
        """Precompute the GPU blocks (jobs and idle gaps, in GPU order) and per-pod weights of each job."""
        topo = self.topology
        self.blocks: list[tuple[int, int, JobTrack | None]] = []
        pos = 0
        for track in sorted(self.tracks, key=lambda t: t.job.first_gpu):
            j = track.job
            if j.first_gpu > pos:
                self.blocks.append((pos, j.first_gpu - pos, None))
            self.blocks.append((j.first_gpu, j.gpus, track))
            pos = j.first_gpu + j.gpus
        if pos < topo.gpus:
            self.blocks.append((pos, topo.gpus - pos, None))
        self.idle_gpus = topo.gpus - sum(t.job.gpus for t in self.tracks)
        pods = topo.pods
        per_pod = topo.gpus_per_pod
        pod_gpus = np.minimum(per_pod, topo.gpus - np.arange(pods) * per_pod).astype(np.float64)
        self.pod_weights = np.zeros((len(self.tracks), pods))
        for track in self.tracks:
            j = track.job
            for pod in range(j.first_gpu // per_pod, (j.first_gpu + j.gpus - 1) // per_pod + 1):
                lo = max(j.first_gpu, pod * per_pod)
                hi = min(j.first_gpu + j.gpus, (pod + 1) * per_pod)
                self.pod_weights[track.index, pod] = (hi - lo) / pod_gpus[pod]
        self.site_weights = np.array([t.job.gpus / topo.gpus for t in self.tracks])
        self.pod_tier_idx = [TIERS.index(t) for t in POD_TIERS]
        self.site_tier_idx = [i for i, t in enumerate(TIERS) if t not in POD_TIERS]

    def measure(self, a: float, b: float) -> Measurement:
        """Exact means over [a, b] (b > a) of what every stage of every job does; `b - a` tiny: the instant a.

        Issue 6 can use it for the instantaneous site power (min/max, power swings) between samples.
        """
        span = b - a
        watts = self.power.phase_w
        gpu_watts = self.idle_gpus * self.power.idle_w
        stages: dict[int, StageMeans] = {}
        loads = np.zeros((len(self.tracks), len(TIERS)))
        for track in self.tracks:
            d = track.durations(a, b)
            means = StageMeans(d, np.rint(d @ PHASE_UTIL * (100.0 / span)).astype(np.int64), d @ watts / span,
                               d.argmax(axis=1))
            stages[track.index] = means
            j = track.job
            gpu_watts += float(means.power.sum()) * (j.tp * j.cp * j.dp)
            loads[track.index] = track.tier_load(a, b) / span
        overrides = [o for o in self.overrides if o.start < b and o.end > a]
        if overrides:
            gpu_watts = self._override_watts(stages, overrides, a, b)
        return Measurement(a, b, stages, loads, gpu_watts, overrides)

    def site_mw(self, a: float, b: float | None = None) -> float:
        """Site power in MW: the mean over [a, b], or the instantaneous value at a when b is None."""
        m = self.measure(a, a + INSTANT if b is None else b)
        return self.power.site_mw(m.gpu_watts, self.topology.gpus)

    def _sample(self, a: float, b: float, t: float) -> None:
        """Write the sample at time t: exact means over [a, b]."""
        self.advance(t)
        m = self.measure(a, b)
        if m.overrides:
            util_b, power_b, phase_b = self._per_gpu_arrays(m)
        else:
            util_b, power_b, phase_b = self._symmetric_arrays(m.stages)
        self.overrides = [o for o in self.overrides if o.end > b]
        pod = m.loads.T @ self.pod_weights                  # (tiers, pods)
        site = m.loads.T @ self.site_weights                # (tiers,)
        links: dict[str, Any] = {}
        for i, tier in enumerate(TIERS):
            links[tier] = np.round(pod[i], 4).tolist() if tier in POD_TIERS else round(float(site[i]), 4)
        jobs = {}
        for track in self.tracks:
            status: dict[str, Any] = {"running": track.activity.running, "step": track.step,
                                      "tokens_total": track.tokens_total}
            status.update(track.last_kpi)
            jobs[track.job.name] = status
        site_mw = round(self.power.site_mw(m.gpu_watts, self.topology.gpus), 4)
        line = b"".join((b'{"t":', orjson.dumps(_t(t)), b',"type":"sample","util":', util_b, b',"power_w":',
                         power_b, b',"phase":', phase_b, b',"links":', orjson.dumps(links), b',"site_mw":',
                         orjson.dumps(site_mw), b',"jobs":', orjson.dumps(jobs), b"}\n"))
        assert self._sink is not None
        self._sink.keyframe(line)
        self.stats.events += 1
        self.stats.samples += 1
        for track in self.tracks:              # drop segments that can no longer overlap a window
            while len(track.segments) > 1 and track.segments[0].end <= b:
                track.segments.pop(0)

    def _symmetric_arrays(self, stages: dict[int, StageMeans]) -> tuple[bytes, bytes, bytes]:
        """Run-length encode per replica pattern, tiled over the DP replicas; cached as serialized bytes."""
        keys = []
        for _, _, track in self.blocks:
            if track is not None:
                m = stages[track.index]
                keys.append((m.util.tobytes(), m.watts.tobytes(), m.phase.tobytes()))
        key = tuple(keys)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        fields: list[list[tuple[list[Any], list[int]]]] = [[], [], []]
        idle = (0, round(self.power.idle_w), CODE["idle"])
        for _, count, track in self.blocks:
            if track is None:
                for f, value in zip(fields, idle):
                    f.append(([value], [count]))
                continue
            j = track.job
            m = stages[track.index]
            for f, values in zip(fields, (m.util, m.watts, m.phase)):
                v, n = schema.rle_runs(values.tolist(), j.tp * j.cp)
                f.append(schema.rle_tile(v, n, j.dp))
        out = (orjson.dumps(schema.rle_concat(fields[0])), orjson.dumps(schema.rle_concat(fields[1])),
               orjson.dumps(schema.rle_concat(fields[2])))
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[key] = out
        return out

    def _override_rows(self, m_stages: dict[int, StageMeans], o: Override, a: float,
                       b: float) -> tuple[int, np.ndarray] | None:
        """Seconds in each phase over [a, b] of the GPUs of one override: (first GPU, rows (gpus, phases))."""
        lo, hi = max(a, o.start), min(b, o.end)
        first, last = max(o.first, 0), min(o.first + o.count, self.topology.gpus)
        if hi <= lo or last <= first:
            return None
        w = hi - lo
        rows = np.zeros((last - first, NPH))
        rows[:, CODE["idle"]] = (b - a) - w           # GPUs without a job: idle outside the override
        for track in self.tracks:
            j = track.job
            s, e = max(first, j.first_gpu), min(last, j.first_gpu + j.gpus)
            if e > s:
                stage = track.stage_index()[s - j.first_gpu:e - j.first_gpu]
                rows[s - first:e - first] = (m_stages[track.index].durations - track.durations(lo, hi))[stage]
        rows[:, CODE[o.phase]] += w
        np.maximum(rows, 0.0, out=rows)
        return first, rows

    def _override_watts(self, stages: dict[int, StageMeans], overrides: list[Override], a: float,
                        b: float) -> float:
        """Total GPU power with the overrides applied (later overrides win where they overlap)."""
        power = self._base_arrays(stages)[1]
        for o in overrides:
            got = self._override_rows(stages, o, a, b)
            if got is not None:
                first, rows = got
                power[first:first + rows.shape[0]] = rows @ self.power.phase_w / (b - a)
        return float(power.sum())

    def _base_arrays(self, stages: dict[int, StageMeans]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-GPU (util %, power W, phase) broadcast from the stages: the per-GPU path's starting point."""
        n = self.topology.gpus
        util = np.zeros(n, dtype=np.int64)
        power = np.full(n, self.power.idle_w)
        phase = np.full(n, CODE["idle"], dtype=np.uint8)
        for track in self.tracks:
            j = track.job
            m = stages[track.index]
            stage = track.stage_index()
            sl = slice(j.first_gpu, j.first_gpu + j.gpus)
            util[sl], power[sl], phase[sl] = m.util[stage], m.power[stage], m.phase[stage]
        return util, power, phase

    def _per_gpu_arrays(self, m: Measurement) -> tuple[bytes, bytes, bytes]:
        """Per-GPU numpy path when overrides break the symmetry: exact means per GPU in their ranges."""
        util, power, phase = self._base_arrays(m.stages)
        span = m.b - m.a
        for o in m.overrides:
            got = self._override_rows(m.stages, o, m.a, m.b)
            if got is None:
                continue
            first, rows = got
            sl = slice(first, first + rows.shape[0])
            util[sl] = np.rint(rows @ PHASE_UTIL * (100.0 / span))
            power[sl] = rows @ self.power.phase_w / span
            phase[sl] = rows.argmax(axis=1)
        watts = np.rint(power).astype(np.int64)
        return (orjson.dumps(schema.rle_encode(util)), orjson.dumps(schema.rle_encode(watts)),
                orjson.dumps(schema.rle_encode(phase)))


@dataclass
class StageMeans:
    """One job over one window: per stage, seconds per phase and the means derived from them."""

    durations: np.ndarray     # (pp, phases) seconds
    util: np.ndarray          # (pp,) integer percent
    power: np.ndarray         # (pp,) W (float)
    phase: np.ndarray         # (pp,) dominant phase code

    @property
    def watts(self) -> np.ndarray:
        return np.rint(self.power).astype(np.int64)


@dataclass
class Measurement:
    """Everything a sample needs over [a, b]: per-job stage means, tier loads, GPU power, active overrides."""

    a: float
    b: float
    stages: dict[int, StageMeans]
    loads: np.ndarray          # (jobs, tiers) mean load 0..1
    gpu_watts: float
    overrides: list[Override]


def _t(t: float) -> float:
    """Simulated times on the wire: microsecond resolution."""
    return float(round(t, 6))
