"""The step events of a stream as the seek index keeps them (tui/index.py): parsed once, by the reader, and
stored as columns of the figures the state reads (step, step time, tokens/s, TFLOP/s, MFU, tokens...), not as
700,000 dicts. Per step: its time, its arrival number, its job and its shape (its keys, which of its figures
were whole numbers) in one int, and its figures, float64, seven slots in one flat array. A step that does not
fit (more than seven figures beside its time, type and job's name, or one that is not a number) is kept as
parsed. A step comes back as an equal dict: its time a float, a figure a whole number where its shape's first
step had one and the value is whole (a float64 holds whole numbers exactly up to 2^53; a step count or token
total past that is not a stream this reads).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable
from operator import itemgetter
from typing import Any

STRIDE = 7                  # figures a step keeps (the engine's: step, step time, tokens, tokens/s, TFLOP/s,
                            # MFU, token total)
MAX_SHAPES = 1024
FLUSH = 1 << 14             # figures gathered in a list before they join the array (a list takes them faster)
_KEPT = ("t", "type", "job")


def _getter(keys: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The values of `keys` of a dict, as a tuple (itemgetter gives a bare value for one key)."""
    if len(keys) > 1:
        return itemgetter(*keys)
    return lambda event: tuple(event[key] for key in keys)


class _Shape:
    """A kind of step: its keys (the figures' in order), the figures' types, and a getter of its figures."""

    __slots__ = ("figures", "index", "keys", "pad", "size", "types")

    def __init__(self, figures: tuple[str, ...], types: tuple[type, ...], index: int) -> None:
        self.keys, self.types, self.index = figures, types, index
        self.figures = _getter(list(figures))
        self.size = len(figures) + len(_KEPT)          # the step's keys: its figures, time, type and job
        self.pad = [0.0] * (STRIDE - len(figures))

    @staticmethod
    def of(event: dict[str, Any]) -> tuple[tuple[str, ...], tuple[type, ...]] | None:
        """The figures' keys and types of a step that fits the columns, else None."""
        if type(event.get("job")) is not str or not all(key in event for key in _KEPT):
            return None
        figures = tuple(key for key in event if key not in _KEPT)
        types = tuple(type(event[key]) for key in figures)
        if len(figures) > STRIDE or not all(kind is float or kind is int for kind in types):
            return None
        return figures, types


class Steps:
    """Columns of step events, in arrival order (which is time order): step i's figures are slots
    [STRIDE i, STRIDE (i + 1)) of `values` (then of `_pending`, the latest)."""

    def __init__(self) -> None:
        self.t = array("d")
        self.seq = array("q")             # arrival numbers
        self.kind = array("q")            # shape << 32 | job (into `shapes` and `names`); -1: kept whole
        self.values = array("d")
        self._pending: list[float] = []
        self.names: list[str] = []
        self.shapes: list[_Shape] = []
        self.whole: dict[int, dict[str, Any]] = {}      # by arrival number
        self._jobs: dict[str, int] = {}
        self._ids: dict[tuple[tuple[str, ...], tuple[type, ...]], int] = {}
        self._last: _Shape | None = None      # the latest step's shape, tried first

    def add(self, event: dict[str, Any], t: float, seq: int) -> None:
        """Append a step (its time `t`, its arrival number `seq`): the latest step's shape is tried first."""
        shape = self._last
        try:
            if shape is None or len(event) != shape.size:
                raise KeyError
            figures = shape.figures(event)
            sum(figures)                    # numbers only (a float64 slot takes nothing else)
        except (KeyError, TypeError):
            self._add_other(event, t, seq)
            return
        pending = self._pending
        pending += figures
        if shape.pad:
            pending += shape.pad
        job = self._jobs.get(event["job"])
        if job is None:
            job = self._job(event["job"])
        if len(pending) >= FLUSH:
            self._flush()
        self.t.append(t)
        self.seq.append(seq)
        self.kind.append(shape.index << 32 | job)

    def _add_other(self, event: dict[str, Any], t: float, seq: int) -> None:
        """A step not of the latest step's shape: of another shape, or kept whole."""
        index = self._shape(event)
        if index < 0:
            self.whole[seq] = event
            self._pending += _EMPTY
            kind = -1
        else:
            self._last = shape = self.shapes[index]
            self._pending += shape.figures(event)
            self._pending += shape.pad
            job = self._jobs.get(event["job"])
            kind = index << 32 | (job if job is not None else self._job(event["job"]))
        if len(self._pending) >= FLUSH:
            self._flush()
        self.t.append(t)
        self.seq.append(seq)
        self.kind.append(kind)

    def _flush(self) -> None:
        self.values.fromlist(self._pending)
        self._pending = []

    def _job(self, name: str) -> int:
        job = self._jobs[name] = len(self.names)
        self.names.append(name)
        return job

    def _shape(self, event: dict[str, Any]) -> int:
        """The index of the step's shape, new or known; -1 for steps kept whole (they do not fit, or a hostile
        stream made too many shapes)."""
        of = _Shape.of(event)
        if of is None:
            return -1
        shape = self._ids.get(of)
        if shape is None:
            if len(self.shapes) >= MAX_SHAPES:
                return -1
            shape = self._ids[of] = len(self.shapes)
            self.shapes.append(_Shape(*of, shape))
        return shape

    def _value(self, k: int) -> float:
        done = len(self.values)
        return self.values[k] if k < done else float(self._pending[k - done])     # as the array will hold it

    def event(self, i: int) -> dict[str, Any]:
        """Step `i` as it was parsed (an equal dict)."""
        kind = self.kind[i]
        if kind < 0:
            return self.whole[self.seq[i]]
        shape = self.shapes[kind >> 32]
        out: dict[str, Any] = {"t": self.t[i], "type": "step", "job": self.names[kind & 0xFFFFFFFF]}
        for k, (key, what) in enumerate(zip(shape.keys, shape.types), STRIDE * i):
            value = self._value(k)
            out[key] = int(value) if what is int and value.is_integer() else value
        return out

    def job_of(self, i: int) -> str:
        kind = self.kind[i]
        return self.names[kind & 0xFFFFFFFF] if kind >= 0 else str(self.whole[self.seq[i]]["job"])

    def count_to(self, t: float) -> int:
        """How many steps have t <= `t`."""
        return bisect.bisect_right(self.t, t)

    def last_per_job(self, end: int, jobs: int) -> list[tuple[float, dict[str, Any]]]:
        """The last step of each job among the first `end` (scanning back at most 64 per job of the header's
        `jobs`), in time order."""
        jobs = max(1, jobs)
        found: dict[str, int] = {}
        i = end - 1
        while i >= 0 and len(found) < jobs and end - i <= 64 * jobs:
            found.setdefault(self.job_of(i), i)
            i -= 1
        return [(self.t[i], self.event(i)) for i in sorted(found.values())]

    def drop(self, k: int) -> None:
        """Forget the first `k` steps (a live stream's memory stays flat)."""
        self._flush()
        del self.t[:k], self.seq[:k], self.kind[:k], self.values[:STRIDE * k]
        if self.whole:
            oldest = self.seq[0] if self.seq else float("inf")
            self.whole = {seq: event for seq, event in self.whole.items() if seq >= oldest}


_EMPTY = [0.0] * STRIDE
