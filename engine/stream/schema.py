"""The event stream schema (JSON Lines): the contract between the engine and the dashboard.

Both sides import this module; it imports neither SimPy nor Textual. The full description with examples is
docs/events.md.

- Line 1 is the header: {"type": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
  "scenario": {...}, "topology": {...}, "jobs": [...], "seed": int, "sample_interval_s": float,
  "duration_s": float, "sampling": "mean", "tiers": [...], "link_scope": {...}, "phases": [...],
  "phase_util": [...], "power": {...}}.
- Every later line has "t" (simulated seconds, never decreasing) and "type".
- Samples ("sample") carry full state as exact means over (t - interval, t]: "util" (integer percent),
  "power_w" (integer W) and "phase" (the dominant phase code) per GPU, "phase_mix" (each GPU's share of the
  interval per phase, integer percent, by symmetry: a table of distinct rows, each job's row per pipeline
  stage, the row of GPUs without a job, runs of GPUs that differ; optional: older recordings lack it), "links"
  (tier -> load 0..1, a list per pod for the tiers inside pods), "site_mw", and "jobs" (each job's status).
- Discrete events: "step", "job_start", "job_stop", "fault", "restart", "maintenance", "checkpoint_start",
  "checkpoint_end", "power_swing", "contention";
  real telemetry adds "target_down", "target_up", "hosts_placed".
- Real telemetry's samples may add "memory_gb" (per GPU) and "missing" (per key, which GPUs have no reading).
- Per-GPU arrays travel run-length encoded in GPU order: {"v": [values...], "n": [counts...]}.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..config.errors import UserError

SCHEMA = "clustertop.events"
SCHEMA_VERSION = 1
MAX_LINE_BYTES = 64 << 20     # the longest line a reader takes (and so the longest sample a run may write)

# Event types (docs/events.md).
HEADER = "header"
SAMPLE = "sample"
STEP = "step"
JOB_START = "job_start"
JOB_STOP = "job_stop"
FAULT = "fault"
RESTART = "restart"
MAINTENANCE = "maintenance"
CHECKPOINT_START = "checkpoint_start"
CHECKPOINT_END = "checkpoint_end"
POWER_SWING = "power_swing"
CONTENTION = "contention"
# A job's figures with its neighbours (engine/model/contention.py): in its header entry, and per job in a
# "contention" event.
CONTENTION_KEYS = ("contention_slowdown", "contention_tier", "contention_shares")

# Where each tier's load is given in a sample's "links": one value per pod for the links of a pod (inside it,
# and its uplinks to the other pods), one per building for a building's links to the others (header
# "link_scope").
LINK_SCOPE = {"node": "pod", "leaf": "pod", "spine": "pod", "core": "pod", "campus": "building"}
# Real telemetry (docs/telemetry.md): an endpoint stops or starts answering; hosts first seen late are placed.
TARGET_DOWN = "target_down"
TARGET_UP = "target_up"
HOSTS_PLACED = "hosts_placed"
HOSTS_UNPLACED = "hosts_unplaced"       # hosts answering with no node (not in cluster.hosts, or too many)


def rle_arrays(values: np.ndarray, starts: np.ndarray | None = None,
               size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Run-length encoding as arrays (values, counts): contiguous blocks of equal value collapse.

    `values` is one value per GPU; or, with `starts` (sorted, from 0) and `size`, the value of each block of
    GPUs [starts[i], starts[i + 1]) up to `size` (the simulation's stages broadcast over their GPUs), equal
    neighbouring blocks merged.
    """
    values = np.asarray(values)
    if values.size == 0:
        return values, np.zeros(0, np.int64)
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    first = np.flatnonzero(keep) if starts is None else starts[keep]
    return values[keep], run_lengths(first, values.size if size is None else size)


def run_lengths(first: np.ndarray, end: int) -> np.ndarray:
    """The length of each run from the index where each starts (sorted, at least one) and where the last one
    ends: `np.diff(first, append=end)`, without its generality (a sample takes several)."""
    lengths = np.empty(first.size, first.dtype)
    np.subtract(first[1:], first[:-1], out=lengths[:-1])
    lengths[-1] = end - first[-1]
    return lengths


def rle_encode(values: np.ndarray, starts: np.ndarray | None = None,
               size: int | None = None) -> dict[str, list[Any]]:
    """Run-length encode a 1-D array (or blocks of GPUs, see rle_arrays) as the stream carries it."""
    v, n = rle_arrays(values, starts, size)
    return {"v": v.tolist(), "n": n.tolist()}


def rle_decode(rle: dict[str, list[Any]], dtype: Any = None, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of rle_encode; writes into `out` when given (no allocation on the hot path).

    ValueError when the runs are malformed or do not cover `out` exactly.
    """
    v, n = rle["v"], rle["n"]
    if len(v) != len(n):
        raise ValueError(f"run-length array has {len(v)} values but {len(n)} counts")
    if out is not None and len(v) <= 32:
        # Few runs (the symmetric case): assign slices, no temporary arrays.
        start = 0
        for value, count in zip(v, n):
            # a Python int: counts kept in a narrow numpy dtype (the seek index's keyframes) would make the
            # sum that narrow and wrap around (128 x 4 in uint8 is 0); not a whole number: TypeError
            count = operator.index(count)
            if count < 0:
                raise ValueError("run-length array has a negative count")
            out[start:start + count] = value
            start += count
        if start != out.size:
            raise ValueError(f"run-length array covers {start} GPUs, expected {out.size}")
        return out
    values = np.asarray(v, dtype=dtype if out is None else out.dtype)
    counts = np.asarray(n, dtype=np.int64)
    if counts.size and counts.min() < 0:
        raise ValueError("run-length array has a negative count")
    if out is None:
        return np.repeat(values, counts)
    total = int(counts.sum())
    if total != out.size:
        raise ValueError(f"run-length array covers {total} GPUs, expected {out.size}")
    out[:] = np.repeat(values, counts)
    return out


def check_header(obj: Any, where: str) -> dict[str, Any]:
    """The header line, checked: right schema and a version this reader understands."""
    if not isinstance(obj, dict) or obj.get("type") != HEADER:
        raise UserError("expected a clustertop recording: line 1 must be the header "
                        "({\"type\": \"header\", ...})", where)
    if obj.get("schema") != SCHEMA:
        raise UserError(f"schema {obj.get('schema')!r} is not {SCHEMA!r}; not a clustertop recording", where)
    version = obj.get("schema_version")
    if not isinstance(version, int):
        raise UserError("header has no integer schema_version", where)
    if version > SCHEMA_VERSION:
        raise UserError(f"recording uses schema_version {version}, newer than this clustertop understands "
                        f"({SCHEMA_VERSION}); upgrade clustertop to read it", where)
    return obj


__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "check_header",
    "rle_arrays",
    "rle_decode",
    "rle_encode",
]
