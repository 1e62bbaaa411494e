"""GPUs the map marks apart from their metric: failed (the latest sample's phase), degraded (the header's
`slow_gpus`: stragglers) and unallocated (no job's GPUs). A pixel holding a failed GPU shows failed whatever
its mean; then degraded; a pixel whose GPUs no job uses shows unallocated, not idle.

The header's marks are computed once per header and per layout (they do not change over a run); the failed
ones per frame, with one comparison over the view's phases (no loop over GPUs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from clustertop.engine.config.phases import CODE
from clustertop.engine.stream.state import ClusterState

from . import palette
from .grid import Layout

MARKS = ("failed", "degraded", "unallocated")     # in the order they win over each other
FAILED_CODE = CODE["failed"]


class Marks:
    """What the header says of each GPU: used by a job or not, degraded or not."""

    def __init__(self, header: dict[str, Any]) -> None:
        gpus = int(header["topology"]["gpus"])
        self.header = header
        self.allocated = np.zeros(gpus, dtype=bool)
        slow: list[int] = []
        for job in header.get("jobs", []):
            first, n = int(job.get("first_gpu", 0)), int(job.get("gpus", 0))
            self.allocated[max(0, first):max(0, first + n)] = True
            listed = job.get("slow_gpus")
            if isinstance(listed, list):
                slow += [int(g) for g in listed if isinstance(g, int) and 0 <= g < gpus]
        self.slow = np.unique(np.asarray(slow, dtype=np.int64))
        # A header without jobs (real telemetry of an unknown cluster) says nothing of what is allocated.
        self.any_unallocated = bool(header.get("jobs")) and not bool(self.allocated.all())
        self._pixels_key: tuple[int, int, int] | None = None
        self._pixels: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._counts: dict[tuple[int, int], tuple[int, int]] = {}     # (degraded, unallocated) of a range

    def pixels(self, lay: Layout) -> tuple[np.ndarray, np.ndarray]:
        """(pixels no job uses, pixels holding a degraded GPU) of a layout."""
        key = (lay.gpu0, lay.gpu1, lay.g)
        if self._pixels_key != key:
            empty = np.flatnonzero(lay.count(self.allocated) == 0) if self.any_unallocated \
                else np.zeros(0, np.int64)
            inside = self.slow[(self.slow >= lay.gpu0) & (self.slow < lay.gpu1)]
            self._pixels = (empty, np.unique((inside - lay.gpu0) // lay.g))
            self._pixels_key = key
        return self._pixels

    def paint(self, colours: np.ndarray, lay: Layout, state: ClusterState) -> None:
        """Mark the layout's pixels in `colours` (one colour index per pixel), in place."""
        if not state.samples:
            return
        empty, slow = self.pixels(lay)
        colours[empty] = palette.UNALLOCATED
        colours[slow] = palette.SLOW
        failed = np.flatnonzero(state.phase[lay.gpu0:lay.gpu1] == FAILED_CODE)
        if failed.size:
            colours[failed // lay.g] = palette.FAILED

    def counts(self, state: ClusterState, gpu0: int, gpu1: int) -> dict[str, int]:
        """How many of the GPUs [gpu0, gpu1) are failed, degraded and unallocated now (the header's marks
        counted once per range)."""
        failed = int(np.count_nonzero(state.phase[gpu0:gpu1] == FAILED_CODE)) if state.samples else 0
        fixed = self._counts.get((gpu0, gpu1))
        if fixed is None:
            slow = int(np.count_nonzero((self.slow >= gpu0) & (self.slow < gpu1)))
            unallocated = int(np.count_nonzero(~self.allocated[gpu0:gpu1])) if self.any_unallocated else 0
            if len(self._counts) > 64:
                self._counts.clear()
            fixed = self._counts[(gpu0, gpu1)] = (slow, unallocated)
        return {"failed": failed, "degraded": fixed[0], "unallocated": fixed[1]}

    def of(self, state: ClusterState, gpu: int) -> str | None:
        """The mark of one GPU (failed, degraded, unallocated) or None."""
        if state.samples and int(state.phase[gpu]) == FAILED_CODE:
            return "failed"
        if self.slow.size and bool(np.isin(gpu, self.slow)):
            return "degraded"
        return "unallocated" if self.any_unallocated and not self.allocated[gpu] else None


_CACHE: dict[int, Marks] = {}


def marks_of(header: dict[str, Any]) -> Marks:
    """The marks of a header, computed once (keyed by the header object: a run's states share it)."""
    marks = _CACHE.get(id(header))
    if marks is None or marks.header is not header:
        if len(_CACHE) > 8:
            _CACHE.clear()
        marks = _CACHE[id(header)] = Marks(header)
    return marks
