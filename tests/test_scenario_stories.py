"""Each built-in scenario exists to show one thing; these tests check that it shows it.

(The model-side stories, DeepSeek-V3, Llama 4 Behemoth, the scaling series, inference and the congested
fabric, are checked in tests/test_catalog_scenarios.py.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.model.estimate import estimate, estimate_job
from clustertop.engine.stream.reader import iter_events
from clustertop.engine.stream.schema import rle_decode


def _job(name: str, index: int = 0):  # type: ignore[no-untyped-def]
    s = scenario.load(name)
    return s, estimate_job(s, s.jobs[index])


def _mean_util(path: Path) -> float:
    """Mean GPU utilization over every sample of a recording (percent)."""
    means = [rle_decode(e["util"]).mean() for e in iter_events(str(path))
             if e["type"] == "sample" and e["t"] > 0]
    return float(np.mean(means))


def test_single_gpu_405b_does_not_fit() -> None:
    _, e = _job("single-gpu-405b")
    assert not e.fits and e.step_time_s is None
    assert 800 < e.memory_gb["weights"] < 830          # 405B parameters x 2 bytes of BF16
    assert e.memory_gb_per_gpu > 10 * e.capacity_gb     # more than ten times an H100's 80 GB


def test_pcie_node_keeps_gpus_less_than_half_as_busy(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    util = {}
    for name in ("pcie-8gpu", "nvswitch-8gpu"):
        out = tmp_path / f"{name}.jsonl"
        assert main(["record", name, "--duration", "120s", "--sample", "2s", "-o", str(out)]) == 0
        util[name] = _mean_util(out)
    capsys.readouterr()
    assert util["nvswitch-8gpu"] > 30
    assert util["pcie-8gpu"] < 0.5 * util["nvswitch-8gpu"]
    pcie, nvs = _job("pcie-8gpu")[1], _job("nvswitch-8gpu")[1]
    assert pcie.breakdown_s["tp"] > 4 * nvs.breakdown_s["tp"]      # the detour through the host CPU


def test_llama3_rows_in_published_order() -> None:
    tflops = [_job(n)[1].model_tflops_per_gpu
              for n in ("llama3-405b-8k", "llama3-405b-16k", "llama3-405b-16k-128k")]
    assert tflops[0] > tflops[1] > tflops[2]


def test_meta_24k_roce_and_ib_run_the_same_job_about_equally() -> None:
    roce, ib = _job("meta-24k-roce")[1], _job("meta-24k-ib")[1]
    assert roce.fits and ib.fits and roce.gpus == ib.gpus == 24576
    assert ib.step_time_s <= roce.step_time_s                      # IB's higher busbw is never slower...
    assert roce.step_time_s / ib.step_time_s < 1.05                # ...but RoCE tuned as Meta's is close


def test_meta_129k_jobs_share_the_buildings() -> None:
    s = scenario.load("meta-129k-h100")
    est = estimate(s)
    assert est.cluster["buildings"] == 5 and s.cluster.gpus == 129024
    assert len(s.jobs) >= 3 and all(j.fits for j in est.jobs)
    campus = [j for j in est.jobs if j.tiers.get("dp") == "campus"]
    assert len(campus) >= 2, "at least two jobs reduce gradients across buildings"


def test_prometheus_is_sized_from_its_gigawatt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = scenario.load("prometheus-1gw")
    est = estimate(s)
    assert 400_000 <= s.cluster.gpus <= 600_000
    assert 0.95 * 1000 <= est.cluster["facility_power_mw"] <= 1000
    assert est.cluster["buildings"] >= 2
    kinds = {j.kind for j in s.jobs}
    assert kinds == {"training", "inference"} and len(s.jobs) >= 4
    out = tmp_path / "p.jsonl.gz"
    assert main(["record", "prometheus-1gw", "--duration", "30s", "--sample", "10s", "--json",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    header = next(iter_events(str(out)))
    assert header["scenario"]["cluster"]["site_power_budget_mw"] == 1000.0
    site = [e["site_mw"] for e in iter_events(str(out)) if e["type"] == "sample"]
    assert all(100 < mw <= 1000 for mw in site)


def test_hyperion_is_about_two_million_gpus() -> None:
    s = scenario.load("hyperion-5gw")
    assert 1_800_000 <= s.cluster.gpus <= 2_500_000
    est = estimate(s)
    assert 0.95 * 5000 <= est.cluster["facility_power_mw"] <= 5000
    assert est.cluster["buildings"] >= 10
