"""ClusterState and the one reducer that folds events into it.

There is exactly one way from events to pixels: every event source (live engine, file, pipe) feeds
`ClusterState.apply`, and the dashboard's widgets only read the state. Per-GPU state is numpy arrays.
This module imports neither SimPy nor Textual.

Per-GPU arrays (`util`, `power_w`, `phase`) are decoded lazily: `apply` keeps the sample's run-length
encoded arrays (lists as parsed, or numpy arrays) and the first read of the attribute after a change decodes
them, in place, into the same array object; the link loads likewise. A replay that folds hundreds of samples
between two frames decodes once per frame, not once per sample. Read the attributes after `apply` (do not keep
a reference across applies and expect it to be refreshed without reading the attribute again).

The state is the cluster's now and nothing of its display: the dashboard's event log, sparkline history and
energy so far are its view-model's (tui/display.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..config.geometry import JobGeometry, stage_of
from ..config.phases import CODE, PHASES
from . import schema


def _kpi(key: str, doc: str) -> property:
    """A job figure read from the latest step event or sample status (folding a step is one assignment)."""

    def get(self: JobStatus) -> Any:
        return self._src.get(key, 0)

    def set(self: JobStatus, value: Any) -> None:
        self._src = {**self._src, key: value}

    return property(get, set, doc=doc)


class JobStatus:
    """One job as the stream last described it.

    Besides the step figures: `down` (stopped by a fault, until its restart; `down_since` its time),
    `time_lost_s` (work lost and downtime of its restarts so far), `interruptions`
    (faults and maintenance so far, as Llama 3 counts them), `tokens_lost` (work lost to restarts from
    checkpoints), `checkpoints` (written), `effective_training_time` (share of the time since the job started
    spent on steps whose work is kept; from the latest sample).
    """

    __slots__ = ("_src", "checkpoints", "contention", "down", "down_since", "effective_training_time",
                 "first_gpu", "gpus", "info", "interruptions", "name", "running", "stop_reason",
                 "time_lost_s", "tokens_lost")

    def __init__(self, name: str, first_gpu: int, gpus: int, info: dict[str, Any]) -> None:
        """A job of the header (`info`, its entry: the layout) before any event about it."""
        self.name, self.first_gpu, self.gpus, self.info = name, first_gpu, gpus, info
        self.running = self.down = False
        self.stop_reason = ""
        self.interruptions = self.tokens_lost = self.checkpoints = 0
        self.effective_training_time: float | None = None
        self.down_since: float | None = None
        self.time_lost_s = 0.0
        # jobs sharing tiers: contention_slowdown, contention_tier, contention_shares (header, then
        # "contention")
        self.contention: dict[str, Any] = {k: info[k] for k in schema.CONTENTION_KEYS if k in info}
        figures = ("step", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "tokens_total")
        self._src: dict[str, Any] = dict.fromkeys(figures, 0)

    step = _kpi("step", "steps completed")
    step_time_s = _kpi("step_time_s", "seconds per step")
    tokens_per_s = _kpi("tokens_per_s", "training throughput")
    tflops_per_gpu = _kpi("tflops_per_gpu", "model TFLOP/s per GPU")
    mfu = _kpi("mfu", "model FLOPs utilization, 0..1")
    tokens = _kpi("tokens_total", "tokens trained so far")

    def __repr__(self) -> str:
        return (f"JobStatus({self.name!r}, running={self.running}, step={self.step}, "
                f"step_time_s={self.step_time_s}, mfu={self.mfu})")


class _Lazy:
    """One per-GPU array: the latest run-length encoding, decoded into `array` on first read."""

    __slots__ = ("array", "decoded", "pending", "scale")

    def __init__(self, array: np.ndarray, scale: float | None = None) -> None:
        self.array = array
        self.pending: dict[str, list[Any]] | None = None
        self.decoded: dict[str, list[Any]] | None = None
        self.scale = scale

    def get(self) -> np.ndarray:
        rle = self.pending
        if rle is not None:
            self.pending = None
            last = self.decoded
            if last is None or not (_same(rle["n"], last["n"]) and _same(rle["v"], last["v"])):
                try:
                    schema.rle_decode(rle, out=self.array)
                except (ValueError, TypeError, KeyError):
                    self.array[:] = 0     # a malformed array shows as zeros rather than stopping the UI
                if self.scale is not None:
                    self.array *= self.array.dtype.type(self.scale)
                self.decoded = rle
        return self.array


def _same(a: Any, b: Any) -> bool:
    """Whether two run-length halves (lists as parsed, or numpy arrays) hold the same values."""
    if a is b:
        return True
    if type(a) is list and type(b) is list:
        return bool(a == b)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and bool((a == b).all())
    return False


class PhaseMix:
    """Each GPU's phase shares over the latest sample's interval, decoded from its `phase_mix` on first read.

    `rows` (int32 per GPU) index `table` (rows x phases, fractions 0..1). Without `phase_mix` (recordings made
    before it) a GPU's share is all of its dominant phase; a row of no time at all (the instant t = 0) falls
    back the same way.
    """

    __slots__ = ("_phase", "header", "pending", "rows", "table")

    def __init__(self, header: dict[str, Any], phase: _Lazy) -> None:
        self.header = header
        self._phase = phase
        self.pending: dict[str, Any] | None = None
        self.rows: np.ndarray | None = None
        self.table = np.eye(len(PHASES), dtype=np.float32)

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, table), decoding the pending phase_mix if any."""
        mix, self.pending = self.pending, None
        if mix is not None:
            try:
                self.rows, self.table = self._decode(mix)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError):
                self.rows = None      # malformed (the reader does not check it): the dominant phase stands in
        if self.rows is None:
            return self._phase.get().astype(np.int32), np.eye(len(PHASES), dtype=np.float32)
        return self.rows, self.table

    def _decode(self, mix: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        codes = [PHASES.index(name) if name in PHASES else CODE["idle"] for name in mix["phases"]]
        shares = np.asarray(mix["shares"], dtype=np.float32).reshape(-1, len(codes))
        table = np.zeros((shares.shape[0] + len(PHASES), len(PHASES)), dtype=np.float32)
        # numpy documents a tuple of slices and index arrays for `indices`; its stubs accept arrays only
        np.add.at(table, (slice(0, shares.shape[0]), codes), shares / 100.0)  # type: ignore[arg-type]
        table[shares.shape[0]:] = np.eye(len(PHASES), dtype=np.float32)
        gpus = int(self.header["topology"]["gpus"])
        rows = np.full(gpus, int(mix.get("other", 0)), dtype=np.int32)
        for info in self.header.get("jobs", []):
            job_rows = mix.get("jobs", {}).get(info["name"])
            if job_rows is None:
                continue
            job = JobGeometry.from_entry(info)
            stage = stage_of(job.gpus, job.stride("pp"), len(job_rows))   # the rows are the job's stages
            rows[job.first_gpu:job.first_gpu + job.gpus] = np.asarray(job_rows, dtype=np.int32)[stage]
        extra = mix.get("gpus")
        if extra:
            for at, count, row in zip(extra["at"], extra["n"], extra["v"]):
                rows[at:at + count] = row
        if rows.size and (int(rows.max()) >= shares.shape[0] or int(rows.min()) < 0):
            raise ValueError("phase_mix row out of range")
        empty = table[:shares.shape[0]].sum(axis=1) <= 0
        if empty.any():                          # no time in the window: the dominant phase it reports
            lost = empty[rows]
            rows[lost] = shares.shape[0] + self._phase.get()[lost].astype(np.int32)
        return rows, table

    def shares(self, gpu0: int, gpu1: int) -> np.ndarray:
        """Mean phase shares (fractions per phase code) of GPUs [gpu0, gpu1)."""
        rows, table = self.get()
        seg = rows[gpu0:gpu1]
        if seg.size == 0:
            return np.zeros(len(PHASES), dtype=np.float32)
        counts = np.bincount(seg, minlength=table.shape[0])
        mean: np.ndarray = (counts @ table) / seg.size
        return mean

    def per_gpu(self, gpu0: int, gpu1: int) -> np.ndarray:
        """Phase shares of each GPU of [gpu0, gpu1): (gpus, phases) fractions."""
        rows, table = self.get()
        each: np.ndarray = table[rows[gpu0:gpu1]]
        return each


def link_scope(header: dict[str, Any]) -> dict[str, str]:
    """Per tier, what a list of its loads in a sample is per: "pod" or "building" (older recordings: pods)."""
    scope = header.get("link_scope")
    return {str(k): str(v) for k, v in scope.items()} if isinstance(scope, dict) else {}


class ClusterState:
    """The cluster at simulated time `t`: per-GPU arrays, link loads and site power now, and its jobs."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.header = header
        self.topology: dict[str, int] = header["topology"]
        self.gpus = int(self.topology["gpus"])
        self.link_scope = link_scope(header)
        self.t = 0.0
        # samples folded into this state: 0 means nothing measured yet. Not a count of the stream's samples up
        # to t: a state the dashboard rebuilds for a seek (tui/index.py) starts from one keyframe, so 1.
        self.samples = 0
        self._util = _Lazy(np.zeros(self.gpus, dtype=np.float32), scale=0.01)   # 0..1 (percent on the wire)
        self._power = _Lazy(np.zeros(self.gpus, dtype=np.float32))
        self._phase = _Lazy(np.full(self.gpus, CODE["idle"], dtype=np.uint8))
        self.mix = PhaseMix(header, self._phase)     # phase shares over the interval (`phase_mix`)
        # GB in use (real telemetry: `memory_gb`)
        self._memory = _Lazy(np.zeros(self.gpus, dtype=np.float32))
        self._has_memory = False
        self._missing: dict[str, Any] = {}           # the latest sample's `missing`: key -> run-length 0/1
        self._missing_cache: dict[str, tuple[Any, np.ndarray]] = {}
        self._links: dict[str, np.ndarray] = {}
        self._loads: dict[str, Any] | None = None      # the latest sample's "links", until read
        # Real telemetry: a sample holds what reported at its time, so a tier or the site power it leaves out
        # has no reading now (missing: NaN, the tier gone), never the last one held.
        self.measured = "telemetry" in header
        self.site_mw = 0.0
        self.budget_mw: float | None = header.get("power", {}).get("site_power_budget_mw")
        self.over_budget = False             # the latest sample's mean site power exceeds the budget
        self.jobs: dict[str, JobStatus] = {}
        for info in header.get("jobs", []):
            self.jobs[info["name"]] = JobStatus(info["name"], int(info["first_gpu"]), int(info["gpus"]),
                                                info=info)
        self.version = 0   # bumped on every change; widgets redraw when it moves
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            schema.SAMPLE: self._sample, schema.JOB_START: self._job_event,
            schema.JOB_STOP: self._job_event, schema.HEADER: _ignore, schema.FAULT: self._fault,
            schema.MAINTENANCE: self._maintenance, schema.RESTART: self._restart,
            schema.CHECKPOINT_END: self._checkpoint_end, schema.CONTENTION: self._contention}

    @property
    def util(self) -> np.ndarray:
        """Per-GPU utilization, 0..1 (float32)."""
        return self._util.get()

    @property
    def power_w(self) -> np.ndarray:
        """Per-GPU power in W (float32)."""
        return self._power.get()

    @property
    def phase(self) -> np.ndarray:
        """Per-GPU phase code (uint8, engine.config.phases.PHASES)."""
        return self._phase.get()

    @property
    def links(self) -> dict[str, np.ndarray]:
        """Tier -> load 0..1 (float32: one value, or one per pod or building)."""
        loads, self._loads = self._loads, None
        if loads is not None:
            for tier, load in loads.items():
                self._links[tier] = np.atleast_1d(np.asarray(load, dtype=np.float32))
        return self._links

    @property
    def memory_gb(self) -> np.ndarray | None:
        """Per-GPU memory in use in GB (float32) when the latest sample measured it (real telemetry), else
        None."""
        return self._memory.get() if self._has_memory else None

    def missing(self, key: str) -> np.ndarray | None:
        """GPUs without a reading of `key` ("util", "power_w", "memory_gb") in the latest sample, as a bool
        array; None when every GPU has one (always, in a simulated run). Their values in the arrays are 0
        placeholders."""
        rle = self._missing.get(key)
        if rle is None:
            return None
        cached = self._missing_cache.get(key)
        if cached is not None and cached[0] is rle:
            return cached[1]
        try:
            flags = schema.rle_decode(rle, out=np.zeros(self.gpus, dtype=bool))
        except (ValueError, TypeError, KeyError):
            flags = np.zeros(self.gpus, dtype=bool)     # malformed: nothing shown as missing
        self._missing_cache[key] = (rle, flags)
        return flags

    def mean(self, key: str, gpu0: int = 0, gpu1: int | None = None) -> float | None:
        """Mean of "util" (0..1) or "power_w" over GPUs [gpu0, gpu1) that have a reading; None when none
        has."""
        values = (self.util if key == "util" else self.power_w)[gpu0:gpu1]
        missing = self.missing(key)
        if missing is not None:
            values = values[~missing[gpu0:gpu1]]
        return float(values.mean(dtype=np.float64)) if values.size else None

    def uses(self, kind: str) -> bool:
        """Whether folding an event of type `kind` changes more than the state's time (a reader's fold passes
        over the others unparsed, and over steps that a later step of their job replaces: Reader.fold)."""
        return kind == schema.STEP or self._handlers.get(kind, _ignore) is not _ignore

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event into the state."""
        self.fold((event,))

    def fold(self, events: Iterable[dict[str, Any]]) -> None:
        """Fold events into the state, in order. The step, the most frequent event, is folded inline (a 54-day
        replay folds 640,000); the others by their handler."""
        jobs, handlers = self.jobs, self._handlers
        event = None
        for event in events:
            kind = event["type"]
            if kind == "step":
                job = jobs.get(event["job"])
                if job is not None:
                    job._src = event
                    job.running = True
            else:
                handler = handlers.get(kind)
                if handler is not None:
                    handler(event)
        if event is not None:
            self.t = event["t"]
            self.version += 1          # widgets redraw when it moves

    def _job_event(self, event: dict[str, Any]) -> None:
        job = self.jobs.get(event.get("job", ""))
        if job is not None:
            job.running = event["type"] == schema.JOB_START
            job.stop_reason = "" if job.running else str(event.get("reason", ""))

    def _fault(self, event: dict[str, Any]) -> None:
        job = self.jobs.get(event.get("job") or "")
        if job is not None:          # `running` stays as the samples say it (they carry it every interval)
            if not job.down:
                job.down_since = float(event["t"])
            job.down = True
            job.interruptions += 1

    def _maintenance(self, event: dict[str, Any]) -> None:
        job = self.jobs.get(event.get("job") or "")
        if job is not None:
            job.interruptions += 1

    def _restart(self, event: dict[str, Any]) -> None:
        """Training again from a checkpoint: the step and token counters go back to it."""
        job = self.jobs.get(event.get("job") or "")
        if job is None:
            return
        job.running = True
        job.down = False
        job.down_since = None
        job.tokens_lost += int(event.get("lost_tokens", 0))
        job.time_lost_s += float(event.get("lost_s", 0.0)) + float(event.get("downtime_s", 0.0))
        back = {k: event[src]
                for k, src in (("step", "from_checkpoint_step"), ("tokens_total", "tokens_total"))
                if src in event}
        if back:
            job._src = {**job._src, **back}

    def _contention(self, event: dict[str, Any]) -> None:
        """The running jobs changed: each running job's slowdown and shares now; a job not running shares
        none."""
        jobs = event.get("jobs")
        now = ({e["job"]: e for e in jobs if isinstance(e, dict) and "job" in e}
               if isinstance(jobs, list) else {})
        for name, job in self.jobs.items():
            if job.contention or name in now:
                entry = now.get(name, {})
                job.contention = {k: entry[k] for k in schema.CONTENTION_KEYS if k in entry}

    def _checkpoint_end(self, event: dict[str, Any]) -> None:
        job = self.jobs.get(event.get("job") or "")
        if job is not None and event.get("ok", True):
            job.checkpoints += 1

    def _sample(self, event: dict[str, Any]) -> None:
        self.samples += 1
        for lazy, key in ((self._util, "util"), (self._power, "power_w"), (self._phase, "phase")):
            rle = event.get(key)
            if rle is not None:
                if type(rle) is not dict or len(rle["v"]) != len(rle["n"]):
                    raise ValueError(f"{key} is not a run-length array")
                lazy.pending = rle
        memory = event.get("memory_gb")
        self._has_memory = memory is not None
        if memory is not None:
            if type(memory) is not dict or len(memory["v"]) != len(memory["n"]):
                raise ValueError("memory_gb is not a run-length array")
            self._memory.pending = memory
        missing = event.get("missing", {})
        if type(missing) is not dict:
            raise ValueError("missing is not an object of run-length arrays")
        self._missing = missing
        mix = event.get("phase_mix")
        if type(mix) is dict:
            self.mix.pending = mix
        else:                        # an older sample: the dominant phase stands in for the shares
            self.mix.pending = self.mix.rows = None
        loads = event.get("links")
        if self.measured:
            self._loads = loads or {}
            self._links = {}
            self.site_mw = float(event["site_mw"]) if "site_mw" in event else math.nan
        else:
            if loads:
                if self._loads is not None:           # not read since the last sample: keep its tiers too
                    loads = {**self._loads, **loads}
                self._loads = loads
            if "site_mw" in event:
                self.site_mw = float(event["site_mw"])
        self.over_budget = bool(event.get("over_budget", False))
        for name, status in event.get("jobs", {}).items():
            job = self.jobs.get(name)
            if job is not None:
                job.running = bool(status.get("running", job.running))
                job._src = status
                if "interruptions" in status:
                    job.interruptions = int(status["interruptions"])
                    job.tokens_lost = int(status.get("tokens_lost", job.tokens_lost))
                    job.effective_training_time = status.get("effective_training_time")


def _ignore(event: dict[str, Any]) -> None:
    return None
