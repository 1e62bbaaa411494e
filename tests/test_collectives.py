"""Collectives: alpha-beta costs on the tier a group crosses, hierarchy, oversubscription,
algorithm choice."""

from __future__ import annotations

import dataclasses

import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.model import collectives as col


def _cluster(**kw):  # type: ignore[no-untyped-def]
    base = scenario.load("llama3-405b-16k").cluster
    return dataclasses.replace(base, **kw)


def _job(**kw):  # type: ignore[no-untyped-def]
    return dataclasses.replace(scenario.load("llama3-405b-16k").jobs[0], **kw)


def test_tp_group_stays_in_the_node_and_uses_nvlink_busbw() -> None:
    cl, job = _cluster(), _job()
    r = col.route(cl, job, ("tp",))
    assert (r.size, r.q, r.k, r.tier) == (8, 8, 1, "node")
    S = 256e6
    rs = col.reduce_scatter(cl, r, S)
    assert rs.time_s == pytest.approx(7 / 8 * S / (cl.scale_up_link.busbw_gb_s * 1e9) + 7 * 8e-6)
    ar = col.allreduce(cl, r, S)   # NVLS on NVLink 4 for all-reduce
    assert ar.time_s == pytest.approx(2 * 7 / 8 * S / (cl.scale_up_link.nvls_busbw_gb_s * 1e9) + 14 * 8e-6)


def test_dp_group_spans_nodes_and_pods() -> None:
    cl, job = _cluster(), _job()
    r = col.route(cl, job, ("dp",))
    assert r.size == 128 and r.q == 1 and r.k == 128 and r.tier == "core"
    S = 1e9
    ar = col.allreduce(cl, r, S)
    net = cl.scale_out.busbw_gb_s * 1e9
    assert ar.time_s == pytest.approx(2 * 127 / 128 * S / (net / r.slowdown), rel=0.01)
    assert ar.load["leaf"] > 0.5


def test_hierarchical_allreduce_reduces_inside_the_node_first() -> None:
    cl = _cluster()
    job = _job(tp=1, pp=1, dp=16384)    # DP packs 8 ranks per node
    r = col.route(cl, job, ("dp",))
    assert r.q == 8 and r.k == 2048
    S = 1e9
    t = col.allreduce(cl, r, S).time_s
    node = 2 * 7 / 8 * S / (cl.scale_up_link.busbw_gb_s * 1e9) + 2 * 7 * cl.scale_up_link.latency_us * 1e-6
    # across nodes: S/8 per rail, tree latency (2 log2 2048 steps) beats the ring's 2 * 2047
    net = (2 * 2047 / 2048 * (S / 8) / (cl.scale_out.busbw_gb_s * 1e9 / r.slowdown)
           + 2 * 11 * cl.scale_out.latency_us * 1e-6)
    assert t == pytest.approx(node + net, rel=1e-6)


def test_tree_beats_ring_latency_for_small_messages_at_scale() -> None:
    cl, job = _cluster(), _job()
    r = col.route(cl, job, ("dp",))
    small = col.allreduce(cl, r, 1024).time_s
    assert small < 2 * 127 * cl.scale_out.latency_us * 1e-6 / 2


def test_oversubscribed_core_slows_all_to_all_across_pods() -> None:
    job = _job(tp=1, cp=1, pp=1, dp=16384, ep=4096, global_batch=16384,
               model=catalog.models()["deepseek-v3"])
    full = col.route(_cluster(pod_oversubscription=1.0), job, ("ep",), "all2all")
    over = col.route(_cluster(pod_oversubscription=7.0), job, ("ep",), "all2all")
    assert full.slowdown == pytest.approx(1.0, abs=0.1)   # ECMP: the busiest link a few % above the mean
    assert over.slowdown > 3.0
    S = 1e9
    assert col.all_to_all(_cluster(pod_oversubscription=7.0), over, S).time_s > 3 * col.all_to_all(
        _cluster(pod_oversubscription=1.0), full, S).time_s


def test_a_faster_fabric_is_faster() -> None:
    job = _job()
    fab = catalog.fabrics()
    slow, fast = _cluster(scale_out=fab["roce-400g"]), _cluster(scale_out=fab["roce-800g"])
    r = col.route(slow, job, ("dp",))
    assert col.reduce_scatter(fast, r, 1e9).time_s < 0.6 * col.reduce_scatter(slow, r, 1e9).time_s


