"""The step events of a stream as the seek index keeps them (tui/index.py): parsed once, by the reader, and stored
as columns of the figures the state reads (step, step time, tokens/s, TFLOP/s, MFU, tokens...), not as 700,000
dicts. Per step: its time and arrival number, its job, its shape (its keys in order, which are figures and which of
those are whole numbers) and its figures, float64 in one flat array. A step that does not fit (a value that is
neither a number, the job's name nor its type, or a whole number past 2^53) is kept as parsed.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable
from operator import itemgetter
from typing import Any

EXACT = 2 ** 53             # whole numbers a float64 holds exactly
MAX_SHAPES = 1024
_FLOAT, _INT, _TYPE, _JOB = range(4)


def _getter(keys: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The values of `keys` of a dict, as a tuple (itemgetter gives a bare value for one key)."""
    if len(keys) > 1:
        return itemgetter(*keys)
    return lambda event: tuple(event[key] for key in keys)


class _Shape:
    """The keys of a kind of step, what each holds, and a getter of its figures."""

    __slots__ = ("figures", "ints", "kinds", "names")

    def __init__(self, names: tuple[str, ...], types: tuple[type, ...]) -> None:
        self.names = names
        self.kinds = tuple(_TYPE if name == "type" else _JOB if name == "job" else _INT if kind is int else _FLOAT
                           for name, kind in zip(names, types))
        self.figures = _getter([name for name, kind in zip(names, self.kinds) if kind in (_FLOAT, _INT)])
        ints = [name for name, kind in zip(names, self.kinds) if kind == _INT]
        self.ints = _getter(ints) if ints else None

    @staticmethod
    def fits(names: tuple[str, ...], types: tuple[type, ...]) -> bool:
        return all(kind is float or kind is int or (name in ("type", "job") and kind is str)
                   for name, kind in zip(names, types))


class Steps:
    """Columns of step events, in arrival order (which is time order)."""

    def __init__(self) -> None:
        self.t = array("d")
        self.seq = array("q")             # arrival numbers
        self.job = array("i")             # index into `names`
        self.shape = array("i")           # index into `shapes`, -1 for a step kept whole
        self.start = array("q")           # where its figures start in `values`
        self.values = array("d")
        self.names: list[str] = []
        self.shapes: list[_Shape] = []
        self.whole: dict[int, dict[str, Any]] = {}      # by arrival number
        self._jobs: dict[str, int] = {}
        self._ids: dict[tuple[tuple[str, ...], tuple[type, ...]], int] = {}
        self._last: tuple[tuple[str, ...], tuple[type, ...], int] = ((), (), -1)

    def __len__(self) -> int:
        return len(self.t)

    def add(self, event: dict[str, Any], t: float, seq: int) -> None:
        names, types = tuple(event), tuple(map(type, event.values()))
        last_names, last_types, shape = self._last
        if names != last_names or types != last_types:
            shape = self._ids.get((names, types), -2)
            if shape == -2:
                shape = self._new_shape(names, types)
            self._last = (names, types, shape)
        if shape >= 0:
            kind = self.shapes[shape]
            if kind.ints is not None and max(map(abs, kind.ints(event))) > EXACT:
                shape = -1
        job = self._jobs.get(event["job"])
        if job is None:
            job = self._jobs[event["job"]] = len(self.names)
            self.names.append(event["job"])
        self.t.append(t)
        self.seq.append(seq)
        self.job.append(job)
        self.shape.append(shape)
        self.start.append(len(self.values))
        if shape >= 0:
            self.values.extend(self.shapes[shape].figures(event))
        else:
            self.whole[seq] = event

    def _new_shape(self, names: tuple[str, ...], types: tuple[type, ...]) -> int:
        """The index of a new shape, or -1 for steps kept whole (it does not fit, or a hostile stream made too many
        shapes)."""
        if len(self._ids) >= MAX_SHAPES:
            return -1
        shape = -1
        if _Shape.fits(names, types):
            shape = len(self.shapes)
            self.shapes.append(_Shape(names, types))
        self._ids[(names, types)] = shape
        return shape

    def event(self, i: int) -> dict[str, Any]:
        """Step `i` as it was parsed (an equal dict)."""
        shape = self.shape[i]
        if shape < 0:
            return self.whole[self.seq[i]]
        kind = self.shapes[shape]
        k = self.start[i]
        out: dict[str, Any] = {}
        for name, what in zip(kind.names, kind.kinds):
            if what == _TYPE:
                out[name] = "step"
            elif what == _JOB:
                out[name] = self.names[self.job[i]]
            else:
                value = self.values[k]
                out[name] = int(value) if what == _INT else value
                k += 1
        return out

    def count_to(self, t: float) -> int:
        """How many steps have t <= `t`."""
        return bisect.bisect_right(self.t, t)

    def last_per_job(self, end: int, jobs: int) -> list[tuple[float, dict[str, Any]]]:
        """The last step of each job among the first `end` (scanning back at most 64 per job of the header's
        `jobs`), in time order."""
        jobs = max(1, jobs)
        found: dict[int, int] = {}
        i = end - 1
        while i >= 0 and len(found) < jobs and end - i <= 64 * jobs:
            found.setdefault(self.job[i], i)
            i -= 1
        return [(self.t[i], self.event(i)) for i in sorted(found.values())]

    def drop(self, k: int) -> None:
        """Forget the first `k` steps (a live stream's memory stays flat)."""
        first = self.start[k] if k < len(self.start) else len(self.values)
        del self.t[:k], self.seq[:k], self.job[:k], self.shape[:k], self.values[:first]
        self.start = array("q", (x - first for x in self.start[k:]))
        if self.whole:
            oldest = self.seq[0] if self.seq else float("inf")
            self.whole = {seq: event for seq, event in self.whole.items() if seq >= oldest}
