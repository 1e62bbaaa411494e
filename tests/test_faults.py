"""Fault processes: Llama 3 Table 5 rates per component, scaled by cluster size, reproducible per seed."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.model import checkpoint
from clustertop.engine.model.compute import total_params
from clustertop.engine.sim import faults, lifecycle

DAYS54 = 54 * 86400.0


def test_rates_reproduce_table5_in_expectation() -> None:
    assert sum(c.count for c in catalog.causes()) == 419
    assert abs(checkpoint.expected_count(16384, 8, DAYS54) - 419) < 1e-6


def test_rates_scale_with_cluster_size() -> None:
    assert abs(checkpoint.expected_count(32768, 8, DAYS54) - 2 * 419) < 1e-6
    assert abs(checkpoint.expected_count(1024, 8, DAYS54) - 419 / 16) < 1e-6


def test_counts_over_seeds_are_poisson_around_419() -> None:
    counts = [len(faults.schedule(0, 16384, 8, 0.0, DAYS54, seed)) for seed in range(40)]
    assert 419 - 20 < np.mean(counts) < 419 + 20
    # Poisson: variance close to the mean (a fixed schedule or a wrong process would fail this).
    assert 0.4 * 419 < np.var(counts) < 2.0 * 419
    lo, hi = 419 - 1.96 * 419**0.5, 419 + 1.96 * 419**0.5
    inside = sum(lo <= c <= hi for c in counts)
    assert inside >= 32          # ~95% of 40


def test_causes_follow_table5_proportions() -> None:
    total: collections.Counter[str] = collections.Counter()
    for seed in range(20):
        total.update(f.cause for f in faults.schedule(0, 16384, 8, 0.0, DAYS54, seed))
    n = sum(total.values())
    for cause in catalog.causes():
        expected = cause.count / 419
        sigma = (expected * (1 - expected) / n) ** 0.5
        assert abs(total[cause.name] / n - expected) < 4 * sigma + 1e-3, cause.name


def test_faults_name_concrete_components_inside_the_job() -> None:
    fs = faults.schedule(4096, 2048, 8, 100.0, DAYS54, seed=3)
    assert fs == sorted(fs, key=lambda f: (f.t, f.cause))
    for f in fs:
        assert 100.0 <= f.t < DAYS54
        assert 4096 <= f.gpu < 4096 + 2048
        if f.component == "node":
            assert f.index == f.gpu // 8
        else:
            assert f.index == f.gpu


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    a = faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=7)
    b = faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=7)
    c = faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=8)
    assert a == b and a != c


def test_planned_interruptions_about_47_in_54_days() -> None:
    counts = [len(faults.planned(0.0, DAYS54, 47 / 54, seed, "pretrain")) for seed in range(30)]
    assert 40 < np.mean(counts) < 54


def test_young_daly() -> None:
    # C = 5 s checkpoints, 466 interruptions in 54 days: about 5 minutes between checkpoints.
    t = checkpoint.young_daly_interval(5.0, 466 / DAYS54)
    assert 250 < t < 400
    assert checkpoint.young_daly_interval(5.0, 0.0) == float("inf")


def test_each_job_draws_its_own_faults() -> None:
    a = faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=7, stream="pretrain/")
    b = faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=7, stream="ablation/")
    assert a != b and a == faults.schedule(0, 16384, 8, 0.0, 7 * 86400.0, seed=7, stream="pretrain/")


def test_a_fault_at_a_gpu_names_its_component() -> None:
    gpu = faults.fault_at(5.0, 4915, "Faulty GPU", 8)
    assert (gpu.component, gpu.index, gpu.gpu, gpu.scope, gpu.injected) == ("gpu", 4915, 4915, "node", True)
    host = faults.fault_at(5.0, 4915, "Power supply", 8)
    assert (host.component, host.index, host.scope) == ("node", 614, "node")
    link = faults.fault_at(5.0, 4915, "Network switch/cable", 8)
    assert (link.component, link.index, link.scope) == ("link", 4915, "link")
    assert faults.fault_at(5.0, 3, "Software bug", 8).scope == "job"


def test_spares_come_back_from_repair() -> None:
    pool = lifecycle.SparePool(spares=2, repair_s=100.0)
    pool.fail(0.0)
    pool.fail(10.0)
    assert pool.ready_at(2, 20.0) == 20.0
    pool.take(2, 20.0)
    assert pool.ready_at(1, 30.0) == 100.0 and pool.ready_at(2, 30.0) == 110.0
    assert pool.ready_at(3, 30.0) == float("inf")
    assert pool.ready_at(1, 100.0) == 100.0
    pool.take(1, 100.0)
    with pytest.raises(ValueError):
        pool.take(1, 100.0)


def test_flagship_checkpoint_cost_and_interval() -> None:
    s = scenario.load("llama3-405b-16k")
    job = s.jobs[0]
    params = total_params(job.model)[0]
    assert 400e9 < params < 410e9
    plan = checkpoint.checkpoint_plan(s, job)
    # 14 bytes per parameter (BF16 weights, FP32 master weights and Adam moments)
    # at 2 TB/s (Tectonic sustained).
    assert plan.state_bytes == 14 * params and plan.write_s == pytest.approx(14 * params / 2e12)
    assert plan.mode == "sync" and plan.stall_s == plan.write_s
    rate = (419 + 47) / DAYS54
    assert checkpoint.expected_rate(16384, 8, 1.0, 47 / 54) == pytest.approx(rate)
    assert plan.interval_s == pytest.approx((2 * plan.write_s / rate) ** 0.5)        # Young/Daly: ~4 minutes
    assert 200 < plan.interval_s < 300
    async_plan = checkpoint.checkpoint_plan(dataclasses.replace(s, checkpoint=dataclasses.replace(
        s.checkpoint, mode="async")), job)
    local = 2 * params / 128 + 12 * params / (128 * 128)          # TP 8 x PP 16 shards, ZeRO-1 over DP 128
    assert async_plan.stall_s == pytest.approx(local / 64e9)      # PCIe gen5 x16 to host memory
    assert async_plan.interval_s < plan.interval_s
