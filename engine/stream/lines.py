"""The stream's lines as bytes, as every writer serializes them: times on the wire, a line, a sample line.

orjson, compact, `\\n` after every line (docs/events.md). A sample's keys come in one order whoever writes
it; a part may arrive already serialized (bytes), so the simulation keeps its per-GPU arrays encoded once
and reuses them for every sample that comes out the same (engine/sim/sampling.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from . import schema

OPT = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
OPT_PART = orjson.OPT_SERIALIZE_NUMPY
# A sample's keys after "t" and "type", in the order they are written (each optional but the per-GPU arrays).
SAMPLE_KEYS = ("util", "power_w", "phase", "phase_mix", "memory_gb", "missing", "links", "site_mw",
               "over_budget", "jobs")
_PREFIX = {key: b',"' + key.encode() + b'":' for key in SAMPLE_KEYS}


def wire_time(t: float) -> float:
    """Times on the wire: seconds, microsecond resolution: `round(t, 6)`, which goes through a decimal
    string; quickly where the microseconds t * 1e6 (within 1/16 of a microsecond below 1e9 s) are clearly
    not a half away from the nearest integer m, so that m is the rounded count and m / 1e6 the double
    round() returns."""
    if -1e9 < t < 1e9:
        us = t * 1e6
        m = round(us)
        if m and -0.4375 < us - m < 0.4375:
            return m / 1e6
    return float(round(t, 6))


def time_json(t: float) -> bytes:
    """`wire_time(t)` serialized, quickly: for 1e-3 <= t < 1e9 its six-decimal form without trailing zeros
    (there decimals 1e-6 apart are distinct doubles, so that is the shortest repr of round(t, 6), which orjson
    writes); elsewhere orjson's."""
    if 1e-3 <= t < 1e9:
        text = (b"%.6f" % t).rstrip(b"0")
        return text + b"0" if text[-1] == 46 else text      # "5." -> "5.0"
    return orjson.dumps(wire_time(t))


def times_json(ts: list[float]) -> list[bytes]:
    """`time_json` of each of `ts`, in fewer calls (a stretch of steps)."""
    if ts and 1e-3 <= min(ts) and max(ts) < 1e9:
        texts = [(b"%.6f" % t).rstrip(b"0") for t in ts]
        return [text + b"0" if text[-1] == 46 else text for text in texts]
    return [time_json(t) for t in ts]


def line(obj: dict[str, Any]) -> bytes:
    """One line of the stream (the header, an event): `obj` as JSON and a newline."""
    return orjson.dumps(obj, option=OPT)


def rle_json(values: np.ndarray, starts: np.ndarray | None = None, size: int | None = None) -> bytes:
    """A per-GPU array run-length encoded (schema.rle_arrays), serialized: a sample part."""
    v, n = schema.rle_arrays(values, starts, size)
    data = orjson.dumps({"v": v, "n": n}, option=OPT_PART)
    # orjson's bytes keep its buffer's spare capacity (often several times the length): a part, which the
    # simulation keeps for reuse, is copied to its exact size
    return data if len(data) < 1 << 10 else memoryview(data).tobytes()


def sample_line(t: float, *, util: Any, power_w: Any, phase: Any, phase_mix: Any = None,
                memory_gb: Any = None, missing: Any = None, links: Any = None, site_mw: float | None = None,
                over_budget: bool = False, jobs: Any = None) -> bytes:
    """A sample at time t: each part a value, or its JSON already serialized (bytes); None (False for
    `over_budget`) leaves the key out. Per-GPU arrays are run-length encoded (schema.rle_encode,
    rle_json)."""
    parts = (util, power_w, phase, phase_mix, memory_gb, missing, links, site_mw,
             True if over_budget else None, jobs)
    out = [b'{"t":', orjson.dumps(wire_time(t)), b',"type":"sample"']
    for key, value in zip(SAMPLE_KEYS, parts):
        if value is not None:
            out.append(_PREFIX[key])
            out.append(value if isinstance(value, bytes) else orjson.dumps(value, option=OPT_PART))
    out.append(b"}\n")
    return b"".join(out)
