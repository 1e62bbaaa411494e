"""Fault processes: Llama 3 Table 5 rates per component, scaled by cluster size, reproducible per seed."""

from __future__ import annotations

import collections

import numpy as np

from engine import faults

DAYS54 = 54 * 86400.0


def test_rates_reproduce_table5_in_expectation() -> None:
    assert sum(c.count for c in faults.causes()) == 419
    assert abs(faults.expected_count(16384, 8, DAYS54) - 419) < 1e-6


def test_rates_scale_with_cluster_size() -> None:
    assert abs(faults.expected_count(32768, 8, DAYS54) - 2 * 419) < 1e-6
    assert abs(faults.expected_count(1024, 8, DAYS54) - 419 / 16) < 1e-6


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
    for cause in faults.causes():
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
    t = faults.young_daly_interval(5.0, 466 / DAYS54)
    assert 250 < t < 400
    assert faults.young_daly_interval(5.0, 0.0) == float("inf")
