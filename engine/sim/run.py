"""The engine run: a SimPy simulation of a scenario over simulated time, producing the event stream.

Each job's time is a sequence of segments, each with an activity (engine/sim/activity.py): `Running` (the job's
StepPlan repeated from a start time: a periodic, piecewise-constant timeline per pipeline stage) or `Constant`
(every GPU of the job in one phase: idle, failed, checkpoint). Nothing happens between perturbations that is
not already in the plan, so the run fast-forwards: SimPy only wakes up for samples and perturbations (job
start, faults, checkpoints, restarts, maintenance, the day's clock changes), and step events are generated in
closed form (step k of a segment ends at t0 + k * step_time_s) right before any later line is written. Each
training job is driven by engine/sim/lifecycle.py's JobDriver (checkpoints, interruptions, restarts).

The parts of a run, each in its module: the samples (engine/sim/sampling.py: exact means per sample interval,
computed per stage and broadcast over the replicas), stragglers and the day's clocks (engine/sim/variability.py),
and the site's load level and power swings (engine/sim/site_power.py).

Hooks (docs/events.md, "Extending the run"): `Run.emit` (any discrete event, time-ordered), `Run.switch` /
`Run.resume` (change a job's activity at the current time), `Run.interrupt` (run a Perturbation, a Fault or a
planned maintenance inside the job's SimPy process), `Run.override` (a phase for a GPU range, e.g. a failed
node), `Run.rng` (an independent random stream per named process), `Run.add_process`, `Run.site_mw` /
`Run.measure` (exact power and state over any window or at an instant), `Run.summary` (extra keys for
`record --json`), `Run.inject_fault` and `Run.advance_to` (live control, engine/sim/control.py).
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

from ..config.errors import UserError
from ..config.geometry import RANK_ORDER, TIERS, Geometry, JobGeometry
from ..config.phases import PHASES
from ..config.scenario import Job, Scenario
from ..model import economics, estimate, scaleup
from ..model.checkpoint import checkpoint_plan
from ..model.contention import Sharing
from ..model.estimate import estimate_job
from ..model.layout import Layout
from ..model.plan import StepPlan
from ..model.power import PowerModel
from ..stream import schema
from ..stream.version import generator
from . import faults, variability
from .activity import NPH, Activity, CompiledPlan, Constant, Running, Segment
from .lifecycle import PLANNED, JobDriver, SparePool
from .sampling import (
    INSTANT,
    LINK_SCOPE,
    MAX_SAMPLES,
    PHASE_UTIL,
    Measurement,
    Sampler,
    default_sample_interval,
    wire_time,
)
from .sharing import SharedTiers
from .site_power import SitePower
from .variability import Stragglers

Planner = Callable[[Scenario, Job], "StepPlan | None"]

MAX_STEP_EVENTS = 20_000_000        # ~4 GB of JSON Lines: refuse rather than fill a disk
SAMPLE_BYTES_PER_RUN = 20          # a run in the three per-GPU arrays, at most: "100,700,1," + three counts (15 measured)
SAMPLE_BYTES_PER_LOAD = 8          # a link load, "0.1234,"
MAX_FAULTS = 5_000                  # interruptions a run expects: each is simulated (~3 ms: detection, restart,
#                                     lost work), so 5,000 take ~15 s; the flagship's 54 days expect ~470
OPT = orjson.OPT_APPEND_NEWLINE


class ModelPlanner:
    """The cost model's plan for a job (None when it does not fit in memory). A planner with a `sharing` method
    also solves several jobs with each other's traffic on the tiers they share (engine/sim/sharing.py)."""

    def __call__(self, scenario: Scenario, job: Job) -> StepPlan | None:
        return estimate_job(scenario, job).plan

    @staticmethod
    def sharing(scenario: Scenario) -> Sharing:
        return estimate.sharing(scenario)


