"""The scenarios of other accelerators, scale-up domains and sites tell their story: mi300x-vs-h100 (with its
twin h100-vs-mi300x), tpu-v5p-pod, gb200-nvl72, campus-10km."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import pytest
from clustertop.cli import main
from clustertop.commands.compare import twin
from clustertop.engine.config import scenario
from clustertop.engine.config.fields import Context
from clustertop.engine.config.tomlfile import read_toml
from clustertop.engine.model import collectives as col
from clustertop.engine.model.estimate import JobEstimate, estimate, estimate_job


def _estimate(s: scenario.Scenario) -> JobEstimate:
    return estimate_job(s, s.jobs[0], plan=False, hints=False)


@cache
def _builtin(name: str) -> JobEstimate:
    return _estimate(scenario.load(name))


def _variant(name: str, cluster: dict[str, Any] | None = None,
             job: dict[str, Any] | None = None) -> scenario.Scenario:
    """A built-in scenario with some of its raw keys changed."""
    path = scenario.resolve_path(name)
    data, _ = read_toml(path)
    data["cluster"].update(cluster or {})
    data["jobs"][0].update(job or {})
    return scenario.parse(data, Context(str(path)), str(path))


def test_mi300x_and_h100_run_the_same_job_and_the_mesh_slows_tp_4() -> None:
    mi, h = scenario.load("mi300x-vs-h100"), scenario.load("h100-vs-mi300x")
    a, b = mi.jobs[0], h.jobs[0]
    assert dataclasses.replace(a, model=b.model) == b and a.model == b.model     # the same job
    assert (mi.cluster.scale_up, h.cluster.scale_up) == ("xgmi-mesh", "nvswitch")
    e_mi, e_h = _builtin("mi300x-vs-h100"), _builtin("h100-vs-mi300x")
    assert e_mi.fits and e_h.fits
    # a TP group of 4 reaches its peers over 3 of its 7 Infinity Fabric links, where NVSwitch gives it all:
    # 7/3 of the time for the same bytes (the busbw of both nodes is ~370 GB/s)
    ratio = e_mi.breakdown_s["tp"] / e_h.breakdown_s["tp"]
    assert 2.0 < ratio < 2.6
    assert e_mi.breakdown_s["compute"] == pytest.approx(e_h.breakdown_s["compute"], rel=0.05)
    assert e_mi.step_time_s > 1.08 * e_h.step_time_s                    # type: ignore[operator]
    # with TP 8 the group has every link of the mesh: the fabrics are even
    tp8 = {"tp": 8, "pp": 2, "dp": 32}
    mi8, h8 = _estimate(_variant("mi300x-vs-h100", job=tp8)), _estimate(_variant("h100-vs-mi300x", job=tp8))
    assert mi8.breakdown_s["tp"] / h8.breakdown_s["tp"] == pytest.approx(1.0, abs=0.15)
    # the mesh costs the pipeline too: a stage boundary inside a node is one link
    assert e_mi.breakdown_s["pp"] > e_h.breakdown_s["pp"]


def test_mi300x_vs_h100_opens_its_twin_in_the_compare_view(tmp_path: Any) -> None:
    assert twin("mi300x-vs-h100") == "h100-vs-mi300x" and twin("h100-vs-mi300x") == "mi300x-vs-h100"
    assert main(["compare", "llama3-405b-16k"]) == 2                   # no twin: one line, exit 2
    mine = tmp_path / "a.toml"
    mine.write_text('name = "a"\ncompare_with = "b.toml"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n'
                    '[[jobs]]\nmodel = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 8\n')
    assert twin(str(mine)) == str(tmp_path / "b.toml")                # a path, beside the scenario


def test_tpu_v5p_pod_keeps_every_dimension_on_ici_and_shape_and_distance_matter() -> None:
    s = scenario.load("tpu-v5p-pod")
    e = _builtin("tpu-v5p-pod")
    assert e.fits and s.cluster.scale_up == "torus-3d" and s.cluster.torus == (16, 20, 28)
    assert s.cluster.gpus_per_node == s.cluster.gpus == 8960
    assert set(e.tiers.values()) <= {"node", None}                     # no NIC, no switch
    est = estimate(s, plan=False, hints=False)
    assert est.cluster["transceivers_by_tier"] == {"node": 2 * 3 * 8960 // 4}   # ICI between 4x4x4 cubes only
    # neighbours are cheap: the pipeline's stages are one hop apart, TP 16 one whole x ring (both directions)
    job = s.jobs[0]
    assert col.route(s.cluster, job, ("pp",)).hops == (0, 1, 0)
    assert col.route(s.cluster, job, ("tp",)).shape == (16, 1, 1)
    # the same TP 16 on half of a 32-chip ring comes back along it: one direction, twice the time
    half = _estimate(_variant("tpu-v5p-pod", cluster={"torus": [32, 20, 14]}))
    assert half.breakdown_s["tp"] / e.breakdown_s["tp"] == pytest.approx(2.0, rel=0.05)
    # distance matters: with TP 8, stage neighbours are 8 hops apart on the x ring and share its links
    far = _variant("tpu-v5p-pod", job={"tp": 8, "pp": 8, "dp": 140, "global_batch": 2240})
    assert col.route(far.cluster, far.jobs[0], ("pp",)).hops == (8, 0, 0)
    assert _estimate(far).breakdown_s["pp"] > 5 * e.breakdown_s["pp"]


def test_gb200_nvl72_keeps_a_72_gpu_replica_on_nvlink() -> None:
    s = scenario.load("gb200-nvl72")
    e = _builtin("gb200-nvl72")
    job = s.jobs[0]
    assert job.tp * job.pp == s.cluster.gpus_per_node == 72 and s.cluster.scale_up == "nvl72"
    assert e.fits and e.tiers["tp"] == e.tiers["pp"] == "node" and e.tiers["dp"] == "spine"
    # the same GPUs as nodes of 8: every pipeline boundary crosses the NICs
    nodes8 = _estimate(_variant("gb200-nvl72", cluster={"scale_up": "nvswitch", "gpus_per_node": 8}))
    assert nodes8.tiers["pp"] in ("leaf", "spine")
    assert nodes8.breakdown_s["pp"] > 10 * e.breakdown_s["pp"]
    assert nodes8.breakdown_s["tp"] == pytest.approx(e.breakdown_s["tp"])      # TP 8 stays inside both
    assert e.step_time_s < nodes8.step_time_s                                   # type: ignore[operator]


def test_campus_10km_pays_49_us_per_step_that_crosses_the_buildings() -> None:
    s = scenario.load("campus-10km")
    e = _builtin("campus-10km")
    assert estimate(s, plan=False, hints=False).cluster["buildings"] == 2
    assert e.tiers["dp"] == "campus" and e.tiers["pp"] != "campus"
    near_s = _variant("campus-10km", cluster={"building_distance_km": 0.0})
    near = _estimate(near_s)
    far = _estimate(_variant("campus-10km", cluster={"building_distance_km": 1000.0}))
    assert (col.net_latency(s.cluster, "campus") - col.net_latency(near_s.cluster, "campus")
            == pytest.approx(49e-6))
    # light in 10 km of fibre: the gradient reduction waits a few ms more, the step not 1% more...
    assert 0.0 < e.breakdown_s["dp"] - near.breakdown_s["dp"] < 0.05
    assert 1.0 < e.step_time_s / near.step_time_s < 1.01                # type: ignore[operator]
    # ...while between regions (1,000 km) it is no longer hidden
    assert far.step_time_s / near.step_time_s > 1.05                     # type: ignore[operator]
