"""Cluster geometry: where a GPU sits (node, rack, pod, building)
and where a job's ranks and pipeline stages are.

GPUs are numbered 0..N-1 in physical order: consecutive GPUs share a node, consecutive nodes a rack, and so
on; the last pod (and building) may be partial. A job takes consecutive GPUs from its first one, and its
parallel ranks follow a rank order, innermost first: by default the Llama 3 order (section 3.3.2): TP, then
CP, PP, DP outermost, so that TP stays inside the scale-up domain and DP, whose traffic overlaps with
compute, takes the outer tiers; or Megatron-Core's "tp-cp-ep-dp-pp" (PP outermost, DP inside it: an MoE
job's experts sit next to TP, in its scale-up domain). EP shards experts across consecutive DP ranks, the
innermost part of DP, in either order. Everything here is arithmetic on indices, vectorized with numpy.

The simulation (its tracks and samples), the stream's reducer, the Perfetto export and the dashboard find a
job's stages and ranks through JobGeometry; the model finds tiers through Geometry, and layout.py,
collectives.members (a grid of the job's sizes, outermost first) and step._net (stages every stride("pp")
GPUs) follow the job's order through JobGeometry too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

# Link tiers, innermost first. "node" is the scale-up domain (NVLink/NVSwitch, or PCIe through the host);
# "leaf" is a NIC to its rack switch (ToR) and back; "spine" joins the racks of a pod; "core" joins pods
# (oversubscribed by pod_oversubscription); "campus" joins buildings.
TIERS = ("node", "leaf", "spine", "core", "campus")
# Containers of the hierarchy, outermost first (what the dashboard zooms through).
LEVELS = ("site", "building", "pod", "rack", "node")
# Parallel dimensions, innermost rank first; EP is carved out of DP (x CP) ranks.
RANK_ORDER = ("tp", "cp", "pp", "dp")
# The orders a job can take (its `rank_order` setting, innermost first; "ep" marks where EP sits, the inner
# part of DP, and may be left out), each as the order of the four dimensions it places.
RANK_ORDERS = {"tp-cp-pp-dp": RANK_ORDER, "tp-cp-pp-ep-dp": RANK_ORDER,
               "tp-cp-dp-pp": ("tp", "cp", "dp", "pp"), "tp-cp-ep-dp-pp": ("tp", "cp", "dp", "pp")}
DIMS = ("tp", "cp", "pp", "dp", "ep")


class ClusterShape(Protocol):
    """What geometry needs of a scenario's [cluster] (engine/config/cluster.py's Cluster)."""

    @property
    def gpus(self) -> int: ...

    @property
    def gpus_per_node(self) -> int: ...

    @property
    def gpus_per_rack(self) -> int: ...

    @property
    def racks_per_pod(self) -> int: ...

    @property
    def pods_per_building(self) -> int: ...


def _count(total: int, per: int) -> int:
    return -(-total // per)


@dataclass(frozen=True)
class Geometry:
    """The physical hierarchy of a cluster: GPUs per node, rack, pod and building."""

    gpus: int
    gpus_per_node: int
    gpus_per_rack: int
    gpus_per_pod: int
    gpus_per_building: int

    @classmethod
    def of(cls, cluster: ClusterShape) -> Geometry:
        """A scenario's cluster: pods of `racks_per_pod` racks;
        buildings of `pods_per_building` pods (0: one)."""
        per_pod = cluster.gpus_per_rack * cluster.racks_per_pod
        per_building = per_pod * cluster.pods_per_building if cluster.pods_per_building else \
            max(cluster.gpus, per_pod)
        return cls(gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node,
                   gpus_per_rack=cluster.gpus_per_rack, gpus_per_pod=per_pod, gpus_per_building=per_building)

    @classmethod
    def from_summary(cls, topology: dict[str, Any]) -> Geometry:
        """A stream header's `topology` (summary()), read defensively: a missing or zero size falls back to
        the level inside it (a recording is untrusted; engine/stream/checks.py checks the sizes are
        integers)."""
        gpus = int(topology["gpus"])
        per_node = int(topology.get("gpus_per_node", 8)) or 1
        per_rack = int(topology.get("gpus_per_rack", per_node)) or per_node
        per_pod = int(topology.get("gpus_per_pod", gpus)) or gpus
        per_building = int(topology.get("gpus_per_building", max(gpus, per_pod))) or gpus
        return cls(gpus, per_node, per_rack, per_pod, per_building)

    @property
    def nodes(self) -> int:
        return _count(self.gpus, self.gpus_per_node)

    @property
    def racks(self) -> int:
        return _count(self.gpus, self.gpus_per_rack)

    @property
    def pods(self) -> int:
        return _count(self.gpus, self.gpus_per_pod)

    @property
    def buildings(self) -> int:
        return _count(self.gpus, self.gpus_per_building)

    def block_sizes(self) -> dict[str, int]:
        """GPUs of the block whose uplinks cross each tier above the leaf: a rack's cross the spine, a pod's
        the core, a building's the campus."""
        return {"spine": self.gpus_per_rack, "core": self.gpus_per_pod, "campus": self.gpus_per_building}

    def size(self, level: str) -> int:
        """GPUs in one container of `level` (LEVELS; the site is all of them)."""
        return {"site": self.gpus, "building": self.gpus_per_building, "pod": self.gpus_per_pod,
                "rack": self.gpus_per_rack, "node": self.gpus_per_node}[level]

    def count(self, level: str) -> int:
        """Containers of `level` (the last may be partial)."""
        return _count(self.gpus, self.size(level))

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

    def outermost_of_lattice(self, first: int, axes: Sequence[tuple[int, int]], spread: int) -> int:
        """Index into TIERS of the outermost tier any group crosses: the groups' lowest members are the points
        of a lattice (`lattice_points(first, axes)`) and their highest lie `spread` GPUs further. A group
        leaves a unit of `per` GPUs when its lowest member's place in it plus the spread reaches the next; per
        unit (outermost first, stopping at the first one crossed), the largest place in closed form
        (`max_residue`), else from the points."""
        low: np.ndarray | None = None
        units = (self.gpus_per_node, self.gpus_per_rack, self.gpus_per_pod, self.gpus_per_building)
        for level in range(len(units), 0, -1):
            per = units[level - 1]
            place = max_residue(first, axes, per)
            if place is None:
                low = lattice_points(first, axes) if low is None else low
                place = int((low % per).max())
            if place + spread >= per:
                return level
        return 0

    def summary(self) -> dict[str, int]:
        """The stream header's `topology`."""
        return {"gpus": self.gpus, "gpus_per_node": self.gpus_per_node, "gpus_per_rack": self.gpus_per_rack,
                "gpus_per_pod": self.gpus_per_pod, "gpus_per_building": self.gpus_per_building,
                "nodes": self.nodes, "racks": self.racks, "pods": self.pods, "buildings": self.buildings}