default_planner = ModelPlanner()


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
    productive_s: float = 0.0                # time of the steps completed (since the last restart's checkpoint)
    tuned_at: float = 0.0                    # when the day's clock factor was last applied
    factor: float = 1.0                      # that factor
    variants: dict[float, CompiledPlan] = field(default_factory=dict)   # the stretched step at each factor
    replan: bool = False                     # a new step (its neighbours' traffic) waits for a step boundary

    @property
    def activity(self) -> Activity:
        return self.segments[-1].activity

    def stage_index(self) -> np.ndarray:
        """Pipeline stage of each of the job's GPUs (job-local order), computed once (engine/config/geometry.py)."""
        return JobGeometry.of(self.job).stage_of()

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
            raise UserError(f"expected a positive duration, got {self.duration_s}", scenario.path or None)
        if not (self.sample_s > 0 and math.isfinite(self.sample_s)):
            raise UserError(f"expected a positive sampling interval, got {self.sample_s}", scenario.path or None)
        if self.duration_s / self.sample_s > MAX_SAMPLES:
            raise UserError(f"{self.duration_s / self.sample_s:,.0f} samples is too many; expected at most "
                            f"{MAX_SAMPLES:,} (raise --sample or lower --duration)", scenario.path or None)
        self.scenario = scenario
        self.topology = Geometry.of(scenario.cluster)
        self.power = PowerModel.of(scenario.cluster)
        self.env = simpy.Environment()
        self.stats = RunStats()
        self.summary: dict[str, Any] = {}          # extra keys for `record --json`
        self.overrides: list[Override] = []
        self._extra: list[Callable[[Run], Generator[Any, Any, None]]] = []
        self._check_sample_size()
        planner = planner or default_planner
        sharing = getattr(planner, "sharing", None)
        self.shared = SharedTiers(self, sharing(scenario)) if sharing and len(scenario.jobs) > 1 else None
        self.tracks: list[JobTrack] = []
        for i, job in enumerate(scenario.jobs):
            if self.shared is not None:
                compiled = self.shared.plan(i)
            else:
                plan = planner(scenario, job)
                compiled = CompiledPlan.of(scenario, job, plan) if plan is not None else None
            self.tracks.append(JobTrack(i, job, Layout(job, self.topology), compiled))
        self.by_name = {t.job.name: t for t in self.tracks}
        steps = sum(self.duration_s / t.plan.step_time_s for t in self.tracks if t.plan is not None)
        if steps > MAX_STEP_EVENTS:
            raise UserError(f"{steps:,.0f} training steps in {self.duration_s:,.0f} s would write one event each; "
                            f"expected at most {MAX_STEP_EVENTS:,} (shorten --duration)", scenario.path or None)
        self._check_faults()
        self.idle_gpus = self.topology.gpus - sum(t.job.gpus for t in self.tracks)
        self.speeds = variability.draw_speeds(scenario.variability, self.rng("variability.speed"),
                                              self.topology.gpus)
        for track in self.tracks:
            if track.plan is not None:
                variability.stretch(scenario, track, self.speeds, self.power.phase_w)
        self.spares = SparePool(scenario.faults.spare_nodes, scenario.faults.repair_s)
        self.sampler = Sampler(self)
        self.site_power = SitePower(self)
        self._sink: Sink | None = None

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
        self._write({"t": wire_time(now), "type": kind, **fields})

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
        track.replan = False
        self.switch(track, Running(self._plan_now(track), self.env.now, track.step if step is None else step,
                                   track.tokens_total if tokens is None else tokens))

    def interrupt(self, track: JobTrack, perturbation: Any) -> None:
        """Interrupt the job's process with a Perturbation (run inside it: it may switch, wait, emit and resume),
        an engine.sim.faults.Fault, or engine.sim.lifecycle.PLANNED (maintenance).

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

    def diurnal(self, t: float) -> float:
        """How much longer a step takes at time t than at night (engine/sim/variability.py)."""
        return variability.diurnal(self.scenario.variability.diurnal_amplitude, t)

    def _plan_now(self, track: JobTrack) -> CompiledPlan:
        return variability.plan_at(self.scenario.variability.diurnal_amplitude, track, self.env.now)

    def next_retune(self, track: JobTrack) -> float:
        """When the job's step next changes: now for a new step (its neighbours), else the day's clock factor
        (inf: never)."""
        if track.replan:
            return self.env.now
        return variability.next_retune(self.scenario.variability.diurnal_amplitude, track)

    def retune(self, track: JobTrack) -> None:
        """At a step boundary: continue training at the current clock factor and with the current neighbours."""
        act = track.activity
        if not isinstance(act, Running):
            return
        factor = self.diurnal(self.env.now)
        track.tuned_at = self.env.now
        if factor != track.factor or track.replan:
            self.resume(track)

    def running_changed(self) -> None:
        """A job stopped or restarted: the others' steps with their neighbours change (engine/sim/sharing.py)."""
        if self.shared is not None:
            self.shared.update()

    # ----- the run ----------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Line 1: everything needed to replay the recording with no scenario file and no engine."""
        s = self.scenario.to_dict()
        s["seed"], s["duration_s"] = self.seed, self.duration_s
        s["path"] = s["path"].replace("\\", "/").rsplit("/", 1)[-1]   # no machine-specific directories
        s["cluster"]["node_fabric"] = s["cluster"]["scale_up"]       # its older name, for readers that know only it
        jobs = []
        for t in self.tracks:
            j = t.job
            entry = {"name": j.name, "kind": j.kind, "model": j.model.name, "first_gpu": j.first_gpu,
                     "gpus": j.gpus, "tp": j.tp, "cp": j.cp, "pp": j.pp, "dp": j.dp, "ep": j.ep,
                     "virtual_stages": j.virtual_stages, "rank_order": list(RANK_ORDER),
                     "tiers": t.layout.tiers(), "fits": t.plan is not None,
                     **({k: t.plan.kpi[k] for k in ("step_time_s", "mfu")} if t.plan else {})}
            if t.plan is not None:
                ck = checkpoint_plan(self.scenario, j)
                entry["checkpoint"] = {"mode": ck.mode, "gb": round(ck.state_bytes / 1e9, 1),
                                       "write_s": round(ck.write_s, 3), "stall_s": round(ck.stall_s, 3),
                                       "interval_s": round(ck.interval_s, 1) if math.isfinite(ck.interval_s)
                                       else None}
                memory = t.plan.plan.memory_gb
                if memory:      # memory per GPU: one figure, or one per pipeline stage when they differ
                    entry["memory_gb"] = memory[0] if len(set(memory)) == 1 else list(memory)
                entry.update(t.plan.plan.serving)       # inference: median TTFT and TPOT
                if self.shared is not None:
                    entry.update(self.shared.header(t.index))
                st = t.stragglers
                entry["speed"] = round(st.speed, 4) if st else 1.0
                entry["slow_gpus"] = st.gpus.tolist() if st else []
                entry["economics"] = self._job_economics(t)
            jobs.append(entry)
        return {"type": schema.HEADER, "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
                "generator": generator(), "scenario": s, "topology": self.topology.summary(),
                "jobs": jobs, "seed": self.seed, "sample_interval_s": self.sample_s,
                "duration_s": self.duration_s, "sampling": "mean", "tiers": list(TIERS),
                "link_scope": dict(LINK_SCOPE),
                "phases": list(PHASES), "phase_util": [float(u) for u in PHASE_UTIL],
                "power": self.power.describe(), "scale_up": scaleup.describe(self.scenario.cluster),
                "optics": self._optics()}

    def _optics(self) -> dict[str, Any]:
        optics = self.scenario.cluster.transceivers
        return {"kind": self.scenario.cluster.optics, "transceivers": optics.count,
                "transceivers_by_tier": optics.by_tier(), "optics_mw": round(optics.watts / 1e6, 6)}

    def _job_economics(self, track: JobTrack) -> dict[str, Any]:
        """A job's energy and cost figures at its step in this run (with the wait for its slowest GPU)."""
        plan = track.stretched or track.plan
        assert plan is not None
        j, step = track.job, plan.step_time_s
        tokens_per_s = plan.kpi["tokens"] / step
        if not tokens_per_s:
            return dict(economics.NO_FIGURES)
        facility_w = self.power.job_w(plan.watts[0] * j.dp, j.gpus, self.topology.gpus)
        return economics.figures(self.scenario.economics, facility_w, j.gpus, step, tokens_per_s)

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
            "site_mw_min": round(self.site_power.min_mw, 4) if math.isfinite(self.site_power.min_mw) else None,
            "site_mw_max": round(self.site_power.max_mw, 4) if math.isfinite(self.site_power.max_mw) else None,
            "checkpoints": sum(t.driver.checkpoints for t in drivers if t.driver),
            **self._energy(end)})

    def _energy(self, end: float) -> dict[str, Any]:
        """The site's energy over the run, what the run cost (every accelerator of the site, idle or not), and
        both per token kept (the jobs' progress at the end: work lost to a fault and redone costs twice)."""
        energy = self.sampler.energy_mwh
        cost = self.scenario.economics.run_cost(self.topology.gpus, energy, end / 3600.0)
        tokens = sum(t.tokens_total for t in self.tracks)
        return {"energy_mwh": round(energy, 4), "cost_usd": round(cost, 2),
                "energy_j_per_token": round(energy * 3.6e9 / tokens, 6) if tokens else None,
                "usd_per_mtoken": round(cost / tokens * 1e6, 6) if tokens else None}

    def _check_sample_size(self) -> None:
        """UserError when a sample could be longer than a reader takes (schema.MAX_LINE_BYTES), before any job is
        planned. Per-GPU arrays are run-length encoded: a job's GPUs run in lockstep but for its pipeline stages,
        which alternate every tp * cp GPUs (up to one run per GPU); links carry one load per pod for three tiers."""
        runs = sum(j.gpus // (j.tp * j.cp) if j.pp > 1 else 1 for j in self.scenario.jobs) + 1
        size = runs * SAMPLE_BYTES_PER_RUN + self.topology.pods * 3 * SAMPLE_BYTES_PER_LOAD
        if size > schema.MAX_LINE_BYTES:
            raise UserError(f"a sample of this cluster could take {size / 2**20:,.0f} MiB ({runs:,} runs of "
                            f"pipeline stages, {self.topology.pods:,} pods); expected at most "
                            f"{schema.MAX_LINE_BYTES / 2**20:,.0f} MiB per line: larger tp * cp, or fewer, larger "
                            "pods", self.scenario.path or None)

    def _check_faults(self) -> None:
        """UserError when the jobs expect more interruptions than a run can simulate (MAX_FAULTS)."""
        f = self.scenario.faults
        where = self.scenario.path or None
        if len(f.inject) > MAX_FAULTS:
            raise UserError(f"faults.inject: {len(f.inject):,} injected faults; expected at most {MAX_FAULTS:,}, as "
                            "each one is simulated", where)
        if not f.enabled:
            return
        count = sum(faults.expected(t.job.gpus, self.topology.gpus_per_node, self.duration_s, f.rate_scale,
                                    f.planned_per_day) for t in self.tracks if t.plan is not None)
        if count > MAX_FAULTS:
            raise UserError(f"faults.rate_scale: the jobs expect {count:,.0f} interruptions in "
                            f"{self.duration_s:,.0f} s at rate_scale {f.rate_scale:g}; expected at most {MAX_FAULTS:,}, "
                            "as each one is simulated (lower rate_scale or --duration)", where)

    def _job(self, track: JobTrack) -> Generator[Any, Any, None]:
        if track.plan is None:
            self.switch(track, Constant("idle", track.job.pp))
            self.emit(schema.JOB_STOP, job=track.job.name, reason="out of memory")
            return
        track.driver = JobDriver(self, track)
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
            self.interrupt(track, PLANNED)

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
            write({"t": wire_time(when), "type": schema.STEP, "job": track.job.name, "step": track.step, **kpi,
                   "tokens_total": track.tokens_total})

    def _write(self, event: dict[str, Any]) -> None:
        assert self._sink is not None
        self._sink.write(orjson.dumps(event, option=OPT))
        self.stats.events += 1

    # ----- samples and the site's power ---------------------------------------------------------------------

    def _power_changed(self) -> None:
        """Something changed what GPUs draw: the site's level is looked at once this instant is done."""
        if self._sink is not None:
            self.site_power.changed()

    def measure(self, a: float, b: float) -> Measurement:
        """Exact means over [a, b] (b > a) of what every stage of every job does; `b - a` tiny: the instant a."""
        return self.sampler.measure(a, b)

    def site_mw(self, a: float, b: float | None = None) -> float:
        """Site power in MW: the mean over [a, b], or the instantaneous value at a when b is None."""
        m = self.measure(a, a + INSTANT if b is None else b)
        return self.power.site_mw(m.gpu_watts, self.topology.gpus)

    def _sample(self, a: float, b: float, t: float) -> None:
        """Write the sample at time t: exact means over [a, b]."""
        self.advance(t)
        line = self.sampler.line(a, b, t)
        self.overrides = [o for o in self.overrides if o.end > b]
        assert self._sink is not None
        self._sink.keyframe(line)
        self.stats.events += 1
        self.stats.samples += 1
        for track in self.tracks:              # drop segments that can no longer overlap a window
            while len(track.segments) > 1 and track.segments[0].end <= b:
                track.segments.pop(0)
