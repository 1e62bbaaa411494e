"""Collectives inside one scale-up domain (the topology's "node"), by how its GPUs are joined
(cluster.scale_up).

- switched ("nvswitch", "nvl72"; "pcie" through the host): every GPU reaches every other at its full bus
  bandwidth, whatever the group: ring or tree costs (NVLS for all-reduce where the fabric has it), as
  engine/model/collectives.py has always done.
- mesh ("xgmi-mesh": AMD's Infinity Fabric; "roce-mesh": Gaudi 3's on-chip RoCE): no switch, each pair of GPUs
  has its own link(s). A ring would use 2 of the 7 links of a GPU; RCCL/HCCL run all-reduce, reduce-scatter,
  all-gather and all-to-all directly (each GPU sends each peer its share at once), over the q - 1 links to the
  group's other members: `busbw x (q - 1) / 7`, one latency per phase. A group of 8 gets the whole node's
  bandwidth; a TP group of 4 gets 3/7 of it and a pair 1/7,
  where NVSwitch gives any group all of it. A point-to-
  point transfer (pipeline stages, the CP ring) has one link.
- torus ("torus-2d", "torus-3d": TPU ICI, Trainium NeuronLink): each chip links to its neighbours only. A
  group spanning a box of the torus reduces along each dimension it spans, concurrently: each dimension gives
  2 links per chip when the group spans its whole ring (wrap-around) and 1 when it spans a segment (a ring
  over a line comes back along it); latency: one step per member along each dimension. All-to-all traffic
  travels the mean torus distance (a ring of n: n/4 hops; a segment: n/3) over the same links. A
  point-to-point transfer crosses the hops between the pair; in lockstep every chip of the group sends as far,
  so each link on the way carries as many transfers as there are hops
  (half as many when the way round is as long in both directions).
"""

from __future__ import annotations

import math

import numpy as np

from ..config.cluster import MESHES, TORUS_DIMS, Cluster
from ..config.units import GB


def coordinates(cluster: Cluster, gpus: np.ndarray) -> np.ndarray:
    """Torus coordinates (x first) of GPUs in their scale-up domain: shape (..., dims)."""
    local = np.asarray(gpus) % cluster.gpus_per_node
    out = []
    for extent in cluster.torus:
        out.append(local % extent)
        local = local // extent
    return np.stack(out, axis=-1)


def group_shape(cluster: Cluster, members: np.ndarray, q: int) -> tuple[int, ...]:
    """A group's extent along each torus dimension, from its q members in its first member's domain (a mesh or
    a switch: q)."""
    if cluster.scale_up not in TORUS_DIMS:
        return (q,)
    node = members // cluster.gpus_per_node
    local = members[node == node[0]]
    coords = coordinates(cluster, local)
    return tuple(int(np.unique(coords[:, d]).size) for d in range(len(cluster.torus)))


def hops(cluster: Cluster, a: int, b: int) -> tuple[int, ...]:
    """Torus distance from GPU a to GPU b per dimension (shortest way round); () off a torus."""
    if cluster.scale_up not in TORUS_DIMS:
        return ()
    ca, cb = coordinates(cluster, np.array([a, b]))
    return tuple(int(min(abs(x - y), n - abs(x - y)))
                 for x, y, n in zip(ca.tolist(), cb.tolist(), cluster.torus))


def _torus_links(cluster: Cluster, shape: tuple[int, ...]) -> tuple[float, float]:
    """(links per chip a group spanning `shape` uses, latency steps of one pass along every dimension)."""
    links = steps = 0.0
    for extent, full in zip(shape, cluster.torus):
        if extent > 1:
            links += 2.0 if extent == full and extent > 2 else 1.0
            steps += extent - 1
    return max(links, 1.0), steps


def reduce(cluster: Cluster, q: int, shape: tuple[int, ...], nbytes: float, passes: float,
           nvls: bool) -> float:
    """Seconds of a reduce-scatter (passes 1), all-gather (1) or all-reduce (2) of `nbytes` per GPU over the q
    members of a group inside one domain (`shape`: its extent per torus dimension). `nvls`: NVLink SHARP may
    serve it (an all-reduce inside a switched domain)."""
    link = cluster.node_link
    alpha = link.latency_us * 1e-6
    moved = passes * (q - 1) / q * nbytes
    kind = cluster.scale_up
    if kind in MESHES:
        return moved / (link.link_busbw_gb_s * GB * min(q - 1, link.links)) + passes * alpha
    if kind in TORUS_DIMS:
        if math.prod(shape) != q:                # not a box of the torus: a ring over one link at a time
            return moved / (link.link_busbw_gb_s * GB) + passes * (q - 1) * alpha
        links, steps = _torus_links(cluster, shape)
        return moved / (link.link_busbw_gb_s * GB * links) + passes * steps * alpha
    bw = link.nvls_busbw_gb_s if nvls and link.nvls_busbw_gb_s and kind != "pcie" else link.busbw_gb_s
    return moved / (bw * GB) + passes * (q - 1) * alpha


def all_to_all(cluster: Cluster, q: int, shape: tuple[int, ...], nbytes: float) -> float:
    """Seconds for the part of an all-to-all inside one domain: `nbytes` per GPU to its q - 1 domain peers."""
    link = cluster.node_link
    kind = cluster.scale_up
    if nbytes <= 0:
        return 0.0
    if kind in MESHES:
        return nbytes / (link.link_busbw_gb_s * GB * min(q - 1, link.links) * link.alltoall_efficiency)
    if kind in TORUS_DIMS:
        links, _ = _torus_links(cluster, shape)
        distance = sum((e / 4 if e == full else e / 3) for e, full in zip(shape, cluster.torus) if e > 1)
        return nbytes * max(distance, 1.0) / (link.link_busbw_gb_s * GB * links * link.alltoall_efficiency)
    return nbytes / (link.busbw_gb_s * GB * link.alltoall_efficiency)


def p2p(cluster: Cluster, distance: tuple[int, ...], nbytes: float) -> float:
    """Seconds to send `nbytes` to a peer in the same domain (`distance`: torus hops per dimension)."""
    link = cluster.node_link
    alpha = link.latency_us * 1e-6
    kind = cluster.scale_up
    if kind in MESHES:
        return nbytes / (link.link_busbw_gb_s * GB) + alpha
    if kind in TORUS_DIMS and distance:
        load = max(max((h / 2 if 2 * h == n else float(h)) for h, n in zip(distance, cluster.torus)), 1.0)
        extra = max(sum(distance) - 1, 0) * link.hop_latency_us * 1e-6
        return nbytes * load / (link.link_busbw_gb_s * GB) + alpha + extra
    return nbytes / (link.busbw_gb_s * GB) + alpha


def describe(cluster: Cluster) -> dict[str, object]:
    """The scale-up domain in a few figures, for `estimate` and the recording header."""
    link = cluster.node_link
    out: dict[str, object] = {"kind": cluster.scale_up, "gpus": cluster.gpus_per_node, "link": link.name,
                              "gb_s_per_gpu": link.gb_s, "busbw_gb_s": link.busbw_gb_s}
    if cluster.scale_up in MESHES or cluster.scale_up in TORUS_DIMS:
        out["links_per_gpu"] = link.links
        out["gb_s_per_link"] = round(link.gb_s / link.links, 3)
    if cluster.torus:
        out["torus"] = list(cluster.torus)
    return out
