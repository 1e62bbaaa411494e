"""A sample as the seek index keeps it (tui/index.py): parsed once, its per-GPU run-length arrays as numpy
arrays (whole numbers in the smallest dtype that holds them, floats as the state holds them), zlib-packed when
large (a real cluster's GPUs all differ: 16K runs per array), and its link loads as float32 arrays. The
rest (the jobs' statuses, the phase mix, site power, ...) is one zlib-packed JSON blob, parsed again when the
sample is folded: as Python objects, 256 jobs' statuses and their phase mix hold some 250 kB a keyframe
(10 kB packed), and an index keeps thousands of keyframes. `event()` gives it back as a sample the state
folds; a part that does not convert (a hostile file's runs, which the reader does not check) is kept as
parsed, and the state copes with it as with any.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import orjson
from clustertop.engine.stream import schema

PACK_BYTES = 1024       # arrays larger than this are kept zlib-packed (level 1: milliseconds for 16K GPUs)
PER_GPU = {"util": np.float32, "power_w": np.float32, "phase": np.uint8, "memory_gb": np.float32}
_BAD = (TypeError, ValueError, KeyError, OverflowError)
APART = frozenset({"t", "type", *PER_GPU, "missing", "links"})    # kept as arrays (and t, type); rest packed


class _Array:
    """A numpy array, zlib-packed when large and its first 4 KB pack to 70% or less (noise does not pack: the
    power of 16K GPUs that all differ would cost milliseconds a sample to pack for nothing)."""

    __slots__ = ("data", "dtype", "packed")

    def __init__(self, values: np.ndarray) -> None:
        self.dtype = values.dtype
        raw = values.tobytes() if values.nbytes > PACK_BYTES else b""
        self.packed = bool(raw) and len(zlib.compress(raw[:4096], 1)) <= 0.7 * min(len(raw), 4096)
        self.data: Any = zlib.compress(raw, 1) if self.packed else values

    def get(self) -> np.ndarray:
        return np.frombuffer(zlib.decompress(self.data), dtype=self.dtype) if self.packed else self.data


class _Runs:
    """A run-length array: whole numbers in the smallest integer dtype that holds them (the state converts
    them exactly), other values in the state's dtype; zlib-packed when large."""

    __slots__ = ("n", "v")

    def __init__(self, v: np.ndarray, n: np.ndarray) -> None:
        self.v, self.n = _Array(v), _Array(n)

    @classmethod
    def of(cls, rle: Any, dtype: Any) -> Any:
        """The runs of `rle` ({"v": [...], "n": [...]}), or `rle` itself when they do not convert."""
        try:
            v, n = np.asarray(rle["v"]), np.asarray(rle["n"])
        except _BAD:
            return rle
        if v.ndim != 1 or n.ndim != 1 or v.dtype.kind not in "biuf" or n.dtype.kind not in "biu":
            return rle
        if v.dtype.kind == "f" and np.dtype(dtype).kind == "f":
            v = v.astype(dtype)                    # floats: as the state will hold them
        return cls(_narrow(v), _narrow(n))

    def rle(self) -> dict[str, np.ndarray]:
        return {"v": self.v.get(), "n": self.n.get()}


def _narrow(values: np.ndarray) -> np.ndarray:
    """Whole numbers in the smallest dtype that holds them all; other arrays as they are."""
    if values.dtype.kind not in "iu" or not values.size:
        return values
    low, high = int(values.min()), int(values.max())
    return values.astype(np.result_type(np.min_scalar_type(low), np.min_scalar_type(high)), copy=False)


def _runs_back(value: Any) -> Any:
    return value.rle() if isinstance(value, _Runs) else value


def _pack(rest: dict[str, Any]) -> bytes | dict[str, Any]:
    """The rest of a sample as zlib-packed JSON (the reader parsed it from JSON: it comes back exactly), or as
    it is when it has no JSON form (an event made in memory: a key that is not a string, a numpy value)."""
    try:
        return zlib.compress(orjson.dumps(rest), 1)
    except TypeError:
        return rest


def _unpack(rest: bytes | dict[str, Any]) -> dict[str, Any]:
    """The rest of a sample again: parsed anew, so the state may keep what it reads."""
    if isinstance(rest, bytes):
        unpacked: dict[str, Any] = orjson.loads(zlib.decompress(rest))
        return unpacked
    return dict(rest)


def _loads(links: Any) -> Any:
    """Link loads as the state holds them: float32, one or one per pod or building."""
    if type(links) is not dict:
        return links
    try:
        return {tier: np.atleast_1d(np.asarray(load, dtype=np.float32)) for tier, load in links.items()}
    except _BAD:
        return links


class Keyframe:
    """One sample, compact; `event()` is the sample again (arrays as numpy arrays)."""

    __slots__ = ("parts", "rest")

    def __init__(self, event: dict[str, Any]) -> None:
        parts = {key: value for key, value in event.items() if key in APART}
        for key, dtype in PER_GPU.items():
            if key in parts:
                parts[key] = _Runs.of(parts[key], dtype)
        missing = parts.get("missing")
        if type(missing) is dict:
            parts["missing"] = {key: _Runs.of(rle, np.bool_) for key, rle in missing.items()}
        if "links" in parts:
            parts["links"] = _loads(parts["links"])
        self.parts = parts
        self.rest = _pack({key: value for key, value in event.items() if key not in APART})

    def event(self) -> dict[str, Any]:
        event = {key: _runs_back(value) for key, value in self.parts.items()}
        missing = event.get("missing")
        if type(missing) is dict:
            event["missing"] = {key: _runs_back(value) for key, value in missing.items()}
        event.update(_unpack(self.rest))
        return event

    def util_of(self, gpus: list[int], total: int) -> list[float]:
        """Utilization (0..1) of `gpus` as a state folding this sample shows it (float32, zeros when the runs
        do not cover the `total` GPUs), read from the runs without decoding the others."""
        util = self.parts.get("util")
        if util is None:
            return [0.0] * len(gpus)
        if not isinstance(util, _Runs):             # kept as parsed: decode as the state does
            values = np.zeros(total, dtype=np.float32)
            try:
                schema.rle_decode(util, out=values)
            except (ValueError, TypeError, KeyError):
                values[:] = 0
            values *= np.float32(0.01)
            return [float(values[gpu]) for gpu in gpus]
        v, n = util.v.get(), util.n.get()
        if v.size != n.size or (n.size and int(n.min()) < 0) or int(n.sum(dtype=np.int64)) != total:
            return [0.0] * len(gpus)
        at = np.searchsorted(np.cumsum(n, dtype=np.int64), np.asarray(gpus, dtype=np.int64), side="right")
        shown: list[float] = (v[at] * np.float32(0.01)).tolist()
        return shown
