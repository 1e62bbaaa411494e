"""Optics: how many transceivers each tier of a cluster's fabric needs (from its topology),
and what they draw.

Every optical link has a transceiver at each end (catalogs/site.toml `transceivers_per_link`). Which links are
optical:
- "leaf": a NIC to its rack's leaf (ToR) switch: in the rack, on copper (no transceivers);
- "spine": the leaf switches' uplinks, one link per NIC of the rack's worth of bandwidth /
  rack_oversubscription (racks > 1);
- "core": the pods' uplinks, a pod's NIC bandwidth / pod_oversubscription (pods > 1);
- "campus": the buildings' uplinks, a building's NIC bandwidth / building_oversubscription (buildings > 1);
- "node" (the scale-up domain): NVLink, NVL72, Infinity Fabric, Gaudi's mesh and a 2D torus are copper; a 3D
  torus (TPU v4, v5p, v7) is built of 4 x 4 x 4 cubes joined by optical links: along a dimension longer
  than 4, one link per cube face per ring.
Scale-out links run at the NIC's rate, torus links at one link's rate. A transceiver draws the pluggable
figure for its speed (interpolated per bit between 400G, 800G and 1.6T; below 400G at 400G's energy per bit),
times `lpo_share` for linear-drive optics or `cpo_share` for co-packaged optics (cluster.optics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from . import catalog
from .geometry import Geometry

if TYPE_CHECKING:
    from .cluster import Cluster

CUBE = 4                  # a TPU torus is built of 4 x 4 x 4 cubes


@dataclass(frozen=True)
class SiteOptics:
    """The transceivers of a cluster, per tier, and their power."""

    transceivers: tuple[tuple[str, int], ...]     # (tier, count) for the tiers that have optical links
    watts: float

    @property
    def count(self) -> int:
        return sum(n for _, n in self.transceivers)

    def by_tier(self) -> dict[str, int]:
        return dict(self.transceivers)


@lru_cache(maxsize=64)
def transceiver_w(gbps: float, kind: str = "pluggable") -> float:
    """Watts of one transceiver of `gbps` per direction, of a kind ("pluggable", "lpo", "cpo")."""
    table = catalog.optics()
    speeds = [s for s, _ in table.transceiver_w]
    pj = [w / s for s, w in table.transceiver_w]          # W per Gb/s = nJ per bit
    x = min(max(gbps, speeds[0]), speeds[-1])
    per_bit = pj[-1]
    for (s0, p0), (s1, p1) in zip(zip(speeds, pj), zip(speeds[1:], pj[1:])):
        if s0 <= x <= s1:
            per_bit = p0 + (p1 - p0) * math.log(x / s0) / math.log(s1 / s0)
            break
    share = {"pluggable": 1.0, "lpo": table.lpo_share, "cpo": table.cpo_share}[kind]
    return per_bit * gbps * share


def _uplinks(gpus: int, per: int, nic_share: float, over: float) -> int:
    """Uplinks of the blocks of `per` GPUs (the last may be partial): NICs of each / oversubscription, rounded
    up; none when one block holds them all."""
    full, rest = divmod(gpus, per)
    if full + (rest > 0) <= 1:
        return 0
    return full * math.ceil(per * nic_share / over) + (math.ceil(rest * nic_share / over) if rest else 0)


def site_optics(cluster: Cluster) -> SiteOptics:
    """The cluster's transceivers per tier and their watts (`Cluster.transceivers` keeps them)."""
    table = catalog.optics()
    per_link = table.transceivers_per_link
    nic_share = cluster.nics_per_node / cluster.gpus_per_node
    nic_gbps = cluster.scale_out.gb_s * 8
    where = Geometry.of(cluster)
    links: list[tuple[str, int, float]] = []
    over = cluster.oversubscription()
    for tier, per in where.block_sizes().items():
        n = _uplinks(cluster.gpus, per, nic_share, over[tier])
        if n:
            links.append((tier, n, nic_gbps))
    if cluster.scale_up == "torus-3d":
        link = cluster.scale_up_link
        domains = cluster.gpus // cluster.gpus_per_node
        per_domain = sum(cluster.gpus_per_node // d * math.ceil(d / CUBE) for d in cluster.torus if d > CUBE)
        if per_domain:
            links.insert(0, ("node", domains * per_domain, link.gb_s / link.links * 8))
    counts = tuple((tier, n * per_link) for tier, n, _ in links)
    watts = sum(n * per_link * transceiver_w(gbps, cluster.optics) for _, n, gbps in links)
    return SiteOptics(counts, watts)
