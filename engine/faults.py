"""Interruptions of training jobs and how a job recovers from them.

Sources: every cause of Llama 3 Table 5 is its own Poisson process, per component. Rates come from the 54-day,
16K-GPU counts (engine/catalogs/faults.toml) divided by the number of components of the kind that causes them
(GPUs, hosts, network links), so a cluster of any size gets proportionally more or fewer. Each fault names a
concrete GPU, node or link. Planned interruptions (maintenance) are a per-job Poisson process.

Recovery (`JobDriver`, the SimPy process of one training job in engine/run.py): the job trains, writes periodic
checkpoints (`checkpoint_plan`: synchronous, or a short snapshot then a write behind training), and on a fault
goes down: detection, then restart from its last checkpoint on healthy or spare hardware (`SparePool`: failed
nodes go to repair and come back as spares). The work since that checkpoint is lost. A fault or maintenance
arriving while the job is down extends the downtime and counts as an interruption (as Llama 3 counts them).
"""

from __future__ import annotations

import heapq
import math
import tomllib
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from . import schema
from .compute import BF16, total_params

if TYPE_CHECKING:
    from .run import JobTrack, Run
    from .scenario import Job, Scenario

DAY = 86400.0


@dataclass(frozen=True)
class Cause:
    name: str
    count: int            # interruptions in the reference snapshot
    component: str        # "gpu" | "host" | "link": what the rate scales with
    category: str
    scope: str            # "node": the node is out until replaced; "link": a network link; "job": software only
    rate_per_s: float     # per component


@dataclass(frozen=True)
class Fault:
    t: float
    cause: str
    component: str        # "gpu" | "node" | "link"
    index: int            # GPU index, node index or link index (link i = the NIC link of GPU i)
    gpu: int              # a GPU the fault concerns (for a link: the GPU behind its NIC)
    scope: str
    injected: bool = False   # scheduled by the scenario or the user, not drawn


@cache
def causes() -> tuple[Cause, ...]:
    with resources.files("engine.catalogs").joinpath("faults.toml").open("rb") as f:
        data = tomllib.load(f)
    days = data["reference_days"]
    counts = {"gpu": data["reference_gpus"], "host": data["reference_hosts"], "link": data["reference_links"]}
    return tuple(Cause(name=name, count=c["count"], component=c["component"], category=c["category"],
                       scope=c["scope"], rate_per_s=c["count"] / (counts[c["component"]] * days * DAY))
                 for name, c in data["causes"].items())


