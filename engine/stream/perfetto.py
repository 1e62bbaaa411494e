"""Export a recording as Chrome Trace Event JSON, which the Perfetto UI (ui.perfetto.dev) opens.

Processes and tracks:
- "Cluster": counters for site power (MW) and the load of every link tier (%, one series per pod for the
  tiers inside pods), and instants for cluster-wide events.
- "Utilization by stage": a counter per pipeline stage of every job (mean utilization % of its GPUs).
- "Utilization by pod": a counter per pod (mean utilization % of its GPUs).
- One process per job: thread "steps" with one slice per training step (args: tokens/s, TFLOP/s, MFU);
  thread "state" with a "running" slice from job_start to job_stop; thread "events" with the job's other
  events as instants, and `X_start` / `X_end` pairs (checkpoints) as slices.
Process and thread names and sort order are metadata events. Counters are written only when they change.
The file is written to a temporary name and renamed at the end, so a failed export leaves nothing behind; a
FIFO or a device (/dev/stdout) is written through instead (engine/config/outfile.py).
"""

from __future__ import annotations

from typing import IO, Any, BinaryIO

import numpy as np
import orjson

from ..config import outfile
from ..config.errors import UserError
from ..config.geometry import JobGeometry
from ..config.outfile import Output, open_output
from . import schema
from .reader import Reader, Warn
from .state import link_scope

CLUSTER_PID = 1
STAGE_PID = 2
POD_PID = 3
JOB_PID0 = 10
STEPS_TID, STATE_TID, EVENTS_TID = 1, 2, 3
CLUSTER_EVENTS_TID = 1


def _us(t: float) -> float:
    return round(t * 1e6, 3)


class _Writer:
    def __init__(self, out: IO[bytes] | Output) -> None:
        self.out = out
        self.count = 0

    def __call__(self, event: dict[str, Any]) -> None:
        self.out.write(b",\n" if self.count else b"\n")
        self.out.write(orjson.dumps(event))
        self.count += 1


class _Counters:
    """Counter events, written only when a counter's values change."""

    def __init__(self, write: _Writer) -> None:
        self.write = write
        self.last: dict[tuple[int, str], Any] = {}

    def __call__(self, pid: int, name: str, ts: float, args: dict[str, float]) -> None:
        key = (pid, name)
        if self.last.get(key) == args:
            return
        self.last[key] = args
        self.write({"ph": "C", "pid": pid, "name": name, "ts": ts, "args": args})


def export(source: str | BinaryIO, output: str, warn: Warn | None = None) -> dict[str, Any]:
    """Write the Perfetto trace of a recording to `output`; returns counts for a summary."""
    reader = Reader(source, warn)
    try:
        out = open_output(output, atomic=True)
    except BaseException:
        reader.close()
        raise
    try:
        stats = _export(reader, out)
    except BaseException:
        reader.close()
        out.abort()
        raise
    out.close()
    return stats


def _export(reader: Reader, out: IO[bytes] | Output) -> dict[str, Any]:
    header = reader.header
    write = _Writer(out)
    out.write(orjson.dumps({"displayTimeUnit": "ms", "otherData": {
        "source": "clustertop", "scenario": header.get("scenario", {}).get("name", ""),
        "schema_version": header.get("schema_version")}})[:-1] + b',"traceEvents":[')
    trace = _Trace(header, write)
    steps = samples = 0
    last_t = 0.0
    for event in reader.events():
        kind = event["type"]
        last_t = float(event["t"])
        if kind == schema.SAMPLE:
            samples += 1
            trace.sample(event)
        elif kind == schema.STEP:
            steps += 1
            trace.step(event)
        else:
            trace.event(event)
    trace.close(_us(last_t))
    out.write(b"\n]}\n")
    return {"trace_events": write.count, "steps": steps, "samples": samples, "sim_seconds": last_t}


