"""Kernel timing against the measured tables it was fitted to (calibration_runs.toml), and how it scales."""

from __future__ import annotations

import dataclasses
import math

import pytest
from clustertop.engine.config import catalog
from clustertop.engine.model import calibration, kernels

H100 = catalog.gpus()["h100-sxm-80gb"]
A100 = catalog.gpus()["a100-sxm-80gb"]
TABLES = calibration.tables()


def _gemm_tflops(gpu, m: int, n: int, k: int) -> float:  # type: ignore[no-untyped-def]
    return 2 * m * n * k / kernels.gemm_time(gpu, "bf16", m, n, k) / 1e12


def test_the_gemm_model_reproduces_the_measured_h100_table() -> None:
    # the table was measured one kernel at a time, at burst clocks: the shape constants of the catalog with
    # the fit's burst main-loop efficiency (0.88) and a lone kernel's latency (6 us); a kernel repeated alone
    # keeps its operands (50 MB at most) in the 50 MB L2, so nothing waits on HBM (overlap 1)
    burst = dataclasses.replace(H100, gemm_efficiency=0.88, kernel_overhead_us=6.0, gemm_overlap=1.0)
    kernels._gemm.cache_clear()
    table = TABLES["gemm_h100_bf16_tflops"]
    logs = []
    for shape, measured in table.items():
        if shape == "k":
            continue
        m, n = map(int, shape.split("x"))
        for k, tflops in zip(table["k"], measured):
            predicted = _gemm_tflops(burst, m, n, k)
            logs.append(math.log(predicted / tflops))
            if m >= 2048:
                assert predicted == pytest.approx(tflops, rel=0.05), (shape, k)
    assert math.sqrt(sum(x * x for x in logs) / len(logs)) < 0.08


def test_small_and_skinny_gemms_waste_the_gpu() -> None:
    big = _gemm_tflops(H100, 8192, 8192, 8192)
    main_loop = H100.bf16_tflops * H100.gemm_efficiency
    assert 0.9 * main_loop < big < main_loop          # the main loop, and what of the reads it does not hide
    assert _gemm_tflops(H100, 8192, 128, 8192) < 0.6 * big        # one tile row: few tiles for 132 SMs
    assert _gemm_tflops(H100, 256, 256, 256) < 0.1 * big          # fixed costs dominate


def test_a100_gemms_follow_its_sms_and_peak() -> None:
    a100, h100 = (dataclasses.replace(g, gemm_overlap=1.0) for g in (A100, H100))   # the main loops alone
    ratio = _gemm_tflops(a100, 8192, 8192, 8192) / _gemm_tflops(h100, 8192, 8192, 8192)
    expected = (A100.bf16_tflops * A100.gemm_efficiency) / (H100.bf16_tflops * H100.gemm_efficiency)
    assert ratio == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("gpu, column", [(A100, "a100"), (H100, "h100")])
def test_flash_attention_2_follows_the_measured_curves(gpu, column) -> None:  # type: ignore[no-untyped-def]
    table = TABLES["flash_attention2_tflops"]
    logs = []
    for causal in (True, False):
        measured = table[f"{column}_{'causal' if causal else 'noncausal'}"]
        for seq, tflops in zip(table["seq"], measured):
            rate = kernels.attention_rate(gpu, "flash2", seq, causal, 128) / 1e12
            # causal within 5%; without the mask one shape constant serves both GPUs (A100's short end: 17%)
            assert rate == pytest.approx(tflops, rel=0.05 if causal else 0.2), (column, causal, seq)
            logs.append(math.log(rate / tflops))
    assert math.sqrt(sum(x * x for x in logs) / len(logs)) < 0.08