def test_pcie_node_fabric_is_slower_than_nvswitch() -> None:
    cl_nv, cl_pcie = _cluster(), _cluster(scale_up="pcie")
    r = col.route(cl_nv, _job(), ("tp",))
    assert col.allreduce(cl_pcie, r, 1e8).time_s > 10 * col.allreduce(cl_nv, r, 1e8).time_s


def test_groups_of_one_cost_nothing() -> None:
    r = col.route(_cluster(), _job(), ("cp",))
    assert r.size == 1 and r.tier is None
    assert col.allreduce(_cluster(), r, 1e9).time_s == 0.0


def test_ecmp_one_flow_per_connection_collides_many_flows_spread() -> None:
    from clustertop.engine.model.collectives import ecmp_max_load

    assert ecmp_max_load(16, 16, 1) > 2.5           # balls into bins: the busiest of 16 links carries ~3
    assert ecmp_max_load(16, 16, 16) < 1.6
    assert ecmp_max_load(16, 16, 1024) == pytest.approx(1.0, abs=0.1)
    assert ecmp_max_load(16, 16, 16) > ecmp_max_load(16, 16, 64) > 1.0


def test_degraded_links_and_plain_ecmp_slow_the_groups_that_cross_them() -> None:
    import dataclasses

    from clustertop.engine.config import scenario as sc
    from clustertop.engine.config.cluster import DegradedLinks
    from clustertop.engine.model.collectives import route

    s = sc.load("llama3-405b-16k")
    job = s.jobs[0]
    base = route(s.cluster, job, ("dp",)).slowdown
    half = dataclasses.replace(s.cluster, degraded=(DegradedLinks("core", None, 0.5),))
    assert route(half, job, ("dp",)).slowdown > 1.5 * base
    plain = dataclasses.replace(s.cluster, ecmp_flows=1)
    assert route(plain, job, ("dp",)).slowdown > base
    one_pod = dataclasses.replace(s.cluster, degraded=(DegradedLinks("spine", 2, 0.5),))
    assert route(one_pod, job, ("pp",)).slowdown > route(s.cluster, job, ("pp",)).slowdown


