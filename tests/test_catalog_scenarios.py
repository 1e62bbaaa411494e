"""Each built-in scenario of the catalog shows the property it exists to show."""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from clustertop.engine.config import scenario
from clustertop.engine.model.estimate import JobEstimate, estimate_job


@cache
def _est(name: str) -> JobEstimate:
    scen = scenario.load(name)
    return estimate_job(scen, scen.jobs[0], plan=False, hints=False)


def test_deepseek_v3_within_20_percent_of_180k_gpu_hours_per_trillion_tokens() -> None:
    e = _est("deepseek-v3-2048")
    job = e.job
    assert (e.gpus, job.tp, job.ep, job.pp) == (2048, 1, 64, 16)
    assert e.fits
    assert e.tokens_per_s is not None
    gpu_hours = 1e12 / e.tokens_per_s * e.gpus / 3600
    assert gpu_hours == pytest.approx(180e3, rel=0.20)


def test_deepseek_v3_dualpipe_hides_expert_all_to_all() -> None:
    e = _est("deepseek-v3-2048")
    b = e.breakdown_s
    assert b.get("ep", 0.0) < 0.5 * b["compute"]


def test_llama4_behemoth_within_15_percent_of_390_tflops() -> None:
    e = _est("llama4-behemoth-32k")
    assert e.gpus == 32768 and e.job.precision == "fp8" and e.job.ep > 1
    assert e.model_tflops_per_gpu == pytest.approx(390, rel=0.15)


SCALING = (8, 64, 512, 4096, 16384)


def test_scaling_efficiency_falls_as_the_cluster_grows_and_the_breakdown_shows_why() -> None:
    ests = [_est(f"scaling-{n}") for n in SCALING]
    per_gpu = [e.tokens_per_s / e.gpus for e in ests]  # type: ignore[operator]
    assert [e.gpus for e in ests] == list(SCALING)
    assert len({e.job.global_batch * e.job.seq_len / e.gpus for e in ests}) == 1   # the same tokens per GPU
    eff = [t / per_gpu[0] for t in per_gpu]
    assert all(b < a for a, b in itertools.pairwise(eff))
    assert eff[-1] < 0.93
    waits = [e.breakdown_s["stragglers"] for e in ests]
    assert all(b > a for a, b in itertools.pairwise(waits))                    # waiting for the slowest GPU
    dp = [e.breakdown_s.get("dp", 0.0) for e in ests]
    assert dp[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(dp[1:]))  # gradients leave the node,
                                                                                # then the pod
    assert dp[1] > 0.05 * ests[1].step_time_s


def test_straggler_factor_is_the_expected_slowest_gpu() -> None:
    import numpy as np
    from clustertop.engine.model.estimate import straggler_factor

    rng = np.random.default_rng(3)
    for n in (8, 512, 4096):
        speeds = np.exp(rng.standard_normal((200, n)) * 0.01)
        speeds[rng.random((200, n)) < 0.001] *= 0.9
        mc = float(np.mean(1.0 / speeds.min(axis=1)))
        assert straggler_factor(0.01, 0.001, 0.9, n) == pytest.approx(mc, rel=0.01)
    assert straggler_factor(0.0, 0.0, 0.9, 10_000) == 1.0
    assert straggler_factor(0.005, 0.0, 0.9, 1) == 1.0


def test_congested_fabric_slows_the_whole_flagship_through_dp_and_pp() -> None:
    bad, good = _est("congested-fabric"), _est("llama3-405b-16k")
    assert bad.gpus == good.gpus
    assert bad.step_time_s > 1.04 * good.step_time_s  # type: ignore[operator]
    assert bad.breakdown_s["dp"] > 2 * good.breakdown_s["dp"]
    assert bad.breakdown_s["pp"] > 2 * good.breakdown_s["pp"]
    assert bad.breakdown_s["compute"] == good.breakdown_s["compute"]
