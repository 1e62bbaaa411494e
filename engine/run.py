"""The engine run: a SimPy simulation of a scenario over simulated time, producing the event stream.

Each job's time is a sequence of segments, each with an activity (engine/activity.py): `Running` (the job's
StepPlan repeated from a start time: a periodic, piecewise-constant timeline per pipeline stage) or `Constant`
(every GPU of the job in one phase: idle, failed, checkpoint). Nothing happens between perturbations that is
not already in the plan, so the run fast-forwards: SimPy only wakes up for samples and perturbations (job
start, faults, checkpoints, restarts, maintenance, the day's clock changes), and step events are generated in
closed form (step k of a segment ends at t0 + k * step_time_s) right before any later line is written. Each
training job is driven by engine/faults.py's JobDriver (checkpoints, interruptions, restarts).

Sampling semantics: the sample at time t carries the exact mean over the sample interval (t - interval, t]
of every per-GPU quantity: utilization and power are time averages, and the phase is the one the GPU spent
most of the interval in. Means are integrals of piecewise-constant functions, computed in closed form (whole
steps times the per-step integral, plus prefix integrals looked up in a cumulative table): no rounding to a
time grid and no re-simulation of steps. The sample at t = 0 is the instantaneous state at the start.

Symmetry: all DP replicas of a stage follow the same timeline, so a sample is computed per stage (a (pp,
phases) matrix of durations per job) and broadcast over "unit runs" (one per stage per replica, tp * cp GPUs);
only GPUs that break the symmetry are computed apart and spliced into the runs: stragglers (below) and GPUs
under an override (a failed node). Encoded arrays that did not change since an earlier sample are reused.

Stragglers and thermals: every GPU has a speed factor (lognormal around 1, plus a small fraction of markedly slow
GPUs; scenario [variability]) drawn once per seed. Synchronous training waits for the slowest GPU: a job's step
is its plan plus a wait of (1 / slowest speed - 1) of the step at the end of the step, in which every GPU waits
on the data-parallel reduction ("dp") except the slow ones, which spend their share of it computing. GPUs whose
extra computing changes their utilization by at least one percentage point (the stream's resolution), and the
slowest GPU of each job, are drawn on their own; the others follow the nominal timeline. On top, the day's
temperatures lower GPU clocks: the step stretches by a factor whose peak-to-trough swing is the scenario's
diurnal_amplitude (a cosine over 24 h, slowest at 14:00; a run starts at midnight), applied per 15 minutes at a
step boundary.

Power: besides the exact means of the samples, the run follows the site's load level (each running job at its
step-mean power, everything else at its phase's power) and its instantaneous extremes (a step's highest and
lowest draw: all stages computing, all waiting together). When the level jumps by more than the threshold of
engine/power.py (a checkpoint, a fault, a restart), a `power_swing` event says from and to what.

Hooks (docs/events.md, "Extending the run"): `Run.emit` (any discrete event, time-ordered), `Run.switch` /
`Run.resume` (change a job's activity at the current time), `Run.interrupt` (run a Perturbation, a Fault or a
planned maintenance inside the job's SimPy process), `Run.override` (a phase for a GPU range, e.g. a failed
node), `Run.rng` (an independent random stream per named process), `Run.add_process`, `Run.site_mw` /
`Run.measure` (exact power and state over any window or at an instant), `Run.summary` (extra keys for
`record --json`), `Run.inject_fault` and `Run.advance_to` (live control, engine/control.py).
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

from . import faults, schema
from .activity import NPH, WAIT, Activity, CompiledPlan, Constant, Running, Segment
from .errors import UserError
from .layout import Layout
from .phases import CODE, PHASES
from .power import PowerModel
from .scenario import Job, Scenario
from .timeline import StepPlan
from .topology import TIERS, Topology

Planner = Callable[[Scenario, Job], "StepPlan | None"]

# Utilization (0..1) of a GPU in each phase: the share of its time it does useful work. Memory-bound phases
# keep the GPU busy at a low arithmetic rate.
PHASE_UTIL = np.zeros(NPH, dtype=np.float64)
PHASE_UTIL[CODE["compute"]] = 1.0
PHASE_UTIL[CODE["optimizer"]] = 0.5
PHASE_UTIL[CODE["memory"]] = 0.5

POD_TIERS = ("node", "leaf", "spine")      # tiers inside a pod: one load per pod; core and campus: one load
TARGET_SAMPLES = 5000
TARGET_GPU_SAMPLES = 1e9
NICE_INTERVALS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
                  3600.0, 7200.0, 21600.0, 86400.0)
MAX_SAMPLES = 10_000_000
MAX_STEP_EVENTS = 20_000_000        # ~4 GB of JSON Lines: refuse rather than fill a disk
INSTANT = 1e-9            # the window of the t = 0 sample (its instantaneous state)
OPT = orjson.OPT_APPEND_NEWLINE
OPT_ARRAYS = orjson.OPT_SERIALIZE_NUMPY

DAY = 86400.0
HOTTEST_S = 14 * 3600.0   # GPU clocks are lowest at the day's temperature peak, mid-afternoon (runs start at 00:00)
RETUNE_S = 900.0          # the day's clock factor is applied per 15-minute window, at a step boundary
VISIBLE_UTIL = 0.01       # a straggler is drawn on its own when it computes >= 1 point of utilization more
COMPUTE = CODE["compute"]


def default_sample_interval(duration_s: float, gpus: int = 0) -> float:
    """A round interval giving at most about 5,000 samples (0.2 s for 10 min, 5 s for 6 h, 20 min for 54 d) and
    at most about TARGET_GPU_SAMPLES per-GPU values in all, so a site of 500K GPUs stays quick to record and
    replay (2 s for an hour of 433K GPUs)."""
    want = max(duration_s / TARGET_SAMPLES, duration_s * gpus / TARGET_GPU_SAMPLES)
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


@dataclass
class Stragglers:
    """A job's GPUs drawn on their own: slow enough that their extra computing shows."""

    gpus: np.ndarray          # global GPU indices, sorted
    stage: np.ndarray         # their pipeline stages
    phi: np.ndarray           # share of the job's wait for the slowest GPU each spends computing (0..1]
    speed: float              # the job's speed: its slowest GPU's factor (1 = nominal)


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
    driver: faults.JobDriver | None = None
    productive_s: float = 0.0                # time of the steps completed (since the last restart's checkpoint)
    tuned_at: float = 0.0                    # when the day's clock factor was last applied
    factor: float = 1.0                      # that factor
    variants: dict[float, CompiledPlan] = field(default_factory=dict)   # the stretched step at each factor
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

    def extra(self, a: float, b: float) -> float:
        total = 0.0
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.end)
            if hi > lo:
                total += seg.activity.extra(lo, hi)
        return total


