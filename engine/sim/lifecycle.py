"""A training job's life in the run: it trains, checkpoints, goes down on a fault or for maintenance,
and restarts.

`JobDriver` is the SimPy process of one training job (engine/sim/run.py starts it): the job trains, writes
periodic checkpoints (engine/model/checkpoint.py: synchronous, or a short snapshot then a write behind
training), and on a fault goes down: detection, then restart from its last checkpoint on healthy or spare
hardware (`SparePool`: failed nodes go to repair and come back as spares). The work since that checkpoint is
lost. A fault or maintenance arriving while the job is down extends the downtime and counts as an
interruption (as Llama 3 counts them). At step boundaries it takes the day's clock speed and a new step when
its neighbours change (engine/sim/variability.py, engine/sim/sharing.py). It sees the run through its
JobHooks only (engine/sim/hooks.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from ..config.scenario import Scenario
from ..model.checkpoint import checkpoint_plan
from ..stream import schema
from ..stream.lines import wire_time
from . import variability
from .activity import Constant, Running
from .faults import Fault, fault_fields
from .hooks import JobHooks

if TYPE_CHECKING:
    from .overrides import Override
    from .track import JobTrack


class SparePool:
    """Healthy nodes ready to replace failed ones. A failed node goes to repair and returns as a spare."""

    def __init__(self, spares: int, repair_s: float) -> None:
        self.free = spares
        self.repair_s = repair_s
        self.repairs: list[float] = []     # heap of times failed nodes come back

    def fail(self, t: float) -> None:
        heapq.heappush(self.repairs, t + self.repair_s)

    def _release(self, now: float) -> None:
        while self.repairs and self.repairs[0] <= now:
            heapq.heappop(self.repairs)
            self.free += 1

    def ready_at(self, n: int, now: float) -> float:
        """When `n` spares can be had: now, or when enough failed nodes are repaired."""
        self._release(now)
        if self.free >= n:
            return now
        missing = n - self.free
        if missing > len(self.repairs):
            return math.inf
        return heapq.nsmallest(missing, self.repairs)[-1]

    def take(self, n: int, now: float) -> None:
        self._release(now)
        if n > self.free:
            raise ValueError(f"{n} spare nodes wanted, {self.free} free")
        self.free -= n


# ----- a training job's life --------------------------------------------------------------------------------


class Maintenance:
    """A planned interruption (the cause of an interrupt)."""


PLANNED = Maintenance()
EPS = 1e-9


@dataclass
class Saved:
    """A committed checkpoint: where a restart resumes."""

    step: int = 0
    tokens: int = 0
    productive_s: float = 0.0      # training time whose work the checkpoint keeps


@dataclass
class Writing:
    """A checkpoint being written (sync: training waits; async: behind training)."""

    start: float
    saved: Saved


class JobDriver:
    """The SimPy process of one training job: steps, checkpoints, faults, maintenance, restarts.

    Interrupts (engine/sim/run.py `Run.interrupt`) carry a Fault, PLANNED, or any Perturbation
    (engine/sim/hooks.py: a callable run inside this process). An interrupt during a synchronous checkpoint
    aborts it.
    """

    def __init__(self, run: JobHooks, track: JobTrack, scenario: Scenario, spares: SparePool) -> None:
        self.run = run
        self.track = track
        self.env = run.env
        self.spares = spares
        self.gpus_per_node = scenario.cluster.gpus_per_node
        self.amplitude = scenario.variability.diurnal_amplitude
        f = scenario.faults
        self.detect_s, self.restart_s, self.planned_s = f.detection_s, f.restart_s, f.planned_s
        self.ckpt = checkpoint_plan(scenario, track.job)
        self.gb = round(self.ckpt.state_bytes / 1e9, 1)       # a checkpoint's size on the wire
        self.training = track.job.kind == "training"
        self.saved = Saved()
        self.started = 0.0
        self.next_ckpt = self.ckpt.interval_s
        self.writing: Writing | None = None        # a synchronous checkpoint in progress
        self.behind: Writing | None = None         # an asynchronous write in progress
        self.down = False
        self.down_since = 0.0
        self.down_reason = ""
        self.ready = 0.0
        self.down_faults = 0
        self.loss = (0, 0, 0.0)                    # steps, tokens, seconds of training lost by this downtime
        self.failed_nodes: list[int] = []
        self.held: list[Override] = []             # overrides marking failed hardware until the restart
        self.interruptions = 0
        self.planned = 0
        self.checkpoints = 0
        self.tokens_lost = 0
        self.wake = self.env.event()              # succeeds when the job's step changes (its neighbours)
        self.name = track.job.name

    def kept_productive_s(self) -> float:
        """Training time whose work is kept: what a restart now would keep when the job is down."""
        return self.saved.productive_s if self.down else self.track.productive_s

    # ----- the process ----------------------------------------------------------------------------------

    def process(self) -> Generator[Any, Any, None]:
        run = self.run
        self.started = self.env.now
        run.emit(schema.JOB_START, job=self.name)
        run.resume(self.track, 0, 0)
        pending: Any = None
        while True:
            try:
                if pending is None:
                    yield from self._train()
                else:
                    cause, pending = pending, None
                    yield from self._handle(cause)
            except simpy.Interrupt as stop:
                pending = stop.cause

    def _handle(self, cause: Any) -> Generator[Any, Any, None]:
        if isinstance(cause, Fault):
            yield from self._fault(cause)
        elif isinstance(cause, Maintenance):
            yield from self._maintenance()
        else:
            self._abort(self.writing)
            yield from cause(self.run, self.track)

    def _boundary(self, t: float) -> float | None:
        """The end of the first step ending at or after t (None when the job is not training)."""
        act = self.track.activity
        if not isinstance(act, Running):          # the one activity that trains (act.running)
            return None
        period = act.plan.step_time_s
        k = max(math.ceil((t - act.t0) / period - EPS), 0)
        return act.t0 + k * period

    def replan(self) -> None:
        """The job's step changed (engine/sim/sharing.py): take it at the next step boundary."""
        self.track.replan = True
        if not self.wake.triggered:
            self.wake.succeed()

    def next_retune(self) -> float:
        """When the job's step next changes: now for a new step (its neighbours), else when the day's clock
        factor does (inf: never)."""
        if self.track.replan:
            return self.env.now
        return variability.next_retune(self.amplitude, self.track)

    def retune(self) -> None:
        """At a step boundary: go on training at the current clock factor and with the current neighbours."""
        track, now = self.track, self.env.now
        if not isinstance(track.activity, Running):
            return
        factor = variability.diurnal(self.amplitude, now)
        track.tuned_at = now
        if factor != track.factor or track.replan:
            self.run.resume(track)

    def _train(self) -> Generator[Any, Any, None]:
        """Train; at step boundaries, follow the day's clocks and the neighbours' traffic (retune) and write
        due checkpoints."""
        env = self.env
        while True:
            if self.wake.triggered:
                self.wake = env.event()
            due = min(self.next_ckpt if self.training else math.inf, self.next_retune())
            at = self._boundary(max(due, env.now)) if due < math.inf else None
            if at is None:
                yield self.wake                # nothing until an interrupt or a new step
                continue
            delay = max(at - env.now, 0.0)
            if not self.run.skip(delay):       # nothing else due by then: at once
                yield self._until(delay)
            if env.now < at - EPS:             # woken by a new step: look again at what is due
                continue
            if self.next_retune() <= env.now + EPS:
                self.retune()
            if self.training and self.next_ckpt <= env.now + EPS:
                yield from self._checkpoint(self.ckpt.mode)

    def _until(self, delay: float) -> simpy.Event:
        """`env.timeout(delay) | self.wake` without a Condition's bookkeeping (a site's jobs wait on one every
        few steps): an event that succeeds when the first of the two does, scheduled as SimPy schedules the
        condition, so every event of the run keeps its place in time and order."""
        wake = self.wake
        done = self.env.event()

        def first(_: simpy.Event) -> None:
            if not done.triggered:
                done.succeed()

        def forget(_: simpy.Event) -> None:      # as a condition does once processed: no stale check on wake
            if wake.callbacks and first in wake.callbacks:
                wake.callbacks.remove(first)

        self.env.timeout(delay).callbacks.append(first)
        assert wake.callbacks is not None         # not processed yet (_train replaces a triggered wake)
        wake.callbacks.append(first)
        done.callbacks.append(forget)
        return done

    # ----- checkpoints ----------------------------------------------------------------------------------

    def _checkpoint(self, mode: str) -> Generator[Any, Any, None]:
        run, env, track = self.run, self.env, self.track
        run.advance(env.now)                    # the steps that ended by now are part of the checkpoint
        saved = Saved(track.step, track.tokens_total, track.productive_s)
        run.emit(schema.CHECKPOINT_START, job=self.name, step=saved.step, mode=mode,
                 gb=self.gb)
        writing = self.writing = Writing(env.now, saved)
        run.switch(track, Constant("checkpoint", track.job.pp))
        if mode == "sync":
            if not run.skip(self.ckpt.write_s):
                yield env.timeout(self.ckpt.write_s)
            self.writing = None
            self._commit(writing)
            run.resume(track)
            self.next_ckpt = env.now + self.ckpt.interval_s
        else:
            if not run.skip(self.ckpt.stall_s):   # the snapshot to host memory; the write goes on behind
                yield env.timeout(self.ckpt.stall_s)
            self.writing = None
            run.resume(track)
            self._abort(self.behind)            # a newer snapshot supersedes a write still in flight
            self.behind = writing
            env.timeout(self.ckpt.write_s).callbacks.append(lambda _: self._written(writing))
            self.next_ckpt = env.now + max(self.ckpt.interval_s, self.ckpt.write_s)

    def _written(self, writing: Writing) -> None:
        """The write behind training is done (a timeout's callback, not a process: one event, not three)."""
        if self.behind is writing:
            self.behind = None
            self._commit(writing)

    def _commit(self, writing: Writing) -> None:
        self.saved = writing.saved
        self.checkpoints += 1
        self.run.emit(schema.CHECKPOINT_END, job=self.name, step=writing.saved.step, ok=True,
                      duration_s=wire_time(self.env.now - writing.start))

    def _abort(self, writing: Writing | None) -> None:
        """A checkpoint that will never be complete: its end says so (start and end always pair)."""
        if writing is None:
            return
        if writing is self.writing:
            self.writing = None
        if writing is self.behind:
            self.behind = None
        self.run.emit(schema.CHECKPOINT_END, job=self.name, step=writing.saved.step, ok=False,
                      duration_s=wire_time(self.env.now - writing.start))

    # ----- going down and coming back -------------------------------------------------------------------

    def _stop(self, reason: str) -> None:
        """The job stops training now: the work since the last checkpoint is lost (counted at the restart)."""
        track = self.track
        self.run.switch(track, Constant("idle", track.job.pp))
        self.down, self.down_since, self.down_reason = True, self.env.now, reason
        if not self.training:           # a serving job keeps what it served: it resumes where it stopped
            self.saved = Saved(track.step, track.tokens_total, track.productive_s)
        self.down_faults = 0
        self.loss = (track.step - self.saved.step, track.tokens_total - self.saved.tokens,
                     track.productive_s - self.saved.productive_s)

    def _fault(self, fault: Fault) -> Generator[Any, Any, None]:
        run, now = self.run, self.env.now
        self.interruptions += 1
        extends = self.down
        if not self.down:
            self._stop("fault")
        self.down_faults += 1
        run.emit(schema.FAULT, job=self.name, **fault_fields(fault, self.gpus_per_node),
                 **({"extends_downtime": True} if extends else {}))
        run.running_changed()                  # its neighbours speed up while it is down
        self._abort(self.writing)
        self._abort(self.behind)
        gpn = self.gpus_per_node
        if fault.scope == "node":
            node = fault.gpu // gpn
            if node not in self.failed_nodes:
                self.failed_nodes.append(node)
                self.spares.fail(now)
                self.held.append(run.override(node * gpn, gpn, "failed"))
        elif fault.scope == "link":
            self.held.append(run.override(fault.gpu, 1, "failed"))
        self.ready = max(self.ready, now + self.detect_s + self.restart_s)
        yield from self._wait_restart()

    def _maintenance(self) -> Generator[Any, Any, None]:
        """A planned stop: finish the step, checkpoint, stay down until the maintenance window ends."""
        run, env = self.run, self.env
        self.planned += 1
        run.emit(schema.MAINTENANCE, job=self.name, component="job", cause="planned",
                 duration_s=self.planned_s)
        self.ready = max(self.ready, env.now + self.planned_s)
        if not self.down:
            self._abort(self.writing)
            at = self._boundary(env.now)
            if at is not None:
                yield env.timeout(max(at - env.now, 0.0))
            if self.training:
                yield from self._final_checkpoint()
            self._stop("maintenance")
            run.running_changed()
        else:
            self.down_faults += 1
        yield from self._wait_restart()

    def _final_checkpoint(self) -> Generator[Any, Any, None]:
        """Before a planned stop: a synchronous checkpoint, so that nothing is lost."""
        run, env, track = self.run, self.env, self.track
        run.advance(env.now)                    # the steps that ended by now are part of the checkpoint
        saved = Saved(track.step, track.tokens_total, track.productive_s)
        run.emit(schema.CHECKPOINT_START, job=self.name, step=saved.step, mode="sync",
                 gb=self.gb)
        self.writing = Writing(env.now, saved)
        run.switch(track, Constant("checkpoint", track.job.pp))
        yield env.timeout(self.ckpt.write_s)
        writing, self.writing = self.writing, None
        self._commit(writing)

    def _wait_restart(self) -> Generator[Any, Any, None]:
        """Wait out detection and restart (or the maintenance window), and for spare nodes; then restart."""
        env = self.env
        while True:
            if env.now < self.ready:
                yield env.timeout(self.ready - env.now)
                continue
            need = len(self.failed_nodes)
            at = self.spares.ready_at(need, env.now) if need else env.now
            if at > env.now:
                self.ready = at                # no spare left: wait for a repaired node
                continue
            if need:
                self.spares.take(need, env.now)
            break
        self._restart()

    def _restart(self) -> None:
        run, env, track = self.run, self.env, self.track
        steps, tokens, lost_s = self.loss
        run.resume(track, self.saved.step, self.saved.tokens)
        track.productive_s = self.saved.productive_s
        for item in self.held:
            run.clear_override(item)
        run.emit(schema.RESTART, job=self.name, reason=self.down_reason, from_checkpoint_step=self.saved.step,
                 tokens_total=self.saved.tokens, lost_steps=steps, lost_tokens=tokens,
                 lost_s=round(lost_s, 3), downtime_s=round(env.now - self.down_since, 3),
                 interruptions=self.down_faults, spare_nodes=len(self.failed_nodes))
        self.tokens_lost += tokens
        self.down, self.ready, self.loss = False, 0.0, (0, 0, 0.0)
        # its neighbours slow down again (it takes its step at a boundary)
        run.running_changed()
        self.failed_nodes, self.held = [], []
        self.next_ckpt = env.now + self.ckpt.interval_s