class _Trace:
    """The trace's processes and threads (written first, as metadata), then what each event adds to them."""

    def __init__(self, header: dict[str, Any], write: _Writer) -> None:
        self.write = write
        self.counter = _Counters(write)
        self.scope = link_scope(header)
        self.open_slices: dict[tuple[int, int, str], float] = {}
        self.step_end: dict[int, float] = {}        # per job process: where its last step slice ended (µs)
        self.last_util: Any = None
        gpus = int(header["topology"]["gpus"])
        self.meta(CLUSTER_PID, f"Cluster ({gpus:,} GPUs)", 0)
        self.meta(CLUSTER_PID, "events", 0, CLUSTER_EVENTS_TID)
        self.meta(STAGE_PID, "Utilization by stage", 1)
        self.meta(POD_PID, "Utilization by pod", 2)
        jobs = header.get("jobs", [])
        self.job_pid = {}
        for i, job in enumerate(jobs):
            pid = JOB_PID0 + i
            self.job_pid[job["name"]] = pid
            self.meta(pid, f"job {job['name']} ({job.get('model', '')}, {int(job['gpus']):,} GPUs)", 10 + i)
            for tid, name in ((STEPS_TID, "steps"), (STATE_TID, "state"), (EVENTS_TID, "events")):
                self.meta(pid, name, tid, tid)
        self.stages, self.stage_names = _stages(jobs)
        per_pod = int(header["topology"].get("gpus_per_pod", gpus)) or gpus
        pod_starts = np.arange(0, gpus, per_pod)
        self.pods = _Groups([pod_starts], [np.minimum(pod_starts + per_pod, gpus)],
                            [np.arange(len(pod_starts))], len(pod_starts))

    def meta(self, pid: int, name: str, sort: int, tid: int | None = None) -> None:
        """Names and order of processes and threads."""
        if tid is None:
            self.write({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}})
            self.write({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort}})
        else:
            self.write({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
            self.write({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                        "args": {"sort_index": sort}})

    def sample(self, event: dict[str, Any]) -> None:
        """Counters: utilization by stage and by pod (when the array changed), site power, link loads."""
        ts = _us(float(event["t"]))
        util = event.get("util")
        if util is not None and util is not self.last_util:       # the means change only with the array
            self.last_util = util
            for name, value in zip(self.stage_names, self.stages.means(util).tolist()):
                self.counter(STAGE_PID, name, ts, {"util %": round(value, 1)})
            for p, value in enumerate(self.pods.means(util).tolist()):
                self.counter(POD_PID, f"pod {p}", ts, {"util %": round(value, 1)})
        if "site_mw" in event:
            self.counter(CLUSTER_PID, "site power (MW)", ts, {"MW": event["site_mw"]})
        for tier, load in event.get("links", {}).items():
            if isinstance(load, list):
                per = self.scope.get(tier, "pod")
                args = {f"{per} {p}": round(100.0 * float(x), 1) for p, x in enumerate(load)}
            else:
                args = {"load %": round(100.0 * float(load), 1)}
            self.counter(CLUSTER_PID, f"link {tier} (%)", ts, args)

    def step(self, event: dict[str, Any]) -> None:
        """A slice on its job's "steps" thread, from the step's start to its end."""
        pid = self.job_pid.get(event.get("job", ""), CLUSTER_PID)
        t = float(event["t"])
        end = _us(t)
        # A step starts where the previous one ended at the earliest: rounded step times would otherwise make
        # adjacent slices overlap by a microsecond (a restart's step starts later anyway).
        start = max(_us(t - float(event.get("step_time_s", 0.0))), self.step_end.get(pid, 0.0))
        start = min(start, end)
        self.step_end[pid] = end
        self.write({"ph": "X", "pid": pid, "tid": STEPS_TID, "name": f"step {event.get('step')}",
                    "ts": start, "dur": round(end - start, 3),
                    "args": {k: event[k] for k in ("tokens_per_s", "tflops_per_gpu", "mfu") if k in event}})

    def event(self, event: dict[str, Any]) -> None:
        """A discrete event: the job's running slice, an instant, or a slice from an X_start to its X_end."""
        kind = event["type"]
        pid = self.job_pid.get(event.get("job", ""), CLUSTER_PID)
        ts = _us(float(event["t"]))
        args = {k: v for k, v in event.items() if k not in ("t", "type")}
        tid = EVENTS_TID if pid != CLUSTER_PID else CLUSTER_EVENTS_TID
        if kind == schema.JOB_START:
            _begin(self.write, self.open_slices, pid, STATE_TID, "running", ts, args)
        elif kind == schema.JOB_STOP:
            _end(self.write, self.open_slices, pid, STATE_TID, "running", ts)
            self.write({"ph": "i", "s": "t", "pid": pid, "tid": STATE_TID,
                        "name": f"stop: {event.get('reason', '')}", "ts": ts, "args": args})
        elif kind.endswith("_start"):
            _begin(self.write, self.open_slices, pid, tid, kind[:-6], ts, args)
        elif kind.endswith("_end"):
            _end(self.write, self.open_slices, pid, tid, kind[:-4], ts)
        else:
            self.write({"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": kind, "ts": ts, "args": args})

    def close(self, ts: float) -> None:
        """End the slices still open at the last event."""
        for (pid, tid, name) in list(self.open_slices):
            _end(self.write, self.open_slices, pid, tid, name, ts)


def _stages(jobs: list[dict[str, Any]]) -> tuple[_Groups, list[str]]:
    """The GPU ranges of each (job, pipeline stage), for means computed from a sample's runs (not per GPU),
    and the stages' counter names."""
    stage_starts, stage_ends, stage_of = [], [], []
    stage_names: list[str] = []
    for job in jobs:
        where = JobGeometry.from_entry(job)
        starts, stage = where.units()
        stage_starts.append(starts)
        stage_ends.append(np.minimum(starts + where.unit, where.first_gpu + where.gpus))
        stage_of.append(len(stage_names) + stage)
        stage_names += [f"{job['name']} stage {s:02d}" if where.pp > 1 else f"{job['name']}"
                        for s in range(where.pp)]
    return _Groups(stage_starts, stage_ends, stage_of, len(stage_names)), stage_names


class _Groups:
    """Groups of GPUs as ranges [start, end) (a pipeline stage: one range of tp * cp GPUs per replica; a pod:
    one range), and the mean of a run-length encoded per-GPU array over each group, from the runs: its cost
    grows with the runs and the ranges, not with the GPUs (a 10M-GPU header costs nothing per sample)."""

    def __init__(self, starts: list[np.ndarray], ends: list[np.ndarray], group: list[np.ndarray],
                 count: int) -> None:
        self.starts = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        self.ends = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
        self.group = np.concatenate(group) if group else np.zeros(0, dtype=np.int64)
        self.count = count
        self.sizes = np.maximum(np.bincount(self.group, weights=self.ends - self.starts, minlength=count), 1)

    def means(self, rle: dict[str, list[Any]]) -> np.ndarray:
        """Mean value of each group ("util" runs in percent give percent)."""
        if not self.count:
            return np.zeros(0)
        values = np.asarray(rle["v"], dtype=np.float64)
        counts = np.asarray(rle["n"], dtype=np.int64)
        ends = np.cumsum(counts)                                # where each run ends
        below = np.concatenate([[0.0], np.cumsum(values * counts)])   # sum of the runs before each

        def upto(x: np.ndarray) -> np.ndarray:                  # sum of the values of GPUs [0, x)
            k = np.minimum(np.searchsorted(ends, x, side="right"), len(values) - 1)
            start = ends[k] - counts[k]
            total: np.ndarray = below[k] + values[k] * np.clip(x - start, 0, counts[k])
            return total

        sums = upto(self.ends) - upto(self.starts)
        return np.bincount(self.group, weights=sums, minlength=self.count) / self.sizes


def _begin(write: _Writer, open_slices: dict[tuple[int, int, str], float], pid: int, tid: int, name: str,
           ts: float, args: dict[str, Any]) -> None:
    key = (pid, tid, name)
    if key in open_slices:
        _end(write, open_slices, pid, tid, name, ts)
    open_slices[key] = ts
    write({"ph": "B", "pid": pid, "tid": tid, "name": name, "ts": ts, "args": args})


def _end(write: _Writer, open_slices: dict[tuple[int, int, str], float], pid: int, tid: int, name: str,
         ts: float) -> None:
    if open_slices.pop((pid, tid, name), None) is not None:
        write({"ph": "E", "pid": pid, "tid": tid, "name": name, "ts": ts})


def check_output(path: str) -> None:
    """UserError unless the trace can be written there (nothing is created)."""
    if path == "-":
        raise UserError("the trace needs a file name, not stdout", "-o")
    outfile.check_output(path)


__all__ = ["UserError", "check_output", "export"]
