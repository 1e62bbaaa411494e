"""The event stream schema (JSON Lines): the contract between the engine and the dashboard.

Both sides import this module; it imports neither SimPy nor Textual. The full description with examples is
docs/events.md.

- Line 1 is the header: {"type": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "scenario": {...},
  "topology": {...}, "jobs": [...], "seed": int, "sample_interval_s": float, "duration_s": float,
  "tiers": [...], "phases": [...]}.
- Every later line has "t" (simulated seconds, never decreasing) and "type".
- Per-GPU arrays travel run-length encoded in GPU order: {"v": [values...], "n": [counts...]}.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UserError
from .phases import PHASES

SCHEMA = "clustertop.events"
SCHEMA_VERSION = 1

# Event types. Later issues append (fault, restart, maintenance, checkpoint_start, checkpoint_end, power_swing).
HEADER = "header"
SAMPLE = "sample"
STEP = "step"
JOB_START = "job_start"
JOB_STOP = "job_stop"


def rle_encode(values: np.ndarray) -> dict[str, list[Any]]:
    """Run-length encode a 1-D array: contiguous blocks of equal value collapse into (value, count)."""
    values = np.asarray(values)
    if values.size == 0:
        return {"v": [], "n": []}
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts = np.concatenate(([0], change))
    counts = np.diff(np.concatenate((starts, [values.size])))
    return {"v": values[starts].tolist(), "n": counts.tolist()}


def rle_decode(rle: dict[str, list[Any]], dtype: Any = None, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of rle_encode; writes into `out` when given (no allocation on the hot path)."""
    values = np.asarray(rle["v"], dtype=dtype)
    counts = np.asarray(rle["n"], dtype=np.int64)
    if out is None:
        return np.repeat(values, counts)
    ends = np.cumsum(counts)
    if ends.size and ends[-1] != out.size:
        raise ValueError(f"run-length array covers {int(ends[-1])} GPUs, expected {out.size}")
    # Assign per run: cheap when runs are few (the common, symmetric case); repeat otherwise.
    if values.size * 8 < out.size:
        start = 0
        for v, end in zip(values.tolist(), ends.tolist()):
            out[start:end] = v
            start = end
    else:
        out[:] = np.repeat(values, counts)
    return out


def check_header(obj: Any, where: str) -> dict[str, Any]:
    """The header line, checked: right schema and a version this reader understands."""
    if not isinstance(obj, dict) or obj.get("type") != HEADER:
        raise UserError("expected a clustertop recording: line 1 must be the header ({\"type\": \"header\", ...})",
                        where)
    if obj.get("schema") != SCHEMA:
        raise UserError(f"schema {obj.get('schema')!r} is not {SCHEMA!r}; not a clustertop recording", where)
    version = obj.get("schema_version")
    if not isinstance(version, int):
        raise UserError("header has no integer schema_version", where)
    if version > SCHEMA_VERSION:
        raise UserError(f"recording uses schema_version {version}, newer than this clustertop understands "
                        f"({SCHEMA_VERSION}); upgrade clustertop to read it", where)
    return obj


__all__ = ["SCHEMA", "SCHEMA_VERSION", "PHASES", "rle_encode", "rle_decode", "check_header"]