def lattice_points(first: int, axes: Sequence[tuple[int, int]]) -> np.ndarray:
    """first + sum of r_i s_i over r_i in [0, n_i) for each (n_i, s_i) of `axes`, the first axis slowest."""
    out = np.zeros(1, dtype=np.int64)
    for size, step in axes:
        out = (out[:, None] + np.arange(0, size * step, step, dtype=np.int64)).ravel()
    return out + first


def max_residue(first: int, axes: Sequence[tuple[int, int]], per: int) -> int | None:
    """The largest place in a unit of `per` GPUs, (first + sum of r_i s_i) mod per, over the lattice of `axes`
    ((n_i, s_i), r_i in [0, n_i)), in closed form; None when none applies.

    Mod per, an axis whose stride is a multiple of per adds nothing. When the others cannot wrap round the
    unit, the largest is the far corner. An axis of n >= per / g steps (g = gcd(stride, per)) goes through
    every multiple of g: with it, every place of the same remainder mod g is reached, so the largest is
    per - g + the largest remainder mod g of the other axes (the same question on a unit of g)."""
    start = first % per
    live = [(n, s % per) for n, s in axes if n > 1 and s % per]
    reach = start + sum((n - 1) * s for n, s in live)
    if reach < per:
        return reach
    for i, (n, s) in enumerate(live):
        g = math.gcd(s, per)
        if n >= per // g:
            rest = max_residue(start, live[:i] + live[i + 1:], g)
            return None if rest is None else per - g + rest
    return None


