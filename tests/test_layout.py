"""Layout: the tier each parallel dimension crosses, against the tiers between every checked group's first and
last member (the first 4,096 group starts of one period)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.geometry import DIMS, TIERS, Geometry, JobGeometry
from clustertop.engine.model.layout import Layout


def _walked(layout: Layout, dim: str) -> str | None:
    """The tier from every checked group start and its group's last member (tier_between, pairwise)."""
    size = getattr(layout.job, dim)
    if size <= 1:
        return None
    stride = JobGeometry.of(layout.job).stride(dim)
    span = stride * size
    period = min(layout.job.gpus, int(np.lcm(span, layout.topology.gpus_per_building)))
    starts = (layout.job.first_gpu + np.arange(0, period, span)[:, None] + np.arange(stride)[None, :]).ravel()
    starts = starts[:4096]
    return TIERS[int(layout.topology.tier_between(starts, starts + stride * (size - 1)).max())]


GEOMETRIES = [(8, 16, 192, 0), (8, 32, 4, 2), (4, 12, 3, 3), (72, 72, 8, 1), (8, 8, 2, 5)]
JOBS = [(8, 1, 16, 128, 1, 0), (4, 2, 3, 8, 4, 24), (2, 3, 5, 40, 5, 8), (1, 1, 7, 600, 3, 96),
        (8, 1, 1, 2048, 8, 0), (3, 1, 2, 100, 1, 12),
        (32, 1, 1, 1024, 2, 0),            # 16,384 group starts: the first 4,096 checked
        (3, 1, 1, 4000, 2, 5)]             # and the last row of starts cut short


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_tiers_are_the_walked_ones(geometry: tuple[int, int, int, int]) -> None:
    per_node, per_rack, racks_per_pod, pods_per_building = geometry
    base = scenario.load("llama3-405b-16k")
    for tp, cp, pp, dp, ep, first in JOBS:
        for order in ("tp-cp-pp-dp", "tp-cp-dp-pp"):
            gpus = tp * cp * pp * dp
            total = -(-(gpus + first) // per_node) * per_node
            cluster = dataclasses.replace(base.cluster, gpus=total, gpus_per_node=per_node,
                                          gpus_per_rack=per_rack, racks_per_pod=racks_per_pod,
                                          pods_per_building=pods_per_building)
            job = dataclasses.replace(base.jobs[0], tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, gpus=gpus,
                                      first_gpu=first, rank_order=order)
            layout = Layout(job, Geometry.of(cluster))
            for dim in DIMS:
                assert layout.tier(dim) == _walked(layout, dim), (geometry, job, dim)
