"""Compute model: parameter counts, FLOPs accounting, GEMM shape efficiency, forward/backward/recompute."""

from __future__ import annotations

import dataclasses

import pytest
from clustertop.engine.config import catalog
from clustertop.engine.model import compute as cm

H100 = catalog.gpus()["h100-sxm-80gb"]
A100 = catalog.gpus()["a100-sxm-80gb"]
MODELS = catalog.models()


def test_llama3_405b_has_405b_parameters() -> None:
    total, active = cm.total_params(MODELS["llama3.1-405b"])
    assert total == active
    assert 404e9 < total < 407e9


def test_deepseek_v3_total_and_active_parameters_match_the_report() -> None:
    total, active = cm.total_params(MODELS["deepseek-v3"])
    assert total == pytest.approx(671e9, rel=0.01)
    assert active == pytest.approx(37e9, rel=0.03)


def test_model_flops_per_token_is_6n_plus_causal_attention() -> None:
    m = MODELS["llama3.1-405b"]
    s = 8192
    non_embedding = cm.total_params(m)[0] - 2 * m.vocab * m.hidden - m.layers * 2 * m.hidden
    expected = 6 * (non_embedding + m.vocab * m.hidden) + 6 * m.layers * s * m.hidden
    assert cm.model_flops_per_token(m, s) == pytest.approx(expected, rel=1e-9)
    # attention grows linearly with the sequence: 128K context adds 16x the 8K attention term
    grow = cm.model_flops_per_token(m, 16 * s) - cm.model_flops_per_token(m, s)
    assert grow == pytest.approx(15 * 6 * m.layers * s * m.hidden, rel=1e-9)


def test_gemm_efficiency_depends_on_shape() -> None:
    big = 2 * 8192 * 8192 * 8192 / cm.gemm_time(H100, "bf16", 8192, 8192, 8192)
    skinny = 2 * 8192 * 128 * 8192 / cm.gemm_time(H100, "bf16", 8192, 128, 8192)
    small = 2 * 256**3 / cm.gemm_time(H100, "bf16", 256, 256, 256)
    main_loop = H100.bf16_tflops * H100.gemm_efficiency * 1e12
    assert 0.9 * main_loop < big < main_loop          # the main loop, and what of the reads it does not hide
    assert skinny < 0.6 * big
    assert small < 0.3 * big


def test_fp8_gemms_are_faster_than_bf16_on_h100() -> None:
    assert cm.gemm_time(H100, "fp8", 8192, 8192, 8192) < 0.9 * cm.gemm_time(H100, "bf16", 8192, 8192, 8192)


def test_backward_is_about_twice_forward_and_full_recompute_adds_a_forward() -> None:
    sh = cm.Shard(tokens=8192, seq_len=8192, tp=8, cp=1, sp=True, ep=1, precision="bf16")
    none = cm.layer_cost(H100, MODELS["llama3.1-405b"], False, sh, "none")
    full = cm.layer_cost(H100, MODELS["llama3.1-405b"], False, sh, "full")
    assert 1.8 < none.bwd.compute_s / none.fwd.compute_s < 2.3
    assert none.recompute is None
    assert full.recompute is not None and full.recompute.compute_s == none.fwd.compute_s
    assert full.model_flops == none.model_flops


def test_tensor_parallelism_splits_the_work() -> None:
    m = MODELS["llama3.1-70b"]
    one = cm.layer_cost(H100, m, False, cm.Shard(4096, 4096, 1, 1, False, 1, "bf16"), "none")
    eight = cm.layer_cost(H100, m, False, cm.Shard(4096, 4096, 8, 1, True, 1, "bf16"), "none")
    assert eight.model_flops == pytest.approx(one.model_flops / 8, rel=1e-6)
    # smaller GEMMs run less efficiently: 8 GPUs take more than 1/8 of the time
    assert eight.fwd.compute_s > one.fwd.compute_s / 8
    assert eight.fwd.tp_collectives == 2 and one.fwd.tp_collectives == 0


def test_causal_attention_cost_grows_with_context() -> None:
    m = MODELS["llama3.1-405b"]
    short = cm.layer_cost(H100, m, False, cm.Shard(8192, 8192, 8, 1, True, 1, "bf16"), "none")
    long = cm.layer_cost(H100, m, False, cm.Shard(8192, 131072, 8, 16, True, 1, "bf16"), "none")
    assert long.fwd.compute_s > 1.5 * short.fwd.compute_s
    assert long.fwd.cp_bytes > 0 and short.fwd.cp_bytes == 0


def test_a_faster_gpu_runs_the_same_layer_faster() -> None:
    sh = cm.Shard(4096, 2048, 4, 1, False, 1, "bf16")
    m = MODELS["bloom-176b"]
    assert (cm.layer_cost(H100, m, False, sh, "none").fwd.compute_s
            < cm.layer_cost(A100, m, False, sh, "none").fwd.compute_s)


def test_moe_layer_counts_active_experts_only() -> None:
    m = MODELS["deepseek-v3"]
    sh = cm.Shard(4096, 4096, 1, 1, False, 8, "bf16")
    moe = cm.layer_cost(H100, m, True, sh, "none")
    dense_like = dataclasses.replace(m, experts_per_token=m.experts_per_token * 2)
    assert cm.layer_cost(H100, dense_like, True, sh, "none").model_flops > moe.model_flops
    assert moe.fwd.ep_bytes > 0


def test_fp8_dispatch_halves_the_forward_dispatch_bytes_only() -> None:
    gpu, model = catalog.gpus()["h800-sxm-80gb"], catalog.models()["deepseek-v3"]
    sh = cm.Shard(tokens=4096, seq_len=4096, tp=1, cp=1, sp=False, ep=64, precision="bf16")
    bf16 = cm.layer_cost(gpu, model, True, sh, "selective")
    fp8 = cm.layer_cost(gpu, model, True, dataclasses.replace(sh, precision="fp8"), "selective")
    assert fp8.fwd.ep_bytes == pytest.approx(0.75 * bf16.fwd.ep_bytes)     # dispatch FP8, combine BF16
    assert fp8.bwd.ep_bytes == bf16.bwd.ep_bytes
