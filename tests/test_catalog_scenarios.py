"""Each built-in scenario of the catalog shows the property it exists to show (issue 7)."""

from __future__ import annotations

from functools import lru_cache

import pytest

from engine import scenario
from engine.estimate import JobEstimate, estimate_job


@lru_cache(maxsize=None)
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
