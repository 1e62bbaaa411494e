"""Memory per GPU: weight/gradient/optimizer bytes, ZeRO sharding, activations per recompute mode, OOM."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.model import chunks, step
from clustertop.engine.model import memory as mem
from clustertop.engine.model.estimate import estimate_job
from clustertop.engine.model.pipeline import peak_inflight

MODELS = catalog.models()


def test_405b_on_one_h100_does_not_fit_and_shows_810_gb_of_bf16_weights() -> None:
    s = scenario.load("single-gpu-405b")
    e = estimate_job(s, s.jobs[0])
    assert not e.fits and e.step_time_s is None and e.plan is None
    assert e.memory_gb["weights"] == pytest.approx(811, rel=0.01)
    assert e.memory_gb["gradients"] == pytest.approx(2 * e.memory_gb["weights"], rel=0.01)   # FP32
    assert e.memory_gb["optimizer"] == pytest.approx(6 * e.memory_gb["weights"], rel=0.01)   # 12 bytes
    assert e.memory_gb_per_gpu > e.capacity_gb


def _stage(zero: int, dp: int = 8) -> mem.StageMemory:
    return mem.stage_memory(params=1e9, expert_params=0.0, largest_layer_params=1e7, zero=zero, dp_shards=dp,
                            expert_shards=dp, activations=0.0, transient=0.0, logits=0.0)


def test_zero_stages_shard_optimizer_then_gradients_then_weights() -> None:
    z0, z1, z2, z3 = (_stage(z) for z in range(4))
    assert (z0.weights, z0.gradients, z0.optimizer) == (2e9, 4e9, 12e9)
    assert z1.optimizer == pytest.approx(12e9 / 8) and z1.gradients == 4e9 and z1.weights == 2e9
    assert z2.gradients == pytest.approx(4e9 / 8 + mem.COMM_BUCKET_BYTES) and z2.weights == 2e9
    assert z3.weights == pytest.approx(2e9 / 8 + 4 * 1e7)
    assert z0.total > z1.total > z2.total > z3.total


def test_expert_parameters_shard_over_their_own_group() -> None:
    s = mem.stage_memory(params=2e9, expert_params=1e9, largest_layer_params=0, zero=1, dp_shards=64,
                         expert_shards=8, activations=0, transient=0, logits=0)
    assert s.optimizer == pytest.approx(12 * (1e9 / 64 + 1e9 / 8))


def test_activations_match_korthikanti_for_gpt3() -> None:
    m = MODELS["gpt3-175b"]
    # sbh(34 + 5as/h): a fused attention kernel drops 5as/h, and without dropout the two 1-byte masks go: 32 h
    assert mem.activation_bytes_per_token(m, False, 1, False, "none") == 32 * m.hidden
    # tensor + sequence parallelism divide everything by t; without SP the norm terms stay whole
    assert mem.activation_bytes_per_token(m, False, 8, True, "none") == 32 * m.hidden / 8
    no_sp = mem.activation_bytes_per_token(m, False, 8, False, "none")
    assert no_sp == pytest.approx(8 * m.hidden + 24 * m.hidden / 8)
    # full recomputation keeps the layer input only: 2 s b h
    assert mem.activation_bytes_per_token(m, False, 1, False, "full") == 2 * m.hidden


def test_recompute_modes_order_activation_memory() -> None:
    m = MODELS["llama3.1-405b"]
    none, sel, full = (mem.activation_bytes_per_token(m, False, 8, True, r)
                       for r in ("none", "selective", "full"))
    assert none > sel > full


def test_flagship_stage_memory_and_oom_verdict() -> None:
    s = scenario.load("llama3-405b-16k")
    job = dataclasses.replace(s.jobs[0], recompute="full")
    e = estimate_job(s, job)
    assert e.fits and e.memory_gb_per_gpu < e.capacity_gb
    # BF16 weights of the busiest stage: 8 of 126 layers over TP 8
    assert e.memory_gb["weights"] == pytest.approx(2 * 8 * 3.19e9 / 8 / 1e9, rel=0.02)
    heavy = estimate_job(s, dataclasses.replace(s.jobs[0], micro_batch=16, virtual_stages=1,
                                                recompute="none"))
    assert not heavy.fits and heavy.step_time_s is None
    assert heavy.memory_gb["activations"] > e.memory_gb["activations"]


def test_capacity_is_the_gib_the_board_reports() -> None:
    assert mem.capacity_bytes(catalog.gpus()["h100-sxm-80gb"]) == 80 * 2**30


def test_fp8_caches_gemm_inputs_in_one_byte_and_mla_recomputes_up_projections() -> None:
    from clustertop.engine.config import catalog
    from clustertop.engine.model.memory import activation_bytes_per_token

    ds = catalog.models()["deepseek-v3"]
    bf16 = activation_bytes_per_token(ds, True, 1, False, "selective")
    fp8 = activation_bytes_per_token(ds, True, 1, False, "selective", fp8=True)
    none = activation_bytes_per_token(ds, True, 1, False, "none", fp8=True)
    assert fp8 < 0.65 * bf16           # dispatched inputs, SwiGLU inputs, latents: 1 byte
    assert fp8 < 0.6 * none            # Q, K, V recomputed from the MLA latents
    llama = catalog.models()["llama3.1-405b"]
    assert activation_bytes_per_token(llama, False, 8, True, "selective") == \
        activation_bytes_per_token(llama, False, 8, True, "selective", fp8=False)


def test_held_activations_are_the_peaks_in_flight_kept_per_layout_schedule_and_bytes() -> None:
    """step.held_activations (cached: configurations that leave the activations as they are share them) gives
    pipeline.peak_inflight of each distinct chunk's bytes spread over the grid, and what differs in the
    layout, the schedule, the microbatches or the bytes gets its own figures, not a kept one."""
    model = MODELS["llama3.1-405b"]
    step.held_activations.cache_clear()
    seen = set()
    for schedule, p, v, m, scale in (("1f1b", 8, 1, 16, 1.0), ("1f1b", 8, 1, 16, 2.0), ("1f1b", 8, 1, 4, 1.0),
                                     ("gpipe", 8, 1, 16, 1.0), ("1f1b", 8, 2, 16, 1.0),
                                     ("1f1b", 16, 1, 16, 1.0)):
        grid = chunks.grid(model, p, v)
        per_chunk = tuple(scale * (i + 1) * 1e9 for i in range(len(grid.chunks)))
        expected = tuple(peak_inflight(schedule, p, v, m, np.array(per_chunk)[grid.at]))
        for _ in range(2):          # made, then kept
            assert step.held_activations(schedule, model, p, v, m, per_chunk) == expected
        seen.add(expected)
    assert len(seen) == 6
    assert step.held_activations.cache_info().hits == 6
