"""Which link tier each parallel dimension of a job crosses, from where its ranks sit
(engine/config/geometry.py: the Llama 3 order, TP innermost, then CP, PP, DP outermost; EP across consecutive
DP ranks)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config.geometry import DIMS, TIERS, Geometry, JobGeometry
from ..config.job import Job


@dataclass(frozen=True)
class Layout:
    job: Job
    topology: Geometry

    def tier(self, dim: str) -> str | None:
        """Outermost link tier the groups of one dimension cross (None when the dimension has size 1).

        Groups of one dimension differ only by an offset; the first group is representative unless a group
        straddles a boundary that the first does not, so every group start within one period is checked (the
        first 4,096: rows of `stride` consecutive starts, one row every `span` GPUs). A row of starts
        c, ..., c + w - 1 has a group crossing a unit of `per` GPUs when the highest start's position in its
        unit, plus the group's extent, reaches the next unit: (c mod per) + w - 1 + extent >= per (a row that
        wraps into the next unit has a start at its unit's end, which any extent carries over). The tier is
        the outermost unit some row crosses, all units at once.
        """
        size = getattr(self.job, dim)
        if size <= 1:
            return None
        stride = JobGeometry.of(self.job).stride(dim)
        span = stride * size
        period = min(self.job.gpus, math.lcm(span, self.topology.gpus_per_building))
        starts = min(-(-period // span) * stride, 4096)
        rows = -(-starts // stride)
        corner = self.job.first_gpu + np.arange(rows, dtype=np.int64) * span      # each row's first start
        reach = np.full(rows, stride - 1 + stride * (size - 1), dtype=np.int64)   # w - 1 + extent
        reach[-1] -= rows * stride - starts                                       # the last row's width
        return TIERS[self.topology.outermost(corner, reach)]

    def tiers(self) -> dict[str, str | None]:
        return {dim: self.tier(dim) for dim in DIMS}
