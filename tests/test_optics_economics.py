"""Optics (transceivers from the topology, their power by speed and kind) and economics (joules and dollars
per token, [economics] overrides, record's energy, the header's figures, sweep --rank)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.config.fields import Context
from clustertop.engine.config.optics import site_optics, transceiver_w
from clustertop.engine.config.scenario import Scenario, parse
from clustertop.engine.model.estimate import estimate_job
from clustertop.engine.model.power import PowerModel
from clustertop.engine.stream import reader


def parsed(cluster: dict[str, Any], economics: dict[str, Any] | None = None) -> Scenario:
    data: dict[str, Any] = {"name": "t", "cluster": cluster,
                            "jobs": [{"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 16,
                                      "gpus": 16}]}
    if economics:
        data["economics"] = economics
    return parse(data, Context("t.toml"))


def test_transceiver_power_by_speed_and_kind() -> None:
    assert transceiver_w(400) == 9.0 and transceiver_w(800) == 15.0 and transceiver_w(1600) == 25.0
    assert transceiver_w(200) == pytest.approx(4.5)              # below 400G: 400G's energy per bit
    assert 9.0 < transceiver_w(600) < 15.0
    assert transceiver_w(800, "lpo") == pytest.approx(7.5)       # about half
    assert transceiver_w(800, "cpo") == pytest.approx(15.0 * 5.5 / 15, rel=1e-3)   # ~5.5 pJ/bit against ~15


def test_transceivers_per_tier_follow_the_topology() -> None:
    # 4 buildings x 2 pods x 4 racks of 16 GPUs (one 800G NIC each): racks 1:2, pods 1:4, buildings 1:8
    c = parsed({"gpu": "h100-sxm-80gb", "gpus": 512, "gpus_per_rack": 16, "racks_per_pod": 4,
                "pods_per_building": 2, "rack_oversubscription": 2.0, "pod_oversubscription": 4.0,
                "building_oversubscription": 8.0, "scale_out": "roce-800g"}).cluster
    optics = site_optics(c)
    links = {"spine": 32 * 16 // 2, "core": 8 * 64 // 4, "campus": 4 * 128 // 8}
    assert optics.by_tier() == {tier: 2 * n for tier, n in links.items()}
    assert optics.watts == pytest.approx(2 * sum(links.values()) * 15.0)
    cpo = site_optics(dataclasses.replace(c, optics="cpo"))
    assert cpo.count == optics.count and cpo.watts == pytest.approx(optics.watts * 5.5 / 15, rel=1e-3)
    # one rack: no optical link at all (the NICs reach their leaf on copper)
    assert site_optics(parsed({"gpu": "h100-sxm-80gb", "gpus": 16}).cluster).count == 0


def test_a_3d_torus_of_cubes_has_optical_links_between_them() -> None:
    # 16 x 16 x 16 of 4 x 4 x 4 cubes: along each dimension, 256 rings of 4 cube boundaries
    c = parsed({"gpu": "tpu-v5p", "gpus": 4096, "torus": [16, 16, 16]}).cluster
    assert site_optics(c).by_tier() == {"node": 2 * 3 * 256 * 4}
    assert site_optics(c).watts == pytest.approx(2 * 3 * 1024 * transceiver_w(400))   # 50 GB/s links: 400G
    assert site_optics(parsed({"gpu": "tpu-v6e", "gpus": 256}).cluster).count == 0     # 2D: electrical


def test_optics_are_in_the_site_power_and_in_sizing_from_a_budget() -> None:
    c = parsed({"gpu": "h100-sxm-80gb", "gpus": "auto", "site_power_budget_mw": 50.0,
                "pod_oversubscription": 1.0, "gpus_per_rack": 16, "racks_per_pod": 64}).cluster
    power = PowerModel.of(c)
    assert power.optics_w == site_optics(c).watts > 0
    full = power.site_mw(c.gpus * c.gpu.tdp_w, c.gpus)
    rack = 16 * (700 + 575) * 1.1 * 1.2 / 1e6                 # what one more rack of 16 would draw
    assert 50.0 - 2 * rack < full <= 50.0


def _flagship() -> Any:
    s = scenario.load("llama3-405b-16k")
    return s, estimate_job(s, s.jobs[0], plan=False, hints=False)


def test_flagship_energy_per_token_within_20_percent_of_gpu_power_and_the_published_step() -> None:
    s, e = _flagship()
    # Llama 3 Table 4: 400 TFLOP/s per GPU on 16,384 H100 at 700 W; the step that gives, and its tokens
    tokens = s.jobs[0].global_batch * s.jobs[0].seq_len
    flops_per_token = e.model_tflops_per_gpu * 1e12 * e.step_time_s * e.gpus / tokens
    published_step = flops_per_token * tokens / (400e12 * 16384)
    gpu_j = 700.0 * 16384 * published_step / tokens
    # the facility's share: servers (575 W per GPU), storage and switches (+10%), the optics, PUE 1.2
    optics_w = site_optics(s.cluster).watts
    facility_j = ((700.0 + 575.0) * 16384 * 1.1 + optics_w) * 1.2 * published_step / tokens
    assert gpu_j < facility_j
    assert e.economics["energy_j_per_token"] == pytest.approx(facility_j, rel=0.20)
    assert e.economics["energy_j_per_step"] == pytest.approx(e.economics["energy_j_per_token"] * tokens,
                                                             rel=1e-6)
    assert e.economics["tokens_per_s_per_mw"] == pytest.approx(1e6 / e.economics["energy_j_per_token"],
                                                               rel=1e-6)


def test_dollars_per_million_tokens_owned_and_rented() -> None:
    s, e = _flagship()
    x = e.economics
    capex = 16384 * 30000 / (5 * 8760)                            # $ per hour, the defaults
    electricity = x["power_mw"] * 85
    assert x["usd_per_hour"] == pytest.approx(capex + electricity, rel=1e-6)
    assert x["usd_per_mtoken"] == pytest.approx((capex + electricity) / (e.tokens_per_s * 3600) * 1e6,
                                                rel=1e-5)
    assert x["run_54d_mwh"] == pytest.approx(x["power_mw"] * 54 * 24, rel=1e-4)
    rented = dataclasses.replace(s, economics=dataclasses.replace(s.economics,
                                                                  cloud_usd_per_accelerator_hour=2.5))
    r = estimate_job(rented, rented.jobs[0], plan=False, hints=False).economics
    assert r["usd_per_hour"] == pytest.approx(16384 * 2.5)
    assert r["run_54d_usd"] == pytest.approx(16384 * 2.5 * 54 * 24, rel=1e-6)


def test_economics_table_overrides_the_defaults_and_is_checked(scenario_file: Any) -> None:
    s = parsed({"gpu": "h100-sxm-80gb", "gpus": 16},
               {"electricity_usd_per_mwh": 50.0, "depreciation_years": 4})
    assert (s.economics.electricity_usd_per_mwh, s.economics.depreciation_years) == (50.0, 4.0)
    assert s.economics.capex_usd_per_accelerator == 30000.0
    path = scenario_file('name = "e"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n[[jobs]]\n'
                         'model = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 8\n[economics]\n'
                         "electricity_usd_per_mwh = -5.0\n")
    assert main(["estimate", path]) == 2


def test_record_header_carries_the_scale_up_optics_and_each_jobs_figures(tmp_path: Path,
                                                                          scenario_file: Any) -> None:
    path = scenario_file()
    out = tmp_path / "r.jsonl"
    assert main(["record", path, "-o", str(out), "--duration", "20s"]) == 0
    header = next(reader.iter_events(str(out)))
    assert (header["scale_up"]["kind"] == "nvswitch"
            and header["scenario"]["cluster"]["node_fabric"] == "nvswitch")
    assert header["optics"]["transceivers"] > 0 and header["power"]["optics_w"] > 0
    figures = header["jobs"][0]["economics"]
    assert figures["energy_j_per_token"] > 0 and figures["usd_per_mtoken"] > 0
    assert figures["tokens_per_s_per_mw"] == pytest.approx(1e6 / figures["energy_j_per_token"], rel=1e-5)
    assert header["scenario"]["economics"]["capex_usd_per_accelerator"] == 30000.0


def test_sweep_ranks_by_dollars_per_million_tokens(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["sweep", "nvswitch-8gpu", "--vary", "economics.capex_usd_per_accelerator=20000,40000",
            "--vary", "jobs[0].micro_batch=1,2", "-o", str(out), "--workers", "1"]
    assert main([*args, "--rank", "usd_per_mtoken"]) == 0
    text = capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]

    def usd(r: dict[str, Any]) -> float:
        j = r["jobs"][0]
        return j["usd_per_hour"] / (j["tokens_per_s"] * 3600) * 1e6

    assert "best 4 by $ per million tokens:" in text
    rows = text.splitlines()[text.splitlines().index("best 4 by $ per million tokens:") + 2:]
    ranked = sorted(records, key=usd)
    assert [row.split()[1:3] for row in rows[:4]] == \
        [[str(r["point"]["economics.capex_usd_per_accelerator"]), str(r["point"]["jobs[0].micro_batch"])]
         for r in ranked]
    assert ranked[0]["point"]["economics.capex_usd_per_accelerator"] == 20000     # cheaper GPUs first...
    assert main(args) == 0                                                        # ...not by default:
    assert "best 4 by step time:" in capsys.readouterr().out
    assert orjson.loads(out.read_bytes().splitlines()[0])["jobs"][0]["usd_per_mtoken"] == pytest.approx(
        usd(records[0]), rel=1e-4)


def test_rank_choices_are_the_rankings() -> None:
    from clustertop.cli import build_parser
    from clustertop.engine.sweep.results import RANKS

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]   # type: ignore[union-attr]
    rank = next(a for a in sweep._actions if a.dest == "rank")
    assert tuple(rank.choices) == tuple(RANKS)