def order_of(entry: Any) -> tuple[str, ...]:
    """The dimension order of a rank order as a header writes it (a list, innermost first) or as a job sets it
    (a "tp-cp-..." string); anything else is the default (a recording from before orders were written)."""
    if isinstance(entry, list) and all(isinstance(d, str) for d in entry):
        entry = "-".join(entry)
    return RANK_ORDERS.get(entry, RANK_ORDER) if isinstance(entry, str) else RANK_ORDER


@dataclass(frozen=True)
class JobGeometry:
    """Where a job's ranks sit: GPUs [first_gpu, first_gpu + gpus), ranks in `order` (innermost first)."""

    first_gpu: int
    gpus: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    order: tuple[str, ...] = RANK_ORDER

    @classmethod
    def of(cls, job: Any) -> JobGeometry:
        """A scenario's job (engine/config/job.py's Job)."""
        return cls(job.first_gpu, job.gpus, job.tp, job.cp, job.pp, job.ep, order_of(job.rank_order))

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> JobGeometry:
        """A stream header's job entry, read defensively (a missing or zero size is 1, an unknown order the
        default)."""

        def size(dim: str) -> int:
            return max(1, int(entry.get(dim, 1) or 1))

        return cls(int(entry["first_gpu"]), int(entry["gpus"]), size("tp"), size("cp"), size("pp"),
                   size("ep"), order_of(entry.get("rank_order")))

    @property
    def dp(self) -> int:
        return max(1, self.gpus // (self.tp * self.cp * self.pp))

    @property
    def unit(self) -> int:
        """GPUs of one stage of one replica (tp * cp): they share every value in lockstep."""
        return self.tp * self.cp

    @property
    def sizes(self) -> dict[str, int]:
        """The size of each dimension of the rank order."""
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "dp": self.dp}

    def stride(self, dim: str) -> int:
        """GPUs between consecutive ranks of a dimension: the product of the sizes inside it in the order (EP
        runs along DP, its innermost part)."""
        d = "dp" if dim == "ep" else dim
        sizes = self.sizes
        return math.prod(sizes[inner] for inner in self.order[:self.order.index(d)])

    def stage_of(self) -> np.ndarray:
        """The pipeline stage of each of the job's GPUs, in job-local order (read-only, shared)."""
        return stage_of(self.gpus, self.stride("pp"), self.pp)

    def ranks(self, gpu: int) -> dict[str, int]:
        """The parallel ranks of one GPU of the job (a global GPU index)."""
        local = gpu - self.first_gpu
        sizes = self.sizes
        out = {d: local // self.stride(d) % sizes[d] for d in RANK_ORDER}
        return {**out, "ep": out["dp"] % self.ep}

    def units(self) -> tuple[np.ndarray, np.ndarray]:
        """(first GPU, stage) of every unit (one stage of one replica, tp * cp GPUs) in GPU order."""
        unit = np.arange(-(-self.gpus // self.unit), dtype=np.int64)
        return self.first_gpu + unit * self.unit, unit * self.unit // self.stride("pp") % self.pp


@lru_cache(maxsize=32)
def stage_of(gpus: int, stride: int, pp: int) -> np.ndarray:
    """The pipeline stage of each of `gpus` GPUs of a job whose stages alternate every `stride` GPUs (tp * cp
    in the Llama 3 order, tp * cp * dp with PP outermost), in the smallest integer type that holds it (a
    site's jobs hold millions of GPUs)."""
    dtype = np.int16 if pp <= np.iinfo(np.int16).max else np.int32
    stage = ((np.arange(gpus, dtype=np.int64) // max(1, stride)) % max(1, pp)).astype(dtype)
    stage.flags.writeable = False
    return stage
