"""Collective communication costs on the link tiers a group really crosses
(alpha-beta, nccl-tests conventions).

A group's members are placed in the job's rank order (engine/config/geometry.py: TP, CP, PP, DP). From the
placement follow: how many members share a node (q), how many nodes the group spans (k), the outermost tier it
crosses, and how much an oversubscribed tier slows it down when every group of the dimension communicates at
once (they do: all replicas run in lockstep). Times use the measured bus bandwidth of each fabric (busbw: the
nccl-tests figure, already net of protocol efficiency), per-step latency alpha, and:

- ring all-reduce 2 (n-1)/n S / busbw + 2 (n-1) alpha; reduce-scatter and all-gather (n-1)/n S / busbw;
- tree all-reduce: same bandwidth term (NCCL's double binary tree is pipelined at full bandwidth), latency
  2 log2(n) alpha; NCCL picks the faster, as its tuner does;
- NVLS (NVLink SHARP) for all-reduce inside an NVSwitch node where the fabric has it;
- hierarchical across nodes: reduce-scatter inside the node, all-reduce of S/q across the k nodes on the q
  NIC rails in parallel, all-gather inside the node (all-reduce); RS/AG likewise;
- all-to-all: each GPU sends (n-1)/n of its data, the part leaving the node over its NIC share;
- point-to-point: S / bandwidth of the tier the pair crosses + alpha.

Inside a scale-up domain the cost depends on how its GPUs are joined (a switch, a mesh, a torus):
engine/model/scaleup.py. Across buildings every step also pays the fibre between them (`net_latency`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..config import catalog
from ..config.cluster import Cluster
from ..config.geometry import RANK_ORDER, TIERS, Geometry, JobGeometry, lattice_points, order_of
from ..config.job import Job
from ..config.units import GB
from . import scaleup

NET_TIERS = ("spine", "core", "campus")


@dataclass(frozen=True)
class Route:
    """Where the groups of one parallel dimension sit, and what that costs."""

    size: int                      # members per group
    q: int                         # members per node
    k: int                         # nodes one group spans
    tier: str | None               # outermost tier crossed (None: group of one)
    slowdown: float                # >= 1: sharing of oversubscribed tiers by all groups at once
    crossing: dict[str, float]     # fraction of the network traffic that crosses each tier above the leaf
    # per tier above the leaf: the connections (NICs' worth of traffic) the groups send out of each block
    # while they communicate, indexed by block number (engine/model/contention.py adds up the jobs sharing a
    # tier), and the tier's own slowdown
    demand: dict[str, np.ndarray] = field(default_factory=dict)
    tier_slowdown: dict[str, float] = field(default_factory=dict)
    shape: tuple[int, ...] = ()    # extent of a group in its scale-up domain per torus dimension (else (q,))
    hops: tuple[int, ...] = ()     # torus hops from a member to the next one (point-to-point)


# Other jobs' traffic on the blocks of each shared tier: (tier, connections per block) pairs,
# hashable for caches.
Background = tuple[tuple[str, tuple[float, ...]], ...]


@dataclass(frozen=True)
class Comm:
    """One collective: its time and the load it puts on each tier while it runs (0..1 of capacity)."""

    time_s: float
    load: dict[str, float]


NO_COMM = Comm(0.0, {})


@dataclass(frozen=True)
class Placement:
    """Where a job's ranks sit: all that the groups of its parallel dimensions depend on (rank order:
    engine/config/geometry.py)."""

    first_gpu: int
    gpus: int
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    order: tuple[str, ...] = RANK_ORDER

    def geometry(self) -> JobGeometry:
        return JobGeometry(self.first_gpu, self.gpus, self.tp, self.cp, self.pp, self.ep, self.order)


def placement(job: Job | Placement) -> Placement:
    if isinstance(job, Placement):
        return job
    return Placement(job.first_gpu, job.gpus, job.tp, job.cp, job.pp, job.dp, job.ep,
                     order_of(job.rank_order))


def members(job: Job | Placement, dims: tuple[str, ...]) -> np.ndarray:
    """Job-local GPU indices of every group over `dims`, shape (groups, size), members in ring order."""
    sizes = placement(job).geometry().sizes
    outer_first = placement(job).order[::-1]
    grid = np.arange(job.gpus).reshape([sizes[d] for d in outer_first])
    names = list(outer_first)
    if "ep" in dims:   # EP shards experts over consecutive DP ranks (engine/config/geometry.py)
        at = names.index("dp")
        grid = grid.reshape(grid.shape[:at] + (job.dp // job.ep, job.ep) + grid.shape[at + 1:])
        names[at:at + 1] = ["dpo", "ep"]
        want = ["ep"]
    else:
        want = [d for d in ("dp", "cp", "pp", "tp") if d in dims]
    axes = [names.index(n) for n in names if n not in want] + [names.index(n) for n in want]
    moved = np.transpose(grid, axes)
    size = int(np.prod([moved.shape[i] for i in range(len(names) - len(want), len(names))]))
    return np.ascontiguousarray(moved.reshape(-1, size))     # row by row: what every caller walks


Axes = list[tuple[int, int]]     # a lattice's (size, stride) axes, outermost first


def lattice_axes(job: Placement, dims: tuple[str, ...]) -> tuple[Axes, Axes]:
    """`members(job, dims) + job.first_gpu` without building it: member j of group g is GPU bases[g] +
    offsets[j], the bases `lattice_points(job.first_gpu, outer)` and the offsets `lattice_points(0, inner)`
    of the (size, stride) axes returned, (outer, inner) (groups in the rows' order; offsets increase: the
    members sit in GPU order)."""
    sizes = job.geometry().sizes
    axes: list[tuple[str, int, int]] = []          # (name, size, stride), innermost first (then reversed)
    stride = 1
    for d in job.order:                             # a dimension's stride: the product of the sizes inside it
        axes.append((d, sizes[d], stride))
        stride *= sizes[d]
    axes.reverse()
    if "ep" in dims:   # EP shards experts over consecutive DP ranks (engine/config/geometry.py)
        at = [a[0] for a in axes].index("dp")
        _, dp, dp_stride = axes[at]
        axes[at:at + 1] = [("dpo", dp // job.ep, dp_stride * job.ep), ("ep", job.ep, dp_stride)]
        want = ["ep"]
    else:
        want = [d for d in ("dp", "cp", "pp", "tp") if d in dims]
    by_name = {name: (size, step) for name, size, step in axes}
    return [by_name[a[0]] for a in axes if a[0] not in want], [by_name[name] for name in want]


def group_size(job: Job | Placement, dims: tuple[str, ...]) -> int:
    """Members of each group over `dims` (what `members` gives each row), without building the groups."""
    return job.ep if "ep" in dims else math.prod(getattr(job, d) for d in dims)


def route(cluster: Cluster, job: Job | Placement, dims: tuple[str, ...], pattern: str = "ring",
          background: Background = ()) -> Route:
    """Placement facts of the groups over `dims` ("ring" for collectives and p2p chains, "all2all" for EP).

    They depend on the job's placement only (and on other jobs' traffic on the tiers it shares: `background`):
    jobs that differ in anything else share them (cached).
    """
    return _route(cluster, placement(job), dims, pattern, background)


@lru_cache(maxsize=256)
def _route(cluster: Cluster, job: Placement, dims: tuple[str, ...], pattern: str,
           background: Background = ()) -> Route:
    if group_size(job, dims) <= 1:
        return Route(1, 1, 1, None, 1.0, {})
    topo = Geometry.of(cluster)
    outer, inner = lattice_axes(job, dims)
    offsets = lattice_points(0, inner)
    size = offsets.size                                           # members per group
    first = job.first_gpu + offsets
    node = np.sort(first // topo.gpus_per_node)               # node[0]: the first member's (offset 0)
    q = int(np.sum(node == node[0]))
    k = int(np.count_nonzero(node[1:] != node[:-1])) + 1      # the nodes the group spans
    outermost = topo.outermost_of_lattice(job.first_gpu, outer, int(offsets[-1]))
    tier = TIERS[outermost]
    end = job.first_gpu + job.gpus          # the groups hold every GPU of the job: [first_gpu, end)
    oversub = cluster.oversubscription()
    crossing: dict[str, float] = {}
    demands: dict[str, np.ndarray] = {}
    tier_slowdown: dict[str, float] = {}
    others = dict(background)
    slowdown = 1.0
    if k > 1:
        bases = lattice_points(job.first_gpu, outer)
        count = bases.size * size                                 # members in all groups
        steps = np.diff(offsets)
        gaps = int(steps.min()), int(steps.max())
        # share of each GPU's traffic that goes on the network: for a ring, its edges that leave a node (each
        # carries q rails); for an all-to-all, the members outside its node
        net_share = (size - q) / size if pattern == "all2all" else \
            float(_ring_edges_leaving(bases, offsets, end, topo.gpus_per_node, gaps).sum()) * q / count
        for t in NET_TIERS[:max(0, outermost - TIERS.index(NET_TIERS[0]) + 1)]:
            # (a tier above the outermost one crossed: every group inside one of its blocks, nothing leaves)
            block = topo.block_sizes()[t]
            edges: np.ndarray | None = None     # a ring's edges leaving each block, while they are the demand
            if pattern == "all2all":
                src_block = (bases[:, None] + offsets) // block
                same = (src_block[:, :, None] == src_block[:, None, :]).sum(axis=2)
                frac = (size - same) / size            # share of each GPU's traffic leaving its block
                demand: np.ndarray = np.bincount(src_block.ravel(), weights=frac.ravel())
            else:
                # q connections per ring edge that leaves its block: whole numbers, so counting the edges and
                # multiplying gives the very sums that adding q per edge did
                edges = _ring_edges_leaving(bases, offsets, end, block, gaps)
                demand = edges * float(q)
            total = float(demand.sum())
            if total <= 0:
                continue
            demands[t] = demand
            theirs = others.get(t)
            if theirs:                              # other jobs' connections on the same blocks
                                                    # at the same time
                n = max(demand.size, len(theirs))
                demand = np.pad(demand, (0, n - demand.size))
                demand = demand + np.pad(np.asarray(theirs), (0, n - len(theirs))) * (demand > 0)
                edges = None
            # ECMP hashes flows onto the paths: a ring edge is one connection of ecmp_flows flows; an
            # all-to-all sends to every member outside the node, one connection each
            flows = min(1024, cluster.ecmp_flows * (size - q if pattern == "all2all" else 1))
            # blocks alike (demand, paths) share one answer, and only the busiest block's counts: each
            # distinct pair once
            pairs = _block_loads(cluster, topo, t, block, oversub[t], demand, edges, q)
            busiest = max(ecmp_max_load(x, int(y), flows) if x > 0 else 0.0 for x, y in pairs)
            tier_slowdown[t] = max(1.0, busiest)
            slowdown = max(slowdown, tier_slowdown[t])
            crossing[t] = total / max(net_share * count, 1e-9)
    return Route(size, q, k, tier, max(1.0, slowdown), crossing, demands, tier_slowdown,
                 scaleup.group_shape(cluster, first, q), scaleup.hops(cluster, int(first[0]), int(first[1])))


def _block_loads(cluster: Cluster, topo: Geometry, tier: str, block: int, over: float, demand: np.ndarray,
                 edges: np.ndarray | None, q: int) -> list[tuple[float, float]]:
    """The distinct (connections, uplink paths) of the blocks of a tier (`demand`: connections leaving each
    block; `edges`: the ring edges they are, q connections each, when they are whole). A block's paths are its
    GPUs (the last block's may be fewer) / `over`, times the share of its links still up (cluster.degraded);
    without degraded links every full block has as many, so only the last can differ. Demands are rounded to
    1e-3 (whole numbers of edges are as they are: their distinct counts are found without sorting)."""
    n = demand.size
    if cluster.degraded:
        capacity = _block_capacity(cluster, topo, block, n)
        health = _block_health(cluster, topo, tier, block, n)
        paths = np.maximum(1.0, np.floor(capacity / over * health))
        if paths.min() != paths.max():
            return _distinct_pairs(np.round(demand, 3), paths)
        return [(x, float(paths[0])) for x in _distinct_demands(demand, edges, q).tolist()]
    full = max(1.0, float(math.floor(float(block) / over)))
    last = max(1.0, float(math.floor(float(_last_block_gpus(cluster, block, n)) / over)))
    if n == 1 or full == last:
        return [(x, last) for x in _distinct_demands(demand, edges, q).tolist()]
    head = _distinct_demands(demand[:-1], None if edges is None else edges[:-1], q)
    return [(x, full) for x in head.tolist()] + [(float(np.round(demand[-1:], 3)[0]), last)]


def _distinct_demands(demand: np.ndarray, edges: np.ndarray | None, q: int) -> np.ndarray:
    """The distinct demands rounded to 1e-3, ascending: from the whole edges (q connections each) by counting
    when the caller has them."""
    if edges is not None:
        return np.flatnonzero(np.bincount(edges)) * float(q)
    return _sorted_distinct(np.round(demand, 3))


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) without it: np.unique asks numpy.ma whether the array is masked, and importing
    numpy.ma costs a process ~20 ms (every sweep worker, every `clustertop estimate`)."""
    ordered = np.sort(values)
    keep = np.ones(ordered.size, dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    out: np.ndarray = ordered[keep]
    return out


def _distinct_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[float, float]]:
    """The distinct (a[i], b[i]) pairs, by a then b (as np.unique of a + 1j b gives them, without it)."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    keep = np.ones(a.size, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return list(zip(a[keep].tolist(), b[keep].tolist()))


def _ring_edges_leaving(bases: np.ndarray, offsets: np.ndarray, end: int, unit: int,
                        gaps: tuple[int, int] | None = None) -> np.ndarray:
    """Per unit (node or block: GPUs [u unit, (u + 1) unit), u up to the job's last GPU's), how many ring
    edges (each member to the next, the last to the first) leave it from a member inside it, over every group
    (lattice: member j of group g is bases[g] + offsets[j]). A group's members in one unit are a run of
    consecutive members (they sit in GPU order), and only the run's last one's edge leaves (to a later member,
    or round to the first, which is outside unless the whole group is inside): one edge per unit a group
    touches, none when it touches one. So when members lie at least a unit apart, every member's edge leaves
    and a unit's count is the job's GPUs in it; when they lie closer, a group touches every unit from its
    first member's to its last's. Whole numbers, exact; other groups are walked member by member. `gaps`: the
    least and the largest distance between consecutive offsets, when the caller has them."""
    length = (end - 1) // unit + 1
    if gaps is None:
        steps = np.diff(offsets)
        gaps = int(steps.min()), int(steps.max())
    if gaps[0] >= unit:
        # the job's GPUs in [u unit, (u + 1) unit): none before its first GPU's unit, all between
        start = int(bases.min())
        inside = np.full(length, unit, dtype=np.int64)
        inside[:start // unit] = 0
        for u in (start // unit, length - 1):
            inside[u] = max(min(u * unit + unit, end) - max(u * unit, start), 0)
        return inside
    if gaps[1] < unit:
        low, high = bases // unit, (bases + int(offsets[-1])) // unit
        spans = low != high
        ends = np.bincount(low[spans], minlength=length + 1) - \
            np.bincount(high[spans] + 1, minlength=length + 1)
        touched: np.ndarray = np.cumsum(ends[:length])
        return touched
    units = (bases[:, None] + offsets) // unit
    return np.bincount(units[_leaves(units)], minlength=length)


def _leaves(units: np.ndarray) -> np.ndarray:
    """Per member of each group (rows, in ring order): whether its ring edge to the next member (the last to
    the first) leaves its unit (`units`: each member's node, block, ...)."""
    flat, size = units.ravel(), units.shape[1]         # compared as one run
                                                       # (contiguous: fast for short rows),
    out = np.empty(units.size, dtype=bool)            # then each row's last member against its first
    np.not_equal(flat[:-1], flat[1:], out=out[:-1])
    out[size - 1::size] = units[:, -1] != units[:, 0]
    return out.reshape(units.shape)


def _block_health(cluster: Cluster, topo: Geometry, tier: str, block: int, n: int) -> np.ndarray:
    """Fraction of each block's uplinks at `tier` still carrying traffic (cluster.degraded): a degraded
    tier of one pod (or every pod) runs at that fraction of its bandwidth. "leaf" degradation (node uplinks)
    counts at the spine tier, whose traffic every node-crossing ring also puts on its leaf links."""
    health = np.ones(n)
    for d in cluster.degraded:
        if d.tier != tier and not (d.tier == "leaf" and tier == "spine"):
            continue
        pod_of_block = np.arange(n) * block // topo.gpus_per_pod
        hit = np.ones(n, dtype=bool) if d.pod is None else pod_of_block == d.pod
        if tier == "campus" and d.pod is not None:          # the building holding that pod
            hit = (np.arange(n) * block <= d.pod * topo.gpus_per_pod) & \
                (d.pod * topo.gpus_per_pod < (np.arange(n) + 1) * block)
        health[hit] *= d.capacity
    return health


@lru_cache(maxsize=4096)
def ecmp_max_load(connections: float, paths: int, flows: int) -> float:
    """Expected load of the busiest uplink when `connections` (each one NIC's worth of traffic, split into
    `flows` equal flows) are hashed onto `paths` equal links by ECMP: balls into bins. With n = connections x
    flows balls in L bins, E[max bin] = sum over k >= 1 of (1 - P(bin < k)^L), a bin's count Poisson with mean
    n / L; the link load is E[max bin] / flows (at least the mean n / L / flows). One flow per connection
    (plain ECMP) makes large flows collide: 16 connections on 16 links load the busiest ~3.5x; 16 flows per
    connection (Llama 3's enhanced ECMP) bring it back near 1.3x."""
    n = connections * flows
    if paths <= 1:
        return connections
    mean = n / paths
    if mean > 100:                           # Poisson ~ normal: the max of L is mean + sqrt(2 mean ln L)
        return (mean + math.sqrt(2 * mean * math.log(paths))) / flows
    total, pmf, cdf, k, bins = 0.0, math.exp(-mean), 0.0, 0, float(paths)
    while True:                             # plain arithmetic, no call: up to a few hundred rounds
        cdf += pmf                          # P(bin <= k)
        k += 1
        term: float = 1.0 - (cdf if cdf < 1.0 else 1.0) ** bins     # noqa: FURB136  (min() is a call a round)
        total += term
        if term < 1e-6 and k > mean:
            break
        pmf *= mean / k
    return max(total, mean) / flows


def _block_capacity(cluster: Cluster, topo: Geometry, block: int, n: int) -> np.ndarray:
    """GPUs physically present in each block (the last one may be partial)."""
    capacity = np.full(n, float(block))
    capacity[-1] = _last_block_gpus(cluster, block, n)                   # the others hold `block` each
    return capacity


def _last_block_gpus(cluster: Cluster, block: int, n: int) -> int:
    """GPUs in the last of n blocks of `block` (the cluster may end part-way through it)."""
    return min(block, max(1, cluster.gpus - (n - 1) * block))


# ------------------------------------------------------------------------------------------- bandwidths

def net_latency(cluster: Cluster, tier: str | None) -> float:
    """Seconds of one step of a collective on the scale-out network: the NICs' latency, plus the fibre between
    buildings (catalogs/site.toml: 4.9 us per km) when the group crosses them."""
    alpha = cluster.scale_out.latency_us * 1e-6
    if tier == "campus" and cluster.building_distance_km:
        alpha += cluster.building_distance_km * catalog.optics().fibre_latency_us_per_km * 1e-6
    return alpha


def net_busbw(cluster: Cluster) -> float:
    """Bytes/s of scale-out bus bandwidth per GPU: its share of the node's NICs."""
    share = min(1.0, cluster.nics_per_node / cluster.gpus_per_node)
    return cluster.scale_out.busbw_gb_s * GB * share


def _net_line(cluster: Cluster) -> float:
    return cluster.scale_out.gb_s * GB * min(1.0, cluster.nics_per_node / cluster.gpus_per_node)


def _load(cluster: Cluster, r: Route, node_bytes: float, net_bytes: float, time_s: float) -> dict[str, float]:
    """Mean utilization of each tier during a collective, for the job's links."""
    if time_s <= 0:
        return {}
    load: dict[str, float] = {}
    if node_bytes > 0:
        load["node"] = min(1.0, node_bytes / time_s / (cluster.node_link.gb_s * GB))
    if net_bytes > 0:
        leaf = min(1.0, net_bytes / time_s / _net_line(cluster))
        load["leaf"] = leaf
        for t, frac in r.crossing.items():
            load[t] = min(1.0, leaf * frac * cluster.oversubscription()[t])
    return load


# ------------------------------------------------------------------------------------------ collectives

def allreduce(cluster: Cluster, r: Route, nbytes: float) -> Comm:
    return _reduce(cluster, r, nbytes, 2.0)


def reduce_scatter(cluster: Cluster, r: Route, nbytes: float) -> Comm:
    """Reduce-scatter (or all-gather: same cost) of a buffer of `nbytes` over the group."""
    return _reduce(cluster, r, nbytes, 1.0)


all_gather = reduce_scatter


def _reduce(cluster: Cluster, r: Route, nbytes: float, passes: float) -> Comm:
    """passes = 2 for all-reduce (RS + AG), 1 for reduce-scatter or all-gather."""
    n = r.size
    if n <= 1 or nbytes <= 0:
        return NO_COMM
    net_alpha = net_latency(cluster, r.tier)
    ar = passes == 2.0
    if r.k == 1:
        t = scaleup.reduce(cluster, n, r.shape, nbytes, passes, nvls=ar)
        return Comm(t, _load(cluster, r, passes * (n - 1) / n * nbytes, 0.0, t))
    q, k = r.q, r.k
    node_part = 0.0
    node_bytes = 0.0
    if q > 1:
        node_bytes = passes * (q - 1) / q * nbytes
        node_part = scaleup.reduce(cluster, q, r.shape, nbytes, passes, nvls=False)
    shard = nbytes / q
    net_bytes = passes * (k - 1) / k * shard
    bw = net_busbw(cluster) / r.slowdown
    ring = 2 * (k - 1) if ar else (k - 1)
    tree = 2 * math.ceil(math.log2(k)) if ar else ring
    t = node_part + net_bytes / bw + min(ring, tree) * net_alpha
    return Comm(t, _load(cluster, r, node_bytes, net_bytes, t))


def all_to_all(cluster: Cluster, r: Route, nbytes: float, net_share: float = 1.0) -> Comm:
    """All-to-all where each GPU holds `nbytes` destined evenly to the n members (itself included); of what
    leaves the node, `net_share` crosses the network (an MoE dispatch that sends a token once per node)."""
    n = r.size
    if n <= 1 or nbytes <= 0:
        return NO_COMM
    node_bytes = nbytes * (r.q - 1) / n
    net_bytes = nbytes * (n - r.q) / n * net_share
    eff = cluster.scale_out.alltoall_efficiency
    t_node = scaleup.all_to_all(cluster, r.q, r.shape, node_bytes)
    t_net = net_bytes / (net_busbw(cluster) * eff / r.slowdown) if net_bytes else 0.0
    alpha = cluster.node_link.latency_us * 1e-6 + (net_latency(cluster, r.tier) if net_bytes else 0.0)
    t = max(t_node, t_net) + alpha
    return Comm(t, _load(cluster, r, node_bytes, net_bytes, t))


def p2p(cluster: Cluster, r: Route, nbytes: float) -> Comm:
    """One GPU sends `nbytes` to its neighbour in the group (pipeline stages, CP ring steps)."""
    if r.size <= 1 or nbytes <= 0:
        return NO_COMM
    if r.k == 1:
        t = scaleup.p2p(cluster, r.hops, nbytes)
        return Comm(t, _load(cluster, r, nbytes, 0.0, t))
    bw = net_busbw(cluster) / r.slowdown
    t = nbytes / bw + net_latency(cluster, r.tier)
    # of the ring edges, k of n leave the node; the busiest GPU's edge crosses the network
    return Comm(t, _load(cluster, r, 0.0, nbytes, t))
