"""The engine run: a SimPy simulation of a scenario over simulated time, producing the event stream.

Each job's time is a sequence of segments, each with an activity (engine/sim/activity.py): `Running` (the
job's StepPlan repeated from a start time: a periodic, piecewise-constant timeline per pipeline stage) or
`Constant` (every GPU of the job in one phase: idle, failed, checkpoint). Nothing happens between
perturbations that is not already in the plan, so the run fast-forwards: SimPy only wakes up for samples and
perturbations (job start, faults, checkpoints, restarts, maintenance, the day's clock changes), and step
events are generated in closed form (step k of a segment ends at t0 + k * step_time_s) right before any later
line is written. Each training job is driven by engine/sim/lifecycle.py's JobDriver (checkpoints,
interruptions, restarts).

`Run` wires the parts, each in its module and each seeing only the narrow interface it uses
(engine/sim/hooks.py): the jobs (engine/sim/track.py), their lifecycle, the samples (engine/sim/sampling.py:
exact means per sample interval, computed per stage and broadcast over the replicas), stragglers and the
day's clocks (engine/sim/variability.py), jobs sharing tiers (engine/sim/sharing.py), the site's load level
and power swings (engine/sim/site_power.py), the header (engine/sim/header.py) and the summary
(engine/sim/summary.py).

Hooks (docs/events.md, "Extending the run"): `Run.emit` (any discrete event, time-ordered), `Run.switch` /
`Run.resume` (change a job's activity at the current time), `Run.interrupt` (run a Perturbation, a Fault or a
planned maintenance inside the job's SimPy process), `Run.override` (a phase for a GPU range, e.g. a failed
node), `Run.rng` (an independent random stream per named process), `Run.add_process`, `Run.site_mw` /
`Run.measure` (exact power and state over any window or at an instant), `Run.summary` (extra keys for
`record --json`), `Run.inject_fault` and `Run.advance_to` (live control, engine/sim/control.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import orjson
import simpy

from ..config.errors import UserError
from ..config.geometry import Geometry
from ..config.job import Job
from ..config.scenario import Scenario
from ..model import estimate
from ..model.contention import Sharing
from ..model.estimate import estimate_job
from ..model.layout import Layout
from ..model.plan import StepPlan
from ..model.power import PowerModel
from ..stream import schema
from ..stream.lines import OPT_PART, line, times_json, wire_time
from ..stream.recorder import ListSink, Sink, write_many
from . import faults, hooks, shortcut, variability
from .activity import Activity, CompiledPlan, Constant, Running, Segment
from .header import run_header
from .lifecycle import PLANNED, JobDriver, Maintenance, SparePool
from .overrides import Override
from .sampling import INSTANT, MAX_SAMPLES, Measurement, Sampler, default_sample_interval
from .sharing import SharedTiers
from .site_power import SitePower
from .summary import RunStats, summary
from .track import JobTrack

Planner = Callable[[Scenario, Job], "StepPlan | None"]

MAX_STEP_EVENTS = 20_000_000        # ~4 GB of JSON Lines: refuse rather than fill a disk
SAMPLE_BYTES_PER_RUN = 20          # a run in the three per-GPU arrays, at most:
#                                    "100,700,1," + three counts (15 measured)
SAMPLE_BYTES_PER_LOAD = 8          # a link load, "0.1234,"
MAX_FAULTS = 10_000                 # interruptions a run expects: each is simulated (~2 ms: detection,
#                                     restart, lost work, the neighbours' new steps), so 10,000 take ~20 s;
#                                     the flagship's 54 days expect ~470, prometheus-1gw's ~7,800
MAX_INJECTED = 5_000                # [[faults.inject]] entries: a scenario lists each one by hand


class ModelPlanner:
    """The cost model's plan for a job (None when it does not fit in memory). A planner with a `sharing`
    method also solves several jobs with each other's traffic on the tiers they share
    (engine/sim/sharing.py)."""

    def __call__(self, scenario: Scenario, job: Job) -> StepPlan | None:
        return estimate_job(scenario, job).plan

    @staticmethod
    def sharing(scenario: Scenario) -> Sharing:
        return estimate.sharing(scenario)


default_planner = ModelPlanner()


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
            raise UserError(f"expected a positive sampling interval, got {self.sample_s}",
                            scenario.path or None)
        if self.duration_s / self.sample_s > MAX_SAMPLES:
            raise UserError(f"{self.duration_s / self.sample_s:,.0f} samples is too many; expected at most "
                            f"{MAX_SAMPLES:,} (raise --sample or lower --duration)", scenario.path or None)
        self.scenario = scenario
        self.topology = Geometry.of(scenario.cluster)
        self.power = PowerModel.of(scenario.cluster)
        self.env = simpy.Environment()
        self.stats = RunStats()
        self.summary: dict[str, Any] = {}          # extra keys for `record --json`
        self.overrides: list[Override] = []        # kept current in place: the sampler, site power read it
        self._extra: list[Callable[[Run], Generator[Any, Any, None]]] = []
        self._check_sample_size()
        self.tracks: list[JobTrack] = []
        self.shared = self._plan(planner or default_planner)
        steps = sum(self.duration_s / t.plan.step_time_s for t in self.tracks if t.plan is not None)
        if steps > MAX_STEP_EVENTS:
            raise UserError(f"{steps:,.0f} training steps in {self.duration_s:,.0f} s would write one event "
                            f"each; expected at most {MAX_STEP_EVENTS:,} (shorten --duration)",
                            scenario.path or None)
        self._check_faults()
        self.speeds = variability.draw_speeds(scenario.variability, self.rng("variability.speed"),
                                              self.topology.gpus)
        for track in self.tracks:
            if track.plan is not None:
                variability.stretch(scenario, track, self.speeds, self.power.phase_w)
        self.spares = SparePool(scenario.faults.spare_nodes, scenario.faults.repair_s)
        self.sampler = Sampler(self.tracks, self.topology, self.power, self.overrides,
                               scenario.cluster.degraded)
        self.site_power = SitePower(self.env, self.emit, self.power, self.tracks, self.overrides,
                                    self.topology.gpus)
        self._sink: Sink | None = None
        self._write_lines: Callable[[list[bytes]], None] | None = None      # the sink's writelines (start)
        self._step_due = -math.inf          # no step of any job ends before this time (advance)
        self._step_bytes: dict[int, tuple[bytes, int, CompiledPlan]] = {}   # per job (_step_template)

    def _plan(self, planner: Planner) -> SharedTiers | None:
        """Every job's track with its plan: alone, or with its neighbours' traffic when a planner solves jobs
        that share tiers (the SharedTiers returned)."""
        scenario = self.scenario
        sharing = getattr(planner, "sharing", None)
        shared = (SharedTiers(sharing(scenario), scenario, self.power.phase_w, self.tracks, self.emit)
                  if sharing and len(scenario.jobs) > 1 else None)
        for i, job in enumerate(scenario.jobs):
            if shared is not None:
                compiled = shared.plan(i)
            else:
                plan = planner(scenario, job)
                compiled = CompiledPlan.of(scenario, job, plan) if plan is not None else None
            self.tracks.append(JobTrack(i, job, Layout(job, self.topology), compiled))
        return shared

    # ----- hooks ------------------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The simulated time now."""
        return float(self.env.now)

    @property
    def gpus(self) -> int:
        """The cluster's GPUs."""
        return self.topology.gpus

    def rng(self, name: str) -> np.random.Generator:
        """An independent random stream per named process (adding a process does not shift the others)."""
        return hooks.rng(self.seed, name)

    def add_process(self, factory: Callable[[Run], Generator[Any, Any, None]]) -> None:
        """A SimPy process started with the run (before the sampler), e.g. a fault or checkpoint source.

        `factory` is called with the whole Run (its env, tracks, emit, interrupt, override, rng...), not
        with one of the narrow interfaces of engine/sim/hooks.py that the parts Run wires itself see."""
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
            self._step_due = -math.inf
        self._power_changed()

    def resume(self, track: JobTrack, step: int | None = None, tokens: int | None = None) -> None:
        """Start (or restart, e.g. from a checkpoint's step) training now, at the day's clock speed and with
        the current neighbours (engine/sim/variability.py, engine/sim/sharing.py)."""
        assert track.stretched is not None
        now = self.env.now
        self.advance(now)            # the step counter is current
        track.replan = False
        plan = variability.plan_at(self.scenario.variability.diurnal_amplitude, track, now)
        self.switch(track, Running(plan, now, track.step if step is None else step,
                                   track.tokens_total if tokens is None else tokens))

    def interrupt(self, track: JobTrack,
                  perturbation: hooks.Perturbation | faults.Fault | Maintenance) -> None:
        """Interrupt the job's process with a Perturbation (engine/sim/hooks.py: run inside it, it may
        switch, wait, emit and resume), an engine.sim.faults.Fault, or engine.sim.lifecycle.PLANNED
        (maintenance).

        A perturbation that arrives while another runs (a fault during a checkpoint) replaces it.
        """
        track.process.interrupt(perturbation)

    def skip(self, delay: float) -> bool:
        """Pass a wait of `delay` in a job's process at once, when nothing else is due during it
        (engine/sim/shortcut.py); False: nothing done, wait with a timeout."""
        site = self.site_power
        return shortcut.skip(self.env, delay, self.duration_s, site.pending, site.look)

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

    def running_changed(self) -> None:
        """A job stopped or restarted: the others' steps with their neighbours change (sharing.py)."""
        if self.shared is not None:
            self.shared.update()

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

    # ----- the run ----------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Line 1: everything needed to replay the recording with no scenario file and no engine."""
        return run_header(self.scenario, self.tracks, seed=self.seed, duration_s=self.duration_s,
                          sample_s=self.sample_s, topology=self.topology, power=self.power,
                          shared=self.shared)

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
        sink = ListSink()
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
        self._write_lines = write_many(sink)
        sink.write(line(self.header()))
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
        """After the last event: the summary (`record --json`, engine/sim/summary.py)."""
        end = self.duration_s
        while self.env.peek() <= end:
            self.env.step()
        self.stats.sim_seconds = end
        self.summary.update(summary(self.tracks, self.site_power, self.sampler.energy_mwh,
                                    self.scenario.economics, self.topology.gpus, end))

    def _check_sample_size(self) -> None:
        """UserError when a sample could be longer than a reader takes (schema.MAX_LINE_BYTES), before any job
        is planned. Per-GPU arrays are run-length encoded: a job's GPUs run in lockstep but for its pipeline
        stages, which alternate every tp * cp GPUs (up to one run per GPU); links carry one load per pod for
        three tiers."""
        runs = sum(j.gpus // (j.tp * j.cp) if j.pp > 1 else 1 for j in self.scenario.jobs) + 1
        size = runs * SAMPLE_BYTES_PER_RUN + self.topology.pods * 3 * SAMPLE_BYTES_PER_LOAD
        if size > schema.MAX_LINE_BYTES:
            raise UserError(f"a sample of this cluster could take {size / 2**20:,.0f} MiB ({runs:,} runs of "
                            f"pipeline stages, {self.topology.pods:,} pods); expected at most "
                            f"{schema.MAX_LINE_BYTES / 2**20:,.0f} MiB per line: larger tp * cp, or fewer, "
                            "larger pods", self.scenario.path or None)

    def _check_faults(self) -> None:
        """UserError when the jobs expect more interruptions than a run can simulate (MAX_FAULTS)."""
        f = self.scenario.faults
        where = self.scenario.path or None
        if len(f.inject) > MAX_INJECTED:
            raise UserError(f"faults.inject: {len(f.inject):,} injected faults; expected at most "
                            f"{MAX_INJECTED:,}, as each one is simulated", where)
        if not f.enabled:
            return
        count = sum(faults.expected(t.job.gpus, self.topology.gpus_per_node, self.duration_s, f.rate_scale,
                                    f.planned_per_day) for t in self.tracks if t.plan is not None)
        if count > MAX_FAULTS:
            raise UserError(f"faults.rate_scale: the jobs expect {count:,.0f} interruptions in "
                            f"{self.duration_s:,.0f} s at rate_scale {f.rate_scale:g}; expected at most "
                            f"{MAX_FAULTS:,}, as each one is simulated (lower rate_scale or --duration)",
                            where)

    def _job(self, track: JobTrack) -> Generator[Any, Any, None]:
        if track.plan is None:
            self.switch(track, Constant("idle", track.job.pp))
            self.emit(schema.JOB_STOP, job=track.job.name, reason="out of memory")
            return
        track.driver = JobDriver(self, track, self.scenario, self.spares)
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
        self.emit(schema.FAULT, **faults.fault_fields(fault, self.topology.gpus_per_node))
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
        """Write every step that ended at or before t, across jobs, in time order.

        Called before every line; most calls find nothing due: `_step_due` is a time before which no job's
        next step can end (reset when a job switches activity), so those return at once."""
        if t < self._step_due:
            return
        due = math.inf
        stretches: list[tuple[list[float], int, list[bytes]]] = []
        for track in self.tracks:
            act = track.segments[-1].activity if track.segments else None
            if not isinstance(act, Running):
                continue
            if t >= act.due:               # else its next step ends later
                got = self._steps(track, act, t)
                if got is not None:
                    stretches.append(got)
            due = min(due, act.due)
        self._step_due = due
        if not stretches:
            return
        if len(stretches) == 1:
            lines = stretches[0][2]
        else:                               # by time, then job (a job's steps have distinct times)
            pending = sorted((when, index, text) for whens, index, texts in stretches
                             for when, text in zip(whens, texts))
            lines = [text for _, _, text in pending]
        assert self._write_lines is not None
        self.stats.events += len(lines)
        self._write_lines(lines)

    def _steps(self, track: JobTrack, act: Running, t: float) -> tuple[list[float], int, list[bytes]] | None:
        """The job's steps that ended by t, as (their times, the job, their lines), and its counters after
        them; None when none did."""
        plan = act.plan
        period = plan.step_time_s
        last = math.floor((t - act.t0) / period + 1e-9)
        first = act.emitted + 1
        if last < first:
            return None
        template, tokens = self._step_template(track, plan)
        t0, step0, tokens0 = act.t0, act.step0, act.tokens0
        ks = range(first, last + 1)
        whens = [t0 + k * period for k in ks]
        lines = [template % (when, step0 + k, tokens0 + k * tokens) for when, k in zip(times_json(whens), ks)]
        productive = track.productive_s
        for _ in ks:                               # added one step at a time (the same sum)
            productive += period
        track.productive_s = productive
        track.step, track.tokens_total = step0 + last, tokens0 + last * tokens
        track.last_kpi = plan.kpi
        self.stats.steps += len(ks)
        self.stats.tokens += len(ks) * tokens
        act.emitted = last
        act.due = act.next_due()
        return whens, track.index, lines

    def _step_template(self, track: JobTrack, plan: CompiledPlan) -> tuple[bytes, int]:
        """A job's step line with its current plan, serialized once: a %-template of the line (`line()` of
        the event `advance` writes) taking the time (time_json), the step number and the tokens so far; and
        the tokens per step."""
        parts = self._step_bytes.get(track.index)
        if parts is None or parts[2] is not plan:
            kpi = plan.kpi
            name = orjson.dumps(track.job.name, option=OPT_PART).replace(b"%", b"%%")
            body = orjson.dumps(kpi, option=OPT_PART)[1:-1].replace(b"%", b"%%")
            template = b'{"t":%%b,"type":"step","job":%b,"step":%%d,%b,"tokens_total":%%d}\n' % (name, body)
            parts = (template, int(kpi["tokens"]), plan)
            self._step_bytes[track.index] = parts
        return parts[0], parts[1]

    def _write(self, event: dict[str, Any]) -> None:
        assert self._sink is not None
        self._sink.write(line(event))
        self.stats.events += 1

    # ----- samples and the site's power ---------------------------------------------------------------------

    def _power_changed(self) -> None:
        """Something changed what GPUs draw: the site's level is looked at once this instant is done."""
        if self._sink is not None:
            self.site_power.changed()

    def measure(self, a: float, b: float) -> Measurement:
        """Exact means over [a, b] (b > a) of what every stage of every job does;
        `b - a` tiny: the instant a."""
        return self.sampler.measure(a, b)

    def site_mw(self, a: float, b: float | None = None) -> float:
        """Site power in MW: the mean over [a, b], or the instantaneous value at a when b is None."""
        m = self.measure(a, a + INSTANT if b is None else b)
        return self.power.site_mw(m.gpu_watts, self.topology.gpus)

    def _sample(self, a: float, b: float, t: float) -> None:
        """Write the sample at time t: exact means over [a, b]."""
        self.advance(t)
        sample = self.sampler.line(a, b, t)
        self.overrides[:] = [o for o in self.overrides if o.end > b]
        assert self._sink is not None
        self._sink.keyframe(sample)
        self.stats.events += 1
        self.stats.samples += 1
        for track in self.tracks:              # drop segments that can no longer overlap a window
            while len(track.segments) > 1 and track.segments[0].end <= b:
                track.segments.pop(0)
