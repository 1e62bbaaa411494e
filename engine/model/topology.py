"""The physical hierarchy of a cluster (GPU, node, rack, pod, building) and its link tiers.

GPUs are numbered 0..N-1 in physical order: consecutive GPUs share a node, consecutive nodes a rack, and so on.
The last pod (and building) may be partial. Everything here is arithmetic on indices, vectorized with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.scenario import Cluster

# Link tiers, innermost first. "node" is NVLink/NVSwitch or PCIe through the host; "leaf" is a NIC to its rack
# switch (ToR) and back; "spine" joins the racks of a pod; "core" joins pods (oversubscribed by
# pod_oversubscription); "campus" joins buildings.
TIERS = ("node", "leaf", "spine", "core", "campus")


@dataclass(frozen=True)
class Topology:
    gpus: int
    gpus_per_node: int
    gpus_per_rack: int
    gpus_per_pod: int
    gpus_per_building: int

    @classmethod
    def of(cls, cluster: Cluster) -> Topology:
        per_pod = cluster.gpus_per_rack * cluster.racks_per_pod
        per_building = per_pod * cluster.pods_per_building if cluster.pods_per_building else max(cluster.gpus, per_pod)
        return cls(gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, gpus_per_rack=cluster.gpus_per_rack,
                   gpus_per_pod=per_pod, gpus_per_building=per_building)

    @staticmethod
    def _count(total: int, per: int) -> int:
        return -(-total // per)

    @property
    def nodes(self) -> int:
        return self._count(self.gpus, self.gpus_per_node)

    @property
    def racks(self) -> int:
        return self._count(self.gpus, self.gpus_per_rack)

    @property
    def pods(self) -> int:
        return self._count(self.gpus, self.gpus_per_pod)

    @property
    def buildings(self) -> int:
        return self._count(self.gpus, self.gpus_per_building)

    def place(self, gpu: int) -> dict[str, int]:
        """Where one GPU sits: its node, rack, pod and building indices, and its index in the node."""
        return {"gpu": gpu, "local": gpu % self.gpus_per_node, "node": gpu // self.gpus_per_node,
                "rack": gpu // self.gpus_per_rack, "pod": gpu // self.gpus_per_pod,
                "building": gpu // self.gpus_per_building}

    def tier_between(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """Index into TIERS of the outermost tier a message from GPU a to GPU b crosses (vectorized)."""
        a = np.asarray(a)
        b = np.asarray(b)
        tier = np.zeros(np.broadcast(a, b).shape, dtype=np.int8)
        for level, per in enumerate((self.gpus_per_node, self.gpus_per_rack, self.gpus_per_pod,
                                     self.gpus_per_building), start=1):
            tier = np.where(a // per != b // per, level, tier)
        return tier

    def summary(self) -> dict[str, int]:
        return {"gpus": self.gpus, "gpus_per_node": self.gpus_per_node, "gpus_per_rack": self.gpus_per_rack,
                "gpus_per_pod": self.gpus_per_pod, "gpus_per_building": self.gpus_per_building,
                "nodes": self.nodes, "racks": self.racks, "pods": self.pods, "buildings": self.buildings}
