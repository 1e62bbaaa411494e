"""Other accelerators and their scale-up domains: the catalog, cluster.scale_up, and collectives inside a mesh
or a torus (engine/model/scaleup.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clustertop.cli import main
from clustertop.engine.config import catalog
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.fields import Context
from clustertop.engine.config.phases import PHASE_LABELS
from clustertop.engine.config.scenario import Scenario, parse
from clustertop.engine.model import collectives as col

NEW = ("mi300x", "mi325x", "mi355x", "tpu-v5p", "tpu-v6e", "tpu-v7", "trn2", "gaudi3", "gb300")

# shared/reference/hardware.toml's figures for each new entry (dense BF16 TFLOP/s, HBM GB, HBM TB/s, TDP W
# where it gives one): the catalog must carry them as published
REFERENCE = {"mi300x": (1307.4, 192, 5.3, 750), "mi325x": (1307.4, 256, 6.0, 1000),
             "mi355x": (2500, 288, 8.0, 1400), "tpu-v5p": (459, 95, 2.765, None),
             "tpu-v6e": (918, 32, 1.64, None), "tpu-v7": (None, 192, 7.37, None),
             "trn2": (667, 96, 2.9, None), "gaudi3": (1835, 128, 3.7, 900), "gb300": (2500, 288, 8.0, 1400)}


def scenario(cluster: dict[str, Any], job: dict[str, Any] | None = None) -> Scenario:
    jobs = [job] if job else [{"model": "llama3.1-8b", "seq_len": 4096, "global_batch": cluster["gpus"],
                               "tp": 1}]
    return parse({"name": "t", "cluster": cluster, "jobs": jobs}, Context("t.toml"))


def test_catalog_has_every_accelerator_with_hardware_toml_figures_and_a_source() -> None:
    gpus, fabrics = catalog.gpus(), catalog.fabrics()
    for name in NEW:
        gpu = gpus[name]
        bf16, hbm, bw, tdp = REFERENCE[name]
        assert (gpu.hbm_gb, gpu.hbm_tb_s) == (hbm, bw)
        assert bf16 is None or gpu.bf16_tflops == bf16
        assert tdp is None or gpu.tdp_w == tdp
        assert "hardware.toml" in gpu.source
        link = fabrics[gpu.scale_up_link]
        assert link.kind in catalog.SCALE_UP_KINDS and link.source
        assert gpu.idle_w < gpu.memory_bound_w < gpu.tdp_w
    assert gpus["tpu-v7"].fp8_tflops == 4614 and gpus["tpu-v7"].bf16_tflops == 4614 / 2


# One flagship-style job per class: (accelerators, cluster keys, job)
L405 = {"model": "llama3.1-405b", "seq_len": 8192, "recompute": "selective", "virtual_stages": "auto"}
L70 = {"model": "llama3.1-70b", "seq_len": 8192, "recompute": "selective", "virtual_stages": "auto"}
FLAGSHIPS = {
    "mi300x": ({"gpus": 1024, "scale_out": "roce-400g"}, {**L405, "global_batch": 256, "tp": 8, "pp": 8}),
    "mi325x": ({"gpus": 1024, "scale_out": "roce-400g"}, {**L405, "global_batch": 256, "tp": 8, "pp": 8}),
    "mi355x": ({"gpus": 1024, "scale_out": "roce-800g"}, {**L405, "global_batch": 256, "tp": 8, "pp": 8}),
    "gb300": ({"gpus": 1152, "scale_out": "ib-ndr-400g"}, {**L405, "global_batch": 288, "tp": 8, "pp": 9}),
    "tpu-v5p": ({"gpus": 6144, "scale_out": "dcn-200g"}, {**L405, "global_batch": 1536, "tp": 16, "pp": 8}),
    "tpu-v7": ({"gpus": 9216, "scale_out": "dcn-200g"}, {**L405, "global_batch": 2304, "tp": 16, "pp": 8}),
    "tpu-v6e": ({"gpus": 256, "scale_out": "dcn-200g"}, {**L70, "global_batch": 256, "tp": 16, "pp": 4}),
    "trn2": ({"gpus": 1024, "scale_out": "efa-v3-200g"}, {**L70, "global_batch": 512, "tp": 8, "pp": 4}),
    "gaudi3": ({"gpus": 1024, "scale_out": "gaudi3-roce-600g"},
               {**L70, "global_batch": 512, "tp": 8, "pp": 4}),
}


@pytest.mark.parametrize("name", NEW)
def test_each_accelerator_runs_a_flagship_style_job_in_its_scale_up_domain(
        name: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, job = FLAGSHIPS[name]
    gpu = catalog.gpus()[name]
    path = tmp_path / f"{name}.toml"
    lines = [f'name = "{name}-flagship"', "[cluster]", f'gpu = "{name}"'] + \
        [f"{k} = {json.dumps(v)}" for k, v in cluster.items()] + ["[[jobs]]"] + \
        [f"{k} = {json.dumps(v)}" for k, v in job.items()]
    path.write_text("\n".join(lines) + "\n")
    assert main(["estimate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    j = out["jobs"][0]
    assert j["fits"] and j["step_time_s"] > 0 and 0.05 < j["mfu"] < 0.7
    assert out["cluster"]["scale_up"]["kind"] == gpu.scale_up       # the domain as built, by default
    assert j["tiers"]["tp"] == "node" and j["breakdown_s"]["tp"] > 0     # TP inside it
    assert j["energy_j_per_token"] > 0 and j["usd_per_mtoken"] > 0
    assert main(["estimate", str(path)]) == 0
    text = capsys.readouterr().out
    scale_up = next(line for line in text.splitlines() if line.startswith("scale-up"))
    assert gpu.scale_up_link in scale_up and f"{PHASE_LABELS['tp']} " in text     # the TP wait
                                                                                  # in the breakdown


def test_scale_up_defaults_and_aliases() -> None:
    assert scenario({"gpu": "gb200", "gpus": 144}).cluster.gpus_per_node == 72            # NVL72 racks
    hgx = scenario({"gpu": "gb200", "gpus": 144, "scale_up": "nvswitch"}).cluster
    assert (hgx.scale_up, hgx.gpus_per_node) == ("nvswitch", 8)
    trn = scenario({"gpu": "trn2", "gpus": 64}).cluster
    assert (trn.scale_up, trn.gpus_per_node, trn.torus) == ("torus-2d", 16, (4, 4))
    pod = scenario({"gpu": "tpu-v5p", "gpus": 4096}).cluster
    assert pod.gpus_per_node == 4096 and pod.torus == (16, 16, 16)
    old = scenario({"gpu": "h100-sxm-80gb", "gpus": 8, "node_fabric": "pcie"}).cluster
    assert old.scale_up == "pcie" and old.node_link.kind == "pcie"
    assert scenario({"gpu": "mi300x", "gpus": 8, "scale_up": "pcie"}).cluster.node_link.kind == "pcie"


@pytest.mark.parametrize(("cluster", "key", "words"), [
    ({"gpu": "h100-sxm-80gb", "gpus": 8, "scale_up": "xgmi-mesh"}, "cluster.scale_up",
     '"nvswitch" or "pcie"'),
    ({"gpu": "h100-sxm-80gb", "gpus": 72, "scale_up": "nvl72"}, "cluster.scale_up", "nvlink4"),
    ({"gpu": "mi300x", "gpus": 16, "gpus_per_node": 16}, "cluster.gpus_per_node", "at most 8"),
    ({"gpu": "h100-sxm-80gb", "gpus": 16, "scale_up": "nvswitch", "node_fabric": "pcie"},
     "cluster.node_fabric", "older name"),
    ({"gpu": "tpu-v5p", "gpus": 64, "gpus_per_node": 64, "torus": [4, 4, 3]}, "cluster.torus", "to be equal"),
    ({"gpu": "tpu-v5p", "gpus": 64, "torus": [8, 8]}, "cluster.torus", "3 positive integers"),
    ({"gpu": "h100-sxm-80gb", "gpus": 8, "torus": [2, 4]}, "cluster.torus", "torus-2d"),
    ({"gpu": "h100-sxm-80gb", "gpus": 8, "optics": "laser"}, "cluster.optics", '"cpo"'),
])
def test_bad_scale_up_keys_are_one_line_errors(cluster: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(UserError) as err:
        scenario(cluster)
    assert key in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def _tp(cluster: dict[str, Any], tp: int, gpus: int = 64) -> tuple[Scenario, col.Route]:
    s = scenario({**cluster, "gpus": gpus}, {"model": "llama3.1-8b", "seq_len": 4096, "global_batch": gpus,
                                             "tp": tp})
    return s, col.route(s.cluster, s.jobs[0], ("tp",))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_mesh_gives_a_group_only_the_links_to_its_members(tp: int) -> None:
    S = 512e6
    mi, r = _tp({"gpu": "mi300x"}, tp)
    h100, r_h = _tp({"gpu": "h100-sxm-80gb"}, tp)
    link = mi.cluster.scale_up_link
    moved = (tp - 1) / tp * S
    # direct reduce-scatter over the tp - 1 links to the group's members (7 in all: 52.6 GB/s of busbw each)
    assert col.reduce_scatter(mi.cluster, r, S).time_s == pytest.approx(
        moved / (link.busbw_gb_s / 7 * (tp - 1) * 1e9) + link.latency_us * 1e-6)
    # NVSwitch gives any group the whole busbw, over a ring of tp - 1 steps
    nv = h100.cluster.scale_up_link
    assert col.reduce_scatter(h100.cluster, r_h, S).time_s == pytest.approx(
        moved / (nv.busbw_gb_s * 1e9) + (tp - 1) * nv.latency_us * 1e-6)
    # a point-to-point transfer has one link on the mesh
    assert col.p2p(mi.cluster, r, S).time_s == pytest.approx(S / (link.busbw_gb_s / 7 * 1e9) + 8e-6)
    assert col.all_to_all(mi.cluster, r, S).time_s == pytest.approx(
        (tp - 1) / tp * S / (link.busbw_gb_s / 7 * (tp - 1) * 1e9) + link.latency_us * 1e-6)


def test_a_torus_ring_uses_both_directions_only_when_the_group_spans_it() -> None:
    S = 512e6
    full, r_full = _tp({"gpu": "tpu-v5p", "torus": [16, 4, 4]}, 16, 256)
    half, r_half = _tp({"gpu": "tpu-v5p", "torus": [32, 4, 2]}, 16, 256)
    assert (r_full.shape, r_half.shape) == ((16, 1, 1), (16, 1, 1))
    per_link = full.cluster.scale_up_link.link_busbw_gb_s * 1e9
    alpha = full.cluster.scale_up_link.latency_us * 1e-6
    assert col.reduce_scatter(full.cluster, r_full, S).time_s == pytest.approx(15 / 16 * S / (2 * per_link)
                                                                               + 15 * alpha)
    assert col.reduce_scatter(half.cluster, r_half, S).time_s == pytest.approx(15 / 16 * S / per_link
                                                                               + 15 * alpha)
    # a group over two whole dimensions (16 x 4) reduces along both at once: 4 links
    dp = scenario({"gpu": "tpu-v5p", "gpus": 256, "torus": [16, 4, 4]},
                  {"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 64, "tp": 4, "dp": 64})
    route = col.route(dp.cluster, dp.jobs[0], ("dp",))
    assert route.shape == (4, 4, 4)            # x: 4 of 16 (a segment), y and z whole rings
    assert col.reduce_scatter(dp.cluster, route, S).time_s == pytest.approx(
        63 / 64 * S / ((1 + 2 + 2) * per_link) + (3 + 3 + 3) * alpha)


def test_torus_distance_shares_the_links_of_a_transfer() -> None:
    s = scenario({"gpu": "tpu-v5p", "gpus": 256, "torus": [16, 4, 4]},
                 {"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 64, "tp": 4, "pp": 4})
    route = col.route(s.cluster, s.jobs[0], ("pp",))
    assert route.hops == (4, 0, 0)             # stages 4 chips apart along x
    link = s.cluster.scale_up_link
    S = 64e6
    t = col.p2p(s.cluster, route, S).time_s
    # every chip sends 4 hops in lockstep: each link carries 4 transfers; 3 extra hops of latency
    assert t == pytest.approx(4 * S / (link.link_busbw_gb_s * 1e9) + link.latency_us * 1e-6
                              + 3 * link.hop_latency_us * 1e-6)


def test_campus_steps_wait_for_the_fibre() -> None:
    base = {"gpu": "h100-sxm-80gb", "gpus": 256, "gpus_per_rack": 16, "racks_per_pod": 4,
            "pods_per_building": 2}
    job = {"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 256, "tp": 8}
    near, far = scenario(base, job), scenario({**base, "building_distance_km": 10.0}, job)
    r = col.route(near.cluster, near.jobs[0], ("dp",))
    assert r.tier == "campus"
    assert col.net_latency(far.cluster, "campus") - col.net_latency(near.cluster, "campus") == \
        pytest.approx(49e-6)
    assert col.net_latency(far.cluster, "core") == col.net_latency(near.cluster, "core")
    steps = 2 * 5             # a tree all-reduce over 32 nodes: 2 log2(32) steps
    assert col.allreduce(far.cluster, r, 1e3).time_s - col.allreduce(near.cluster, r, 1e3).time_s == \
        pytest.approx(steps * 49e-6)
