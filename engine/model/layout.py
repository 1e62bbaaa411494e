"""Which link tier each parallel dimension of a job crosses, from where its ranks sit
(engine/config/geometry.py: the Llama 3 order, TP innermost, then CP, PP, DP outermost; EP across consecutive
DP ranks)."""

from __future__ import annotations

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
        straddles a boundary that the first does not, so every group start within one period is checked.
        """
        size = getattr(self.job, dim)
        if size <= 1:
            return None
        stride = JobGeometry.of(self.job).stride(dim)
        span = stride * size
        period = min(self.job.gpus, np.lcm(span, self.topology.gpus_per_building))
        starts = self.job.first_gpu + np.arange(0, period, span)[:, None] + np.arange(stride)[None, :]
        starts = starts.ravel()[:4096]
        last = starts + stride * (size - 1)
        return TIERS[int(self.topology.tier_between(starts, last).max())]

    def tiers(self) -> dict[str, str | None]:
        return {dim: self.tier(dim) for dim in DIMS}
