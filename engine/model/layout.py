"""Which link tier each parallel dimension of a job crosses, from where its ranks sit
(engine/config/geometry.py: the Llama 3 order, TP innermost, then CP, PP, DP outermost; EP across consecutive
DP ranks)."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        first 4,096: rows of `stride` consecutive starts, one row every `span` GPUs). A group crosses a unit
        of `per` GPUs when its start's place in its unit plus the group's extent reaches the next unit; so a
        row of starts c, ..., c + w - 1 has one crossing when (c mod per) + w - 1 + extent >= per (a row that
        wraps into the next unit has a start at its unit's end, which any extent carries over). The starts
        are the points of two lattices, the full rows and the last one: the tier is the outermost unit either
        crosses (Geometry.outermost_of_lattice, in closed form).
        """
        size = getattr(self.job, dim)
        if size <= 1:
            return None
        stride = JobGeometry.of(self.job).stride(dim)
        span = stride * size
        period = min(self.job.gpus, math.lcm(span, self.topology.gpus_per_building))
        starts = min(-(-period // span) * stride, 4096)
        rows = -(-starts // stride)
        width = starts - (rows - 1) * stride                                      # the last row's starts
        extent = stride * (size - 1)
        first = self.job.first_gpu
        topo = self.topology
        level = topo.outermost_of_lattice(first + (rows - 1) * span, [(width, 1)], extent)
        if rows > 1:
            level = max(level, topo.outermost_of_lattice(first, [(rows - 1, span), (stride, 1)], extent))
        return TIERS[level]

    def tiers(self) -> dict[str, str | None]:
        return {dim: self.tier(dim) for dim in DIMS}