class Perturbation(Protocol):
    """Something that interrupts a job (a fault, a checkpoint): runs inside the job's SimPy process."""

    def __call__(self, run: Run, track: JobTrack) -> Generator[Any, Any, None]: ...


@dataclass
class Override:
    """A phase forced on a GPU range from `start` to `end` (a failed node, a failed link's GPU)."""

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
        self.sample_s = float(sample_s if sample_s is not None
                              else default_sample_interval(self.duration_s, scenario.cluster.gpus))
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
        self.summary: dict[str, Any] = {}          # extra keys for `record --json`
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
        self.speeds = self._draw_speeds()
        for track in self.tracks:
            if track.plan is not None:
                self._stretch(track)
        self.spares = faults.SparePool(scenario.faults.spare_nodes, scenario.faults.repair_s)
        self._prepare_sampling()
        self._sink: Sink | None = None
        self._cache: dict[Any, tuple[bytes, bytes, bytes]] = {}
        self._level_mw: float | None = None       # the site's load level (power swings)
        self.site_min_mw = math.inf               # instantaneous extremes of site power over the run
        self.site_max_mw = -math.inf
        self._power_pending = False

    # ----- hooks ------------------------------------------------------------------------------------------

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
        if isinstance(activity, Running):      # a restart rolls the counters back to its checkpoint at once
            track.step, track.tokens_total = activity.step0, activity.tokens0
        self._power_changed()

    def constant(self, track: JobTrack, phase: str) -> Constant:
        """An activity with all of the job's GPUs in one phase."""
        return Constant(phase, track.job.pp)

    def resume(self, track: JobTrack, step: int | None = None, tokens: int | None = None) -> None:
        """Start (or restart, e.g. from a checkpoint's step) training now, at the day's clock speed."""
        assert track.stretched is not None
        self.advance(self.env.now)            # the step counter is current
        self.switch(track, Running(self._plan_now(track), self.env.now, track.step if step is None else step,
                                   track.tokens_total if tokens is None else tokens))

    def interrupt(self, track: JobTrack, perturbation: Any) -> None:
        """Interrupt the job's process with a Perturbation (run inside it: it may switch, wait, emit and resume),
        an engine.faults.Fault, or engine.faults.PLANNED (maintenance).

        A perturbation that arrives while another runs (a fault during a checkpoint) replaces it.
        """
        track.process.interrupt(perturbation)

    def override(self, first: int, count: int, phase: str) -> Override:
        """Force a phase on GPUs [first, first + count) from now until `clear_override`."""
        self.advance(self.env.now)
        item = Override(first, count, phase, self.env.now)
        self.overrides.append(item)
        self._power_changed()
        return item

    def clear_override(self, item: Override) -> None:
        item.end = self.env.now
        self._power_changed()

    def inject_fault(self, gpu: int, cause: str = "Faulty GPU") -> None:
        """A fault at one GPU now (its node or link, by cause): the job on it stops and restarts from its last
        checkpoint; a GPU with no job has its node out for repair."""
        fault = faults.fault_at(self.env.now, gpu, cause, self.topology.gpus_per_node, injected=True)
        for track in self.tracks:
            j = track.job
            if j.first_gpu <= gpu < j.first_gpu + j.gpus and track.driver is not None:
                self.interrupt(track, fault)
                return
        self.env.process(self._idle_fault(fault))

    # ----- stragglers and the day's clocks ----------------------------------------------------------------

    def _draw_speeds(self) -> np.ndarray | None:
        """Every GPU's speed factor, drawn once per seed: lognormal around 1, times slow_gpu_factor for a few."""
        v = self.scenario.variability
        if v.straggler_sigma <= 0 and v.slow_gpu_fraction <= 0:
            return None
        rng = self.rng("variability.speed")
        n = self.topology.gpus
        speeds = np.exp(rng.standard_normal(n) * v.straggler_sigma) if v.straggler_sigma > 0 else np.ones(n)
        if v.slow_gpu_fraction > 0:
            speeds[rng.random(n) < v.slow_gpu_fraction] *= v.slow_gpu_factor
        return speeds

    def _stretch(self, track: JobTrack) -> None:
        """The job's step with the wait for its slowest GPU, and the GPUs drawn on their own."""
        assert track.plan is not None
        j, nominal = track.job, track.plan
        step = nominal.step_time_s
        slowest = 1.0
        speeds = None
        if self.speeds is not None:
            speeds = self.speeds[j.first_gpu:j.first_gpu + j.gpus]
            slowest = min(1.0, float(speeds.min()))      # the cost model's step is that of a nominal GPU
        k = 1.0 / slowest
        track.stretched = CompiledPlan.of(self.scenario, j, nominal.plan, (k - 1.0) * step, self.power.phase_w)
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

    def diurnal(self, t: float) -> float:
        """How much longer a step takes at time t than at night: 1 / throughput over the day."""
        amplitude = self.scenario.variability.diurnal_amplitude
        if amplitude <= 0:
            return 1.0
        mid = (math.floor(t / RETUNE_S) + 0.5) * RETUNE_S
        return 1.0 / (1.0 - amplitude / 2 * (1.0 + math.cos(2 * math.pi * (mid - HOTTEST_S) / DAY)))

    def _plan_now(self, track: JobTrack) -> CompiledPlan:
        assert track.stretched is not None
        track.tuned_at = self.env.now
        track.factor = factor = self.diurnal(self.env.now)
        plan = track.variants.get(factor)
        if plan is None:
            plan = track.variants[factor] = track.stretched.scaled(factor)   # one per 15 minutes of the day
        return plan

    def next_retune(self, track: JobTrack) -> float:
        """When the day's clock factor next changes for a job (inf: never)."""
        if self.scenario.variability.diurnal_amplitude <= 0:
            return math.inf
        return (math.floor(track.tuned_at / RETUNE_S + 1e-9) + 1) * RETUNE_S

    def retune(self, track: JobTrack) -> None:
        """At a step boundary: continue training at the current clock factor."""
        act = track.activity
        if not isinstance(act, Running):
            return
        factor = self.diurnal(self.env.now)
        track.tuned_at = self.env.now
        if factor != track.factor:
            self.resume(track)

    # ----- the run ----------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Line 1: everything needed to replay the recording with no scenario file and no engine."""
        s = self.scenario.to_dict()
        s["seed"], s["duration_s"] = self.seed, self.duration_s
        s["path"] = s["path"].replace("\\", "/").rsplit("/", 1)[-1]   # no machine-specific directories
        jobs = []
        for t in self.tracks:
            j = t.job
            entry = {"name": j.name, "kind": "train", "model": j.model.name, "first_gpu": j.first_gpu,
                     "gpus": j.gpus, "tp": j.tp, "cp": j.cp, "pp": j.pp, "dp": j.dp, "ep": j.ep,
                     "virtual_stages": j.virtual_stages, "rank_order": ["tp", "cp", "pp", "dp"],
                     "tiers": t.layout.tiers(), "fits": t.plan is not None,
                     **({k: t.plan.kpi[k] for k in ("step_time_s", "mfu")} if t.plan else {})}
            if t.plan is not None:
                ck = faults.checkpoint_plan(self.scenario, j)
                entry["checkpoint"] = {"mode": ck.mode, "gb": round(ck.state_bytes / 1e9, 1),
                                       "write_s": round(ck.write_s, 3), "stall_s": round(ck.stall_s, 3),
                                       "interval_s": round(ck.interval_s, 1) if math.isfinite(ck.interval_s)
                                       else None}
                st = t.stragglers
                entry["speed"] = round(st.speed, 4) if st else 1.0
                entry["slow_gpus"] = st.gpus.tolist() if st else []
            jobs.append(entry)
        return {"type": schema.HEADER, "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
                "generator": "clustertop 0.1.0", "scenario": s, "topology": self.topology.summary(),
                "jobs": jobs, "seed": self.seed, "sample_interval_s": self.sample_s,
                "duration_s": self.duration_s, "sampling": "mean", "tiers": list(TIERS),
                "link_scope": {tier: ("pod" if tier in POD_TIERS else "site") for tier in TIERS},
                "phases": list(PHASES), "phase_util": [float(u) for u in PHASE_UTIL],
                "power": self.power.describe()}

    def run(self, sink: Sink, progress: Callable[[float], None] | None = None) -> RunStats:
        """Write the whole stream to `sink`; `progress(t)` after every sample."""
        self.start(sink, progress)
        env, end = self.env, self.duration_s
        while env.peek() <= end:
            env.step()
        self.finish()
        return self.stats

    def lines(self) -> Iterator[bytes]:
        """The stream as lines, produced as the simulation advances (for an in-process consumer)."""
        sink = _ListSink()
        self.start(sink, None)
        env, end = self.env, self.duration_s
        while True:
            if sink.lines:
                yield from sink.lines
                sink.lines.clear()
            if env.peek() > end:
                break
            env.step()
        self.finish()

    def start(self, sink: Sink, progress: Callable[[float], None] | None = None) -> None:
        """Write the header and start every process (then step `env`, or call `advance_to`, and `finish`)."""
        if self._sink is not None:
            raise RuntimeError("a Run runs once")
        self._sink = sink
        sink.write(orjson.dumps(self.header(), option=OPT))
        env, f = self.env, self.scenario.faults
        for track in self.tracks:
            track.process = env.process(self._job(track))
        for track in self.tracks:
            if track.plan is not None and f.enabled:
                env.process(self._fault_source(track))
                env.process(self._planned_source(track))
        if f.inject:
            env.process(self._injections())
        for factory in self._extra:
            env.process(factory(self))
        env.process(self._sampler(progress))

    def advance_to(self, t: float) -> None:
        """Simulate up to time t (at most the duration) and write every line up to it (paced live runs)."""
        env = self.env
        t = min(t, self.duration_s)
        if t > env.now:
            env.run(until=t)
        while env.peek() <= env.now:          # what is due now (an injected fault while paused)
            env.step()
        self.advance(env.now)

    def finish(self) -> None:
        """After the last event: the summary (`record --json`)."""
        end = self.duration_s
        while self.env.peek() <= end:
            self.env.step()
        self.stats.sim_seconds = end
        drivers = [t for t in self.tracks if t.driver is not None]
        weight = sum(t.job.gpus for t in drivers)
        kept = sum(t.job.gpus * t.driver.kept_productive_s() for t in drivers if t.driver)
        self.summary.update({
            "interruptions_unexpected": sum(t.driver.interruptions for t in drivers if t.driver),
            "interruptions_planned": sum(t.driver.planned for t in drivers if t.driver),
            "effective_training_time": round(kept / (weight * end), 4) if weight else None,
            "site_mw_min": round(self.site_min_mw, 4) if math.isfinite(self.site_min_mw) else None,
            "site_mw_max": round(self.site_max_mw, 4) if math.isfinite(self.site_max_mw) else None,
            "checkpoints": sum(t.driver.checkpoints for t in drivers if t.driver)})

    def _job(self, track: JobTrack) -> Generator[Any, Any, None]:
        if track.plan is None:
            self.switch(track, Constant("idle", track.job.pp))
            self.emit(schema.JOB_STOP, job=track.job.name, reason="out of memory")
            return
        track.driver = faults.JobDriver(self, track)
        yield from track.driver.process()

    def _fault_source(self, track: JobTrack) -> Generator[Any, Any, None]:
        """The job's unexpected faults (Table 5 causes), drawn for the whole run and delivered in time."""
        j, f = track.job, self.scenario.faults
        for fault in faults.schedule(j.first_gpu, j.gpus, self.topology.gpus_per_node, 0.0, self.duration_s,
                                     self.seed, f.rate_scale, stream=f"{j.name}/"):
            yield self.env.timeout(max(fault.t - self.env.now, 0.0))
            self.interrupt(track, fault)

    def _planned_source(self, track: JobTrack) -> Generator[Any, Any, None]:
        f = self.scenario.faults
        for t in faults.planned(0.0, self.duration_s, f.planned_per_day, self.seed, track.job.name):
            yield self.env.timeout(max(t - self.env.now, 0.0))
            self.interrupt(track, faults.PLANNED)

    def _injections(self) -> Generator[Any, Any, None]:
        """The scenario's [[faults.inject]] entries."""
        for inj in self.scenario.faults.inject:
            if inj.at_s > self.duration_s:
                break
            yield self.env.timeout(max(inj.at_s - self.env.now, 0.0))
            self.inject_fault(inj.gpu, inj.cause)

    def _idle_fault(self, fault: faults.Fault) -> Generator[Any, Any, None]:
        """A fault on GPUs that run no job: nothing stops, the hardware is out until repaired."""
        self.emit(schema.FAULT, **faults.fault_fields(self, fault))
        gpn = self.topology.gpus_per_node
        if fault.scope == "job":
            return
        item = (self.override(fault.gpu // gpn * gpn, gpn, "failed") if fault.scope == "node"
                else self.override(fault.gpu, 1, "failed"))
        yield self.env.timeout(self.scenario.faults.repair_s)
        self.clear_override(item)

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
            track.productive_s += act.plan.step_time_s
            track.last_kpi = kpi
            self.stats.steps += 1
            self.stats.tokens += kpi["tokens"]
            write({"t": _t(when), "type": schema.STEP, "job": track.job.name, "step": track.step, **kpi,
                   "tokens_total": track.tokens_total})

    def _write(self, event: dict[str, Any]) -> None:
        assert self._sink is not None
        self._sink.write(orjson.dumps(event, option=OPT))
        self.stats.events += 1

    # ----- the site's load: levels, extremes, power swings --------------------------------------------------

    def _power_changed(self) -> None:
        """Something changed what GPUs draw: look at the site once everything at this instant is done."""
        if self._power_pending or self._sink is None:
            return
        self._power_pending = True
        self.env.timeout(0).callbacks.append(self._check_power)

    def _check_power(self, _event: Any = None) -> None:
        self._power_pending = False
        level, lo, hi = self._site_power()
        self.site_min_mw = min(self.site_min_mw, lo)
        self.site_max_mw = max(self.site_max_mw, hi)
        prev, self._level_mw = self._level_mw, level
        if prev is not None and abs(level - prev) > self.power.swing_threshold_mw(prev):
            fields: dict[str, Any] = {"from_mw": round(prev, 3), "to_mw": round(level, 3),
                                      "delta_mw": round(level - prev, 3)}
            if self.power.over_budget(level):
                fields["over_budget"] = True
            self.emit(schema.POWER_SWING, **fields)

    def _job_watts(self, track: JobTrack) -> tuple[float, float, float]:
        """GPU watts of one job now: its level (a running job's step mean), lowest and highest instants."""
        act = track.segments[-1].activity if track.segments else None
        w = self.power.phase_w
        if isinstance(act, Running):
            reps = track.job.dp
            level, lo, hi = (x * reps for x in act.plan.watts)
            st = track.stragglers
            if st is not None and act.plan.extra is not None:
                share = float(act.plan.extra.full[0, 0]) / act.plan.step_time_s
                level += float(st.phi.sum()) * share * (w[COMPUTE] - w[WAIT])
            return level, lo, hi
        if isinstance(act, Constant):
            x = float(w[CODE[act.phase]]) * track.job.gpus
            return x, x, x
        x = self.power.idle_w * track.job.gpus
        return x, x, x

    def _site_power(self) -> tuple[float, float, float]:
        """Site MW now: (level, lowest, highest), with the overrides in force."""
        w = self.power.phase_w
        idle = self.power.idle_w
        level = lo = hi = self.idle_gpus * idle
        per_gpu: list[tuple[int, int, float]] = []
        for track in self.tracks:
            a, b, c = self._job_watts(track)
            level, lo, hi = level + a, lo + b, hi + c
            per_gpu.append((track.job.first_gpu, track.job.gpus, a / track.job.gpus))
        now = self.env.now
        for o in self.overrides:
            if not o.start <= now < o.end:
                continue
            covered = 0
            delta = 0.0
            for first, count, mean in per_gpu:
                n = max(0, min(o.first + o.count, first + count) - max(o.first, first))
                covered += n
                delta += n * (w[CODE[o.phase]] - mean)
            delta += (o.count - covered) * (w[CODE[o.phase]] - idle)
            level, lo, hi = level + delta, lo + delta, hi + delta
        n = self.topology.gpus
        return (float(self.power.site_mw(level, n)), float(self.power.site_mw(lo, n)),
                float(self.power.site_mw(hi, n)))

    # ----- samples ----------------------------------------------------------------------------------------

    def _prepare_sampling(self) -> None:
        """Precompute the GPU blocks, the unit runs (a stage of a replica, or an idle gap) and pod weights."""
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
        # Rows: one per (job, stage), in track order, then the idle row. A unit run is tp*cp GPUs of one stage of
        # one replica (or an idle gap): GPUs that share every value unless something breaks the symmetry.
        self.row_offset = np.cumsum([0] + [t.job.pp for t in self.tracks])
        self.idle_row = int(self.row_offset[-1])
        starts: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for first, count, track in self.blocks:
            if track is None:
                starts.append(np.array([first]))
                rows.append(np.array([self.idle_row]))
                continue
            j = track.job
            units = np.arange(j.pp * j.dp)
            starts.append(first + units * (j.tp * j.cp))
            rows.append(self.row_offset[track.index] + units % j.pp)
        self.unit_starts = np.concatenate(starts).astype(np.int64)
        self.unit_rows = np.concatenate(rows).astype(np.int64)
        slow = [t.stragglers.gpus for t in self.tracks if t.stragglers is not None]
        self.slow_gpus = np.concatenate(slow) if slow else np.zeros(0, np.int64)
        self.slow_order = np.argsort(self.slow_gpus, kind="stable")
        self.static_split = self._split(self.slow_gpus[self.slow_order])
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

    def _split(self, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit runs with each of `gpus` (sorted, unique) a run of its own: (starts, rows, index of each GPU)."""
        if gpus.size == 0:
            return self.unit_starts, self.unit_rows, np.zeros(0, np.int64)
        cuts = np.concatenate([gpus, gpus + 1])
        cuts = np.unique(cuts[cuts < self.topology.gpus])       # few: the GPUs that break the symmetry
        units = self.unit_starts                                  # many, sorted: merge, do not re-sort
        at = np.searchsorted(units, cuts)
        new = cuts[(at >= units.size) | (units[np.minimum(at, units.size - 1)] != cuts)]
        starts = np.insert(units, np.searchsorted(units, new), new)
        rows = self.unit_rows[np.searchsorted(self.unit_starts, starts, side="right") - 1]
        return starts, rows, np.searchsorted(starts, gpus)

    def measure(self, a: float, b: float) -> Measurement:
        """Exact means over [a, b] (b > a) of what every stage of every job does; `b - a` tiny: the instant a."""
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
        patch = self._patch(stages, overrides, a, b)
        if patch is not None:
            gpu_watts += float(patch.power.sum() - self._row_values(stages)[1][patch.rows].sum())
        return Measurement(a, b, stages, loads, gpu_watts, overrides, patch)

    def site_mw(self, a: float, b: float | None = None) -> float:
        """Site power in MW: the mean over [a, b], or the instantaneous value at a when b is None."""
        m = self.measure(a, a + INSTANT if b is None else b)
        return self.power.site_mw(m.gpu_watts, self.topology.gpus)

    def _patch(self, stages: dict[int, StageMeans], overrides: list[Override], a: float,
               b: float) -> Patch | None:
        """Per-GPU means of the GPUs that break the symmetry: stragglers, then overrides (later ones win)."""
        pos: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for track in self.tracks:
            st = track.stragglers
            if st is None:
                continue
            r = stages[track.index].durations[st.stage]
            extra = track.extra(a, b)
            if extra > 0:
                shift = st.phi * extra
                r[:, COMPUTE] += shift
                r[:, WAIT] = np.maximum(r[:, WAIT] - shift, 0.0)
            pos.append(st.gpus)
            rows.append(r)
        static = True
        for o in overrides:
            got = self._override_rows(stages, o, a, b)
            if got is not None:
                first, r = got
                pos.append(np.arange(first, first + r.shape[0]))
                rows.append(r)
                static = False
        if not pos:
            return None
        p, r = np.concatenate(pos), np.concatenate(rows)
        if static:
            p, r = p[self.slow_order], r[self.slow_order]
        else:
            last = p.size - 1 - np.unique(p[::-1], return_index=True)[1]      # the last row of each GPU wins
            p, r = p[last], r[last]
        span = b - a
        return Patch(p, np.rint(r @ PHASE_UTIL * (100.0 / span)).astype(np.int64), r @ self.power.phase_w / span,
                     r.argmax(axis=1), static,
                     self.unit_rows[np.searchsorted(self.unit_starts, p, side="right") - 1])

    def _row_values(self, stages: dict[int, StageMeans]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(util %, power W, phase) per row: the stages of every job in track order, then the idle row."""
        util = np.concatenate([stages[t.index].util for t in self.tracks] + [np.zeros(1, np.int64)])
        power = np.concatenate([stages[t.index].power for t in self.tracks] + [np.array([self.power.idle_w])])
        phase = np.concatenate([stages[t.index].phase for t in self.tracks] + [np.array([CODE["idle"]])])
        return util, power, phase

    def _sample(self, a: float, b: float, t: float) -> None:
        """Write the sample at time t: exact means over [a, b]."""
        self.advance(t)
        m = self.measure(a, b)
        util_b, power_b, phase_b = self._arrays(m)
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
            d = track.driver
            if d is not None:
                elapsed = t - d.started
                status["effective_training_time"] = round(min(1.0, d.kept_productive_s() / elapsed), 4) \
                    if elapsed > 0 else 0.0
                status["interruptions"] = d.interruptions + d.planned
                status["tokens_lost"] = d.tokens_lost
            jobs[track.job.name] = status
        site_mw = round(self.power.site_mw(m.gpu_watts, self.topology.gpus), 4)
        budget = b',"over_budget":true' if self.power.over_budget(site_mw) else b""
        line = b"".join((b'{"t":', orjson.dumps(_t(t)), b',"type":"sample","util":', util_b, b',"power_w":',
                         power_b, b',"phase":', phase_b, b',"links":', orjson.dumps(links), b',"site_mw":',
                         orjson.dumps(site_mw), budget, b',"jobs":', orjson.dumps(jobs), b"}\n"))
        assert self._sink is not None
        self._sink.keyframe(line)
        self.stats.events += 1
        self.stats.samples += 1
        for track in self.tracks:              # drop segments that can no longer overlap a window
            while len(track.segments) > 1 and track.segments[0].end <= b:
                track.segments.pop(0)

    def _arrays(self, m: Measurement) -> tuple[bytes, bytes, bytes]:
        """The per-GPU arrays, run-length encoded: stage values broadcast over the unit runs, the patch spliced
        in, equal neighbours merged. Cached as serialized bytes for samples that come out the same."""
        key: list[bytes] = []
        for track in self.tracks:
            s = m.stages[track.index]
            key += (s.util.tobytes(), s.watts.tobytes(), s.phase.tobytes())
        p = m.patch
        if p is not None:
            key += (p.gpus.tobytes(), p.util.tobytes(), p.watts.tobytes(), p.phase.tobytes())
        cache_key = tuple(key)
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        util, power, phase = self._row_values(m.stages)
        row_values = (util, np.rint(power).astype(np.int64), phase)
        if p is None:
            starts, rows, at = self.unit_starts, self.unit_rows, None
        elif p.static:
            starts, rows, at = self.static_split
        else:
            starts, rows, at = self._split(p.gpus)
        patched = (p.util, p.watts, p.phase) if p is not None else (None, None, None)
        n = self.topology.gpus
        out = []
        for values, extra in zip(row_values, patched):
            v = values[rows]
            if at is not None and extra is not None:
                v[at] = extra
            keep = np.empty(v.size, dtype=bool)
            keep[0] = True
            np.not_equal(v[1:], v[:-1], out=keep[1:])
            first = starts[keep]
            out.append(orjson.dumps({"v": v[keep], "n": np.diff(first, append=n)}, option=OPT_ARRAYS))
        result = (out[0], out[1], out[2])
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[cache_key] = result
        return result

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
class Patch:
    """Per-GPU means of the GPUs computed apart (stragglers, overrides), sorted by GPU."""

    gpus: np.ndarray          # GPU indices, sorted, unique
    util: np.ndarray          # integer percent
    power: np.ndarray         # W (float)
    phase: np.ndarray         # dominant phase code
    static: bool              # stragglers only (their GPUs are the precomputed ones)
    rows: np.ndarray          # the row each GPU would follow without the patch

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
    patch: Patch | None = None


def _t(t: float) -> float:
    """Simulated times on the wire: microsecond resolution."""
    return float(round(t, 6))