def test_attention_kernels_and_context_parallel_chunks() -> None:
    flops = 1e12
    fa2 = kernels.attention_time(H100, "flash2", flops, 8192, 1, 128, backward=False)
    fa3 = kernels.attention_time(H100, "flash3", flops, 8192, 1, 128, backward=False)
    assert fa3 < 0.75 * fa2                       # FA3 / cuDNN on Hopper
    assert kernels.attention_time(A100, "auto", flops, 8192, 1, 128, backward=False) == \
        kernels.attention_time(A100, "flash2", flops, 8192, 1, 128, backward=False)   # no FA3 on Ampere
    # FlashAttention-1 / Triton's kernel: the fitted shares of FA2's rate stay inside the FA2 paper's range
    # (FA2 1.7-3.0x FA1, 1.3-2.5x Triton), and the kernels written for the A100 keep more of it there
    for gpu in (A100, H100):
        assert 1 / 3 <= gpu.flash1_share <= 1 / 1.3
        assert kernels.attention_rate(gpu, "flash1", 8192, True, 128) == pytest.approx(
            gpu.flash1_share * kernels.attention_rate(gpu, "flash2", 8192, True, 128))
    assert A100.flash1_share > H100.flash1_share
    bwd = kernels.attention_time(H100, "flash3", flops, 8192, 1, 128, backward=True)
    assert bwd == pytest.approx(2.5 * fa3, rel=0.01)      # (one kernel's fixed cost each)
    # 128K tokens in CP 16: chunks of 8K, mostly full (unmasked) pairs: about the 8K rate, not the 128K one
    cp = kernels.attention_time(H100, "flash3", flops, 131072, 16, 128, backward=False)
    long = kernels.attention_time(H100, "flash3", flops, 131072, 1, 128, backward=False)
    assert long < cp < 1.05 * fa3
    # smaller heads run slower
    assert (kernels.attention_rate(H100, "flash3", 8192, True, 64)
            < kernels.attention_rate(H100, "flash3", 8192, True, 128))


def test_memory_bound_kernels_pay_their_fixed_cost() -> None:
    one = kernels.memory_time(H100, 0.0, 1)
    assert one == pytest.approx(H100.kernel_overhead_us * 1e-6)
    assert kernels.memory_time(H100, 2.68e9, 0) == pytest.approx(2.68e9 / (H100.hbm_tb_s * 1e12
                                                                          * H100.hbm_efficiency))


def test_a_batched_gemm_is_one_kernel_over_all_its_tiles() -> None:
    # unfused attention's per-(sequence, head) products run as one strided-batched GEMM: one fixed cost, and
    # the tiles of all the matrices fill the SMs together (no partial wave per matrix)
    one = kernels.gemm_time(A100, "bf16", 2048, 2048, 128)
    assert kernels.batched_gemm_time(A100, "bf16", 2048, 2048, 128, 1) == pytest.approx(one)
    batched = kernels.batched_gemm_time(A100, "bf16", 2048, 2048, 96, 384)
    separate = 384 * kernels.gemm_time(A100, "bf16", 2048, 2048, 96)
    assert batched < separate - 383 * A100.kernel_overhead_us * 1e-6 * 0.99
    assert batched > 384 * 2 * 2048 * 2048 * 96 / (A100.bf16_tflops * 1e12)


def test_an_moe_layers_experts_run_as_one_grouped_kernel() -> None:
    gemm_time = kernels.gemm_time
    # 256 experts of a decode batch (8 token copies each): one kernel whose tiles fill the SMs together,
    # each expert's weights read once; not 256 kernels each holding one SM and paying its own fixed cost
    gpu = H100
    one = gemm_time(gpu, "fp8", 8, 2048, 7168)
    grouped = gemm_time(gpu, "fp8", 8, 2048, 7168, 256)
    assert grouped < 256 * one - 255 * gpu.kernel_overhead_us * 1e-6      # one fixed cost, not 256
    weights = 256 * 2048 * 7168 / (gpu.hbm_tb_s * 1e12 * gpu.hbm_efficiency)   # FP8: a byte each
    assert weights < grouped < 1.25 * weights
