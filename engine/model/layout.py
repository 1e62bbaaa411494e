"""How a job's GPUs map to parallel ranks, and which link tier each parallel dimension crosses.

Rank order follows the Llama 3 paper (section 3.3.2): TP innermost, then CP, PP, DP outermost, so that TP stays
inside the NVLink domain and DP, whose traffic overlaps with compute, takes the outer tiers. EP shards experts
across consecutive DP (x CP) ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.scenario import Job
from .topology import TIERS, Topology

DIMS = ("tp", "cp", "pp", "dp", "ep")


@dataclass(frozen=True)
class Layout:
    job: Job
    topology: Topology

    def stride(self, dim: str) -> int:
        j = self.job
        return {"tp": 1, "cp": j.tp, "pp": j.tp * j.cp, "dp": j.tp * j.cp * j.pp, "ep": j.tp * j.cp * j.pp}[dim]

    def size(self, dim: str) -> int:
        return getattr(self.job, dim)

    def stage_of(self) -> np.ndarray:
        """Pipeline stage of every GPU of the job, in job-local GPU order."""
        j = self.job
        return (np.arange(j.gpus) // (j.tp * j.cp) % j.pp).astype(np.int16)

    def tier(self, dim: str) -> str | None:
        """Outermost link tier the groups of one dimension cross (None when the dimension has size 1).

        Groups of one dimension differ only by an offset; the first group is representative unless a group
        straddles a boundary that the first does not, so every group start within one period is checked.
        """
        size = self.size(dim)
        if dim == "ep":
            size = self.job.ep
        if size <= 1:
            return None
        stride = self.stride(dim)
        span = stride * size
        period = min(self.job.gpus, np.lcm(span, self.topology.gpus_per_building))
        starts = self.job.first_gpu + np.arange(0, period, span)[:, None] + np.arange(stride)[None, :]
        starts = starts.ravel()[:4096]
        last = starts + stride * (size - 1)
        return TIERS[int(self.topology.tier_between(starts, last).max())]

    def tiers(self) -> dict[str, str | None]:
        return {dim: self.tier(dim) for dim in DIMS}