def expected_count(gpus: int, gpus_per_node: int, seconds: float, rate_scale: float = 1.0) -> float:
    """Mean number of unexpected interruptions for a job on `gpus` GPUs over `seconds`."""
    n = {"gpu": gpus, "host": -(-gpus // gpus_per_node), "link": gpus}
    return rate_scale * seconds * sum(c.rate_per_s * n[c.component] for c in causes())


def cause(name: str) -> Cause:
    """A Table 5 cause by name; KeyError when there is none."""
    for c in causes():
        if c.name == name:
            return c
    raise KeyError(name)


def expected_rate(gpus: int, gpus_per_node: int, rate_scale: float = 1.0, planned_per_day: float = 0.0) -> float:
    """Interruptions per second a job on `gpus` GPUs expects: unexpected ones plus planned maintenance."""
    return expected_count(gpus, gpus_per_node, 1.0, rate_scale) + planned_per_day / DAY


def _rng(seed: int, name: str) -> np.random.Generator:
    """An independent, reproducible stream per cause: the same seed gives the same faults in any order."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def schedule(first_gpu: int, gpus: int, gpus_per_node: int, start_s: float, end_s: float, seed: int,
             rate_scale: float = 1.0, stream: str = "") -> list[Fault]:
    """Every unexpected fault hitting GPUs [first_gpu, first_gpu + gpus) during [start_s, end_s), sorted by time.

    Each cause is a Poisson process of rate n * lambda; arrival times are uniform given the count, which is the
    same process drawn in one vectorized step. The run still reacts to them one by one. `stream` names the
    random streams (the run passes the job's name, so two jobs of the same size do not fail alike).
    """
    span = end_s - start_s
    if span <= 0 or gpus <= 0 or rate_scale <= 0:
        return []
    first_node = first_gpu // gpus_per_node
    nodes = -(-gpus // gpus_per_node)
    out: list[Fault] = []
    for c in causes():
        n = gpus if c.component in ("gpu", "link") else nodes
        rng = _rng(seed, stream + c.name)
        k = int(rng.poisson(c.rate_per_s * n * span * rate_scale))
        if not k:
            continue
        times = start_s + rng.random(k) * span
        picks = rng.integers(0, n, k)
        for t, i in zip(times.tolist(), picks.tolist()):
            if c.component == "host":
                node = first_node + i
                out.append(Fault(t, c.name, "node", node, max(node * gpus_per_node, first_gpu), c.scope))
            else:
                out.append(fault_at(t, first_gpu + i, c.name, gpus_per_node, injected=False))
    out.sort(key=lambda f: (f.t, f.cause))
    return out


def fault_at(t: float, gpu: int, name: str, gpus_per_node: int, injected: bool = True) -> Fault:
    """A fault of a given cause at one GPU: its GPU, its node (host causes) or its NIC link (network causes)."""
    c = cause(name)
    if c.component == "host":
        return Fault(t, c.name, "node", gpu // gpus_per_node, gpu, c.scope, injected)
    return Fault(t, c.name, "link" if c.component == "link" else "gpu", gpu, gpu, c.scope, injected)


def planned(start_s: float, end_s: float, per_day: float, seed: int, job: str) -> list[float]:
    """Times of planned interruptions (maintenance windows) for one job: a Poisson process of `per_day`."""
    span = end_s - start_s
    if span <= 0 or per_day <= 0:
        return []
    rng = _rng(seed, f"planned:{job}")
    k = int(rng.poisson(per_day * span / DAY))
    return sorted((start_s + rng.random(k) * span).tolist())


def young_daly_interval(checkpoint_s: float, interruptions_per_s: float) -> float:
    """The checkpoint interval that minimises expected lost time: sqrt(2 C / rate) (Young 1974, Daly 2006)."""
    if interruptions_per_s <= 0:
        return float("inf")
    return float(np.sqrt(2.0 * checkpoint_s / interruptions_per_s))


# ----- checkpoints ------------------------------------------------------------------------------------------

# What a checkpoint holds per parameter: BF16 weights (2 bytes) and the FP32 master weights and two Adam moments
# (12 bytes), as engine/memory.py counts them. Gradients are not saved (they are recomputed after a restart).
CHECKPOINT_BYTES_PER_PARAM = BF16 + 12.0


@dataclass(frozen=True)
class CheckpointPlan:
    """How one job checkpoints: how much it writes, how long training stops, and how often."""

    mode: str                 # "sync" | "async"
    state_bytes: float        # model + optimizer state, one copy (every shard written once)
    write_s: float            # writing it at the storage bandwidth
    stall_s: float            # training stops this long: the write (sync) or the snapshot to host memory (async)
    interval_s: float         # from the end of one checkpoint (or a restart) to the next; inf: never


def checkpoint_plan(scenario: Scenario, job: Job) -> CheckpointPlan:
    """The scenario's checkpoint settings for one job; "auto" is the Young/Daly interval for its expected
    interruption rate (unexpected faults at the scenario's rate_scale, plus planned maintenance)."""
    ck, f = scenario.checkpoint, scenario.faults
    params = total_params(job.model)[0]
    state = CHECKPOINT_BYTES_PER_PARAM * params
    write = state / (ck.storage_tb_s * 1e12)
    if ck.mode == "async":
        # Each GPU copies its own shard to host memory over PCIe: its weights (sharded by TP, PP and EP) and its
        # optimizer shard (ZeRO shards it over the data-parallel ranks too). EP also divides dense weights here:
        # a small overestimate of the snapshot speed for MoE models, whose parameters are mostly experts.
        model_shards = job.tp * job.pp * job.ep
        dp_shards = job.dp * job.cp if job.zero >= 1 else 1
        local = BF16 * params / model_shards + 12.0 * params / (model_shards * dp_shards)
        stall = local / (scenario.cluster.pcie.gb_s * 1e9)
    else:
        stall = write
    interval = ck.interval_s
    if interval == "auto":
        rate = expected_rate(job.gpus, scenario.cluster.gpus_per_node, f.rate_scale, f.planned_per_day)
        interval = young_daly_interval(stall, rate)
    return CheckpointPlan(ck.mode, state, write, stall, float(interval))


# ----- spare nodes ------------------------------------------------------------------------------------------


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

    Interrupts (engine/run.py `Run.interrupt`) carry a Fault, PLANNED, or any Perturbation (a callable run
    inside this process). An interrupt during a synchronous checkpoint aborts it.
    """

    def __init__(self, run: Run, track: JobTrack) -> None:
        self.run = run
        self.track = track
        self.env = run.env
        f = run.scenario.faults
        self.detect_s, self.restart_s, self.planned_s = f.detection_s, f.restart_s, f.planned_s
        self.ckpt = checkpoint_plan(run.scenario, track.job)
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
        self.held: list[Any] = []                  # overrides marking failed hardware until the restart
        self.interruptions = 0
        self.planned = 0
        self.checkpoints = 0
        self.tokens_lost = 0

    @property
    def name(self) -> str:
        return self.track.job.name

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
        plan = getattr(act, "plan", None)
        if not act.running or plan is None:
            return None
        period = plan.step_time_s
        k = max(math.ceil((t - act.t0) / period - EPS), 0)
        return act.t0 + k * period

    def _train(self) -> Generator[Any, Any, None]:
        """Train; at step boundaries, follow the day's clocks (run.retune) and write due checkpoints."""
        run, env = self.run, self.env
        while True:
            due = min(self.next_ckpt if self.training else math.inf, run.next_retune(self.track))
            at = self._boundary(max(due, env.now)) if due < math.inf else None
            if at is None:
                yield env.event()              # nothing until an interrupt
                continue
            yield env.timeout(max(at - env.now, 0.0))
            if run.next_retune(self.track) <= env.now + EPS:
                run.retune(self.track)
            if self.training and self.next_ckpt <= env.now + EPS:
                yield from self._checkpoint(self.ckpt.mode)

    # ----- checkpoints ----------------------------------------------------------------------------------

    def _checkpoint(self, mode: str) -> Generator[Any, Any, None]:
        run, env, track = self.run, self.env, self.track
        run.advance(env.now)                    # the steps that ended by now are part of the checkpoint
        saved = Saved(track.step, track.tokens_total, track.productive_s)
        run.emit(schema.CHECKPOINT_START, job=self.name, step=saved.step, mode=mode,
                 gb=round(self.ckpt.state_bytes / 1e9, 1))
        writing = self.writing = Writing(env.now, saved)
        run.switch(track, run.constant(track, "checkpoint"))
        if mode == "sync":
            yield env.timeout(self.ckpt.write_s)
            self.writing = None
            self._commit(writing)
            run.resume(track)
            self.next_ckpt = env.now + self.ckpt.interval_s
        else:
            yield env.timeout(self.ckpt.stall_s)   # the snapshot to host memory; the write goes on behind
            self.writing = None
            run.resume(track)
            self._abort(self.behind)            # a newer snapshot supersedes a write still in flight
            self.behind = writing
            env.process(self._write_behind(writing))
            self.next_ckpt = env.now + max(self.ckpt.interval_s, self.ckpt.write_s)

    def _write_behind(self, writing: Writing) -> Generator[Any, Any, None]:
        yield self.env.timeout(self.ckpt.write_s)
        if self.behind is writing:
            self.behind = None
            self._commit(writing)

    def _commit(self, writing: Writing) -> None:
        self.saved = writing.saved
        self.checkpoints += 1
        self.run.emit(schema.CHECKPOINT_END, job=self.name, step=writing.saved.step, ok=True,
                      duration_s=round(self.env.now - writing.start, 6))

    def _abort(self, writing: Writing | None) -> None:
        """A checkpoint that will never be complete: its end says so (start and end always pair)."""
        if writing is None:
            return
        if writing is self.writing:
            self.writing = None
        if writing is self.behind:
            self.behind = None
        self.run.emit(schema.CHECKPOINT_END, job=self.name, step=writing.saved.step, ok=False,
                      duration_s=round(self.env.now - writing.start, 6))

    # ----- going down and coming back -------------------------------------------------------------------

    def _stop(self, reason: str) -> None:
        """The job stops training now: the work since the last checkpoint is lost (counted at the restart)."""
        track = self.track
        self.run.switch(track, self.run.constant(track, "idle"))
        self.down, self.down_since, self.down_reason = True, self.env.now, reason
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
        run.emit(schema.FAULT, job=self.name, **fault_fields(run, fault),
                 **({"extends_downtime": True} if extends else {}))
        self._abort(self.writing)
        self._abort(self.behind)
        gpn = run.topology.gpus_per_node
        if fault.scope == "node":
            node = fault.gpu // gpn
            if node not in self.failed_nodes:
                self.failed_nodes.append(node)
                run.spares.fail(now)
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
        else:
            self.down_faults += 1
        yield from self._wait_restart()

    def _final_checkpoint(self) -> Generator[Any, Any, None]:
        """Before a planned stop: a synchronous checkpoint, so that nothing is lost."""
        run, env, track = self.run, self.env, self.track
        run.advance(env.now)                    # the steps that ended by now are part of the checkpoint
        saved = Saved(track.step, track.tokens_total, track.productive_s)
        run.emit(schema.CHECKPOINT_START, job=self.name, step=saved.step, mode="sync",
                 gb=round(self.ckpt.state_bytes / 1e9, 1))
        self.writing = Writing(env.now, saved)
        run.switch(track, run.constant(track, "checkpoint"))
        yield env.timeout(self.ckpt.write_s)
        writing, self.writing = self.writing, None
        self._commit(writing)

    def _wait_restart(self) -> Generator[Any, Any, None]:
        """Wait out detection and restart (or the maintenance window), and for spare nodes; then restart."""
        run, env = self.run, self.env
        while True:
            if env.now < self.ready:
                yield env.timeout(self.ready - env.now)
                continue
            need = len(self.failed_nodes)
            at = run.spares.ready_at(need, env.now) if need else env.now
            if at > env.now:
                self.ready = at                # no spare left: wait for a repaired node
                continue
            if need:
                run.spares.take(need, env.now)
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
                 tokens_total=self.saved.tokens, lost_steps=steps, lost_tokens=tokens, lost_s=round(lost_s, 3),
                 downtime_s=round(env.now - self.down_since, 3), interruptions=self.down_faults,
                 spare_nodes=len(self.failed_nodes))
        self.tokens_lost += tokens
        self.down, self.ready, self.loss = False, 0.0, (0, 0, 0.0)
        self.failed_nodes, self.held = [], []
        self.next_ckpt = env.now + self.ckpt.interval_s


def fault_fields(run: Run, fault: Fault) -> dict[str, Any]:
    """The keys of a `fault` event that say what failed and where."""
    gpn = run.topology.gpus_per_node
    c = cause(fault.cause)
    out: dict[str, Any] = {"cause": fault.cause, "category": c.category, "component": fault.component,
                           "gpu": fault.gpu, "node": fault.gpu // gpn, "scope": fault.scope}
    if fault.component == "link":
        out["link"] = fault.index
    if fault.injected:
        out["injected"] = True
    return out