@pytest.mark.parametrize("gpus", [1000, 4096, 16384, 20000])
def test_outermost_tier_is_the_widest_unit_a_group_leaves(gpus: int) -> None:
    # against the pairwise definition: the largest tier between a group's lowest member and its highest, for
    # lattices of groups inside one node, rack, pod or building and across them, on clusters with partial pods
    # and buildings
    import random

    import numpy as np
    from clustertop.engine.config.geometry import Geometry, lattice_points

    rng = random.Random(gpus)
    for per_building in (1, 2, 3):
        cluster = _cluster(gpus=gpus - gpus % 8, pods_per_building=per_building)
        topo = Geometry.of(cluster)
        seen = set()
        for unit in (topo.gpus_per_node, topo.gpus_per_rack, topo.gpus_per_pod, topo.gpus_per_building,
                     cluster.gpus):
            for case in range(7):
                first = rng.randrange(max(1, cluster.gpus // unit)) * unit + rng.choice([0, 1, unit // 2])
                axes = [(rng.choice([1, 2, 3, 16]), rng.choice([1, 8, 24, unit, 2 * unit]))
                        for _ in range(rng.randint(0, 2))]
                spread = rng.choice([0, 1, 7, unit // 2, unit - 1, unit])
                if case == 0:                      # a pair astride the unit's first boundary
                    first, axes, spread = unit - 1, [], 1
                low = lattice_points(first, axes)
                want = int(topo.tier_between(low, low + spread).max())
                assert topo.outermost_of_lattice(first, axes, spread) == want, (first, axes, spread)
                if low.max() + spread < cluster.gpus:
                    seen.add(want)
        assert seen >= {1, 2}                      # groups that leave a node, a rack
        assert bool(seen & {3, 4}) == (topo.pods > 1)   # and a pod or a building, when there are several
    assert topo.outermost_of_lattice(5, [], 0) == 0       # nothing left: the node tier
    assert np.array_equal(lattice_points(3, [(2, 10), (3, 1)]), [3, 4, 5, 13, 14, 15])


def test_group_size_is_the_members_row_length() -> None:
    from clustertop.engine.model.collectives import Placement, group_size, members

    job = Placement(first_gpu=0, gpus=2 * 3 * 4 * 2 * 5, tp=2, cp=3, pp=4, dp=10, ep=5)
    for dims in (("tp",), ("cp",), ("pp",), ("dp",), ("dp", "cp"), ("ep",)):
        assert group_size(job, dims) == members(job, dims).shape[1], dims


def _placements():  # type: ignore[no-untyped-def]
    from clustertop.engine.config.geometry import RANK_ORDERS
    from clustertop.engine.model.collectives import Placement

    for tp, cp, pp, dp, ep in ((2, 3, 4, 10, 5), (8, 1, 16, 12, 1), (4, 2, 3, 8, 4), (1, 1, 5, 7, 7),
                               (8, 2, 1, 6, 2), (3, 1, 2, 2, 1)):
        for first in (0, 5, 40):
            for order in sorted(set(RANK_ORDERS.values())):
                yield Placement(first, tp * cp * pp * dp, tp, cp, pp, dp, ep, order)


def _lattice(job, dims):  # type: ignore[no-untyped-def]
    """(bases, offsets) of the groups over `dims`: member j of group g is GPU bases[g] + offsets[j]."""
    from clustertop.engine.config.geometry import lattice_points

    outer, inner = col.lattice_axes(job, dims)
    return lattice_points(job.first_gpu, outer), lattice_points(0, inner)


def test_the_group_lattice_is_the_members() -> None:
    import numpy as np

    for job in _placements():
        for dims in (("tp",), ("cp",), ("pp",), ("dp",), ("dp", "cp"), ("ep",)):
            bases, offsets = _lattice(job, dims)
            groups = col.members(job, dims) + job.first_gpu
            assert np.array_equal(bases[:, None] + offsets, groups), (job, dims)
            assert np.all(np.diff(offsets) > 0)                # members in GPU order


def test_ring_edges_leaving_each_unit_are_the_walked_ones() -> None:
    """The count per unit from the groups' lattice (a closed form where members lie at least a unit apart or
    closer, a walk otherwise) is the walk over every member: each ring edge that leaves its member's unit."""
    import numpy as np

    branches = set()
    for job in _placements():
        for dims in (("tp",), ("cp",), ("pp",), ("dp",), ("dp", "cp")):
            if col.group_size(job, dims) <= 1:
                continue
            bases, offsets = _lattice(job, dims)
            groups = col.members(job, dims) + job.first_gpu
            end = job.first_gpu + job.gpus
            for unit in (1, 2, 3, 4, 7, 8, 16, 24, 64, 100, 1000):
                units = groups // unit
                walked = np.bincount(units[col._leaves(units)], minlength=int(units.max()) + 1)
                counted = col._ring_edges_leaving(bases, offsets, end, unit)
                assert counted.dtype.kind == "i" and np.array_equal(counted, walked), (job, dims, unit)
                gaps = np.diff(offsets)
                branches.add("apart" if gaps.min() >= unit else "closer" if gaps.max() < unit else "walk")
    assert branches == {"apart", "closer", "walk"}


def test_the_largest_place_of_a_lattice_in_a_unit_is_the_points_own() -> None:
    """max_residue's closed forms (the far corner, an axis that goes through every multiple of its gcd with
    the unit) give the largest (point mod unit) over every point of the lattice, or None; and the outermost
    tier of a lattice of groups is the one the points themselves give."""
    import random

    from clustertop.engine.config.geometry import Geometry, lattice_points, max_residue

    rng = random.Random(26)
    closed = 0
    for _ in range(3000):
        axes = [(rng.choice([1, 2, 3, 5, 8, 12, 16, 64, 128]),
                 rng.choice([1, 2, 3, 7, 8, 16, 24, 100, 128, 1000])) for _ in range(rng.randint(0, 3))]
        first = rng.choice([0, 5, 8, 40, 3071, rng.randrange(100_000)])
        per = rng.choice([1, 3, 8, 16, 24, 100, 3072, 16384])
        got = max_residue(first, axes, per)
        if got is not None:
            closed += 1
            assert got == int((lattice_points(first, axes) % per).max()), (first, axes, per)
    assert closed > 2500                      # the closed forms cover most lattices
    for gpus in (1000, 16384, 20000):
        for per_building in (1, 3):
            topo = Geometry.of(_cluster(gpus=gpus - gpus % 8, pods_per_building=per_building))
            for _ in range(200):
                axes = [(rng.choice([1, 2, 4, 16, 128]), rng.choice([1, 8, 16, 128, 2048])) for _ in range(2)]
                first, spread = rng.randrange(gpus // 2), rng.choice([0, 3, 7, 8, 120, 3000, 16383])
                low = lattice_points(first, axes)
                want = int(topo.tier_between(low, low + spread).max())
                assert topo.outermost_of_lattice(first, axes, spread) == want


def test_a_rings_busiest_block_is_the_one_its_rounded_demands_give() -> None:
    """The distinct demands of a ring's blocks, counted from its whole edges, are the rounded ones: each
    tier's slowdown is the busiest distinct demand's ECMP load, as from np.unique(np.round(demand, 3))."""
    import numpy as np
    from clustertop.engine.config.geometry import Geometry

    checked = 0
    for cluster in (_cluster(), _cluster(ecmp_flows=1), _cluster(pod_oversubscription=3.0)):
        topo = Geometry.of(cluster)
        for job in (_job(), _job(tp=4, pp=8, dp=512), _job(first_gpu=40, gpus=8000, tp=8, pp=4, dp=250)):
            for dims in (("dp",), ("pp",), ("tp",)):
                r = col.route(cluster, job, dims)
                for t, demand in r.demand.items():
                    block = topo.block_sizes()[t]
                    paths = max(1.0, np.floor(block / cluster.oversubscription()[t]))
                    want = max(col.ecmp_max_load(x, int(paths), cluster.ecmp_flows) if x > 0 else 0.0
                               for x in np.unique(np.round(demand, 3)).tolist())
                    if cluster.gpus % block == 0:       # (a partial last block has fewer paths)
                        assert r.tier_slowdown[t] == max(1.0, want), (job, dims, t)
                        checked += 1
    assert checked >= 9


@pytest.mark.parametrize(("args", "bits"), [((16.0, 16, 16), "0x1.76ed307686be4p+0"),
                                            ((16.0, 16, 1), "0x1.880721469958ep+1"),
                                            ((3.5, 47, 16), "0x1.0ad12af7198d2p-2"),
                                            ((64.0, 384, 2), "0x1.7f4f122a16ecap+0"),
                                            ((1.0, 8, 1024), "0x1.2e251591bce97p-3")])
def test_ecmp_loads_keep_their_last_bit(args: tuple[float, int, int], bits: str) -> None:
    # the sum over k is the same additions in the same order as when it was written with min() (the bits of
    # 01fa08c): estimates, sweeps and recordings print these loads' consequences to many digits
    assert col.ecmp_max_load.__wrapped__(*args).hex() == bits


def test_distinct_values_and_pairs_are_np_uniques() -> None:
    import numpy as np

    rng = np.random.default_rng(26)
    for n in (1, 2, 7, 100, 1000):
        a = np.round(rng.integers(0, 5, n) * 1.5 + rng.choice([0.0, 0.0004, 0.25], n), 3)
        b = np.floor(rng.integers(1, 4, n) * 16.0 / 3.0)
        assert np.array_equal(col._sorted_distinct(a), np.unique(a))
        assert col._distinct_pairs(a, b) == [(c.real, c.imag) for c in np.unique(a + 1j * b).tolist()]


def test_a_fast_estimate_does_not_import_numpy_ma() -> None:
    # np.unique asks numpy.ma whether its array is masked: importing numpy.ma costs every sweep worker and
    # every `clustertop estimate` ~20 ms, so routes find their distinct values without it
    import subprocess
    import sys

    code = ("import sys\nfrom clustertop.engine.config import scenario\n"
            "from clustertop.engine.model.estimate import estimate\n"
            "estimate(scenario.load('llama3-405b-16k'), plan=False, hints=False)\n"
            "assert 'numpy.ma' not in sys.modules, 'numpy.ma imported'\n")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
