"""How long one GPU kernel takes: GEMMs by shape, fused attention by sequence length, memory-bound kernels.

GEMM (fitted to the measured H100 BF16 table of calibration_runs.toml `gemm_h100_bf16_tflops`, 25 shapes):
cuBLAS covers the m x n output with tiles of `gemm_tile` and runs them on the GPU's SMs in waves; each tile's
main loop walks k, plus a fixed prologue/epilogue worth `gemm_k0` of k; when the tiles cannot fill the SMs, k
is split over several (split-K, at least `gemm_split_k_min` per part) and the partial sums are reduced through
HBM. So

    t = t0 + waves * 2 tm tn (k / split + k0) / (peak / SMs * efficiency)
    waves = ceil(tiles * split / SMs)

with t0 the kernel's fixed cost. Fitted on H100 (log RMS 6% over the table, within 3% for every shape from
2048 up): tile 64 x 128, k0 = 128, split parts of >= 512, t0 = 6 us for a kernel timed alone (its launch
latency included); in a stream of kernels the next one's launch overlaps the current one and t0 is the
catalog's `kernel_overhead_us` (4 us). Other GPUs use the same shape
constants with their own SM count and peak (A100: 108 SMs at 312 TF/s), and their own sustained main-loop
efficiency (gpus.toml). The GEMM also streams its operands through HBM, and the two overlap only in part: it
takes the longer of the main loop and the reads, plus the share of the shorter that does not hide under it
(`gemm_overlap` of gpus.toml: 0.6 hidden on H100). That matters where the two are of a size: the GEMMs of a
serving batch of tens to hundreds of tokens, where reading the weights and the tensor cores' work are
comparable (TensorRT-LLM's online runs: inter-token latency and TTFT rise with the load well before the GEMMs
are compute-bound; fitted on their fitting rows, docs/performance-model.md 12). A training GEMM of thousands
of tokens is compute-bound several times over and loses a few percent. The measured table above repeats one
kernel whose operands (50 MB at most) stay in the 50 MB L2: nothing waits on HBM there.

Fused attention (FlashAttention-style: scores never stored) by sequence length, fitted to the FA2 table of
calibration_runs.toml `flash_attention2_tflops` (fwd + bwd TF/s, head dim 128, FLOPs counted as FA2's
benchmark does: the backward is 2.5 forwards because it recomputes the scores; causal counts half):

    R(s) = R_max s / (s + s_half)      causal s_half = 525, non-causal s_half = 205 (A100 and H100 fits agree)

R_max per GPU and kernel is in gpus.toml (`flash2_tflops`: the FA2 table's plateau; `flash3_tflops`: FA3 or
cuDNN's fused attention on Hopper and newer); FlashAttention-1 and Triton's kernel ("flash1") run at the
fitted `flash1_share` of FA2's, per GPU (gpus.toml). A forward takes F / R and a backward 2.5 F / R,
where F is the forward's FLOPs as the kernel does them (causal: half the square). Head dimensions other than
128 run at d / (d + 16) of it, relative to 128 (FA2 paper: head 64 about 10% slower).

Memory-bound kernels (norms, residual adds, activation functions, casts, the optimizer, the loss) move their
bytes at `hbm_tb_s * hbm_efficiency` and each costs t0 on top.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..config.catalog import GPU

BF16 = 2
CAUSAL_S_HALF = 525.0          # sequence length at which fused causal attention reaches half its plateau
FULL_S_HALF = 205.0            # the same without the mask
HEAD_DIM_HALF = 16.0           # d / (d + 16), relative to head dim 128
ATTENTION_BACKWARD_WORK = 2.5  # the backward does 2.5 forwards of work (it recomputes the scores)


def hbm_rate(gpu: GPU) -> float:
    """Bytes per second memory-bound kernels reach."""
    return gpu.hbm_tb_s * 1e12 * gpu.hbm_efficiency


def memory_time(gpu: GPU, traffic: float, kernels: float) -> float:
    """Memory-bound kernels moving `traffic` bytes, each with its fixed cost."""
    return traffic / hbm_rate(gpu) + kernels * gpu.kernel_overhead_us * 1e-6


def _tiled(gpu: GPU, precision: str, m: float, n: float, k: float, batch: float, split: int) -> float:
    """Seconds of one GEMM kernel over `batch` products of (m x k) @ (k x n), k split in `split` parts: its
    tiles in waves over the SMs, never faster than its operands through HBM, plus the kernel's fixed cost."""
    tm, tn = gpu.gemm_tile
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    waves = math.ceil(tiles * split / gpu.sms)
    rate = gpu.gemm_peak_tflops(precision) * 1e12 / gpu.sms          # FLOP/s of one SM's main loop
    t = waves * 2.0 * tm * tn * (k / split + gpu.gemm_k0) / rate
    if split > 1:
        t += 2 * split * m * n * 4 / hbm_rate(gpu)              # FP32 partial sums written and reduced
    elem = 1 if precision == "fp8" else BF16
    traffic = batch * ((m * k + k * n) * elem + m * n * BF16)
    memory = traffic / hbm_rate(gpu)
    return max(t, memory) + (1.0 - gpu.gemm_overlap) * min(t, memory) + gpu.kernel_overhead_us * 1e-6


@lru_cache(maxsize=65536)
def _gemm(gpu: GPU, precision: str, m: float, n: float, k: float) -> float:
    tm, tn = gpu.gemm_tile
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    split = max(1, min(gpu.sms // tiles, int(k // gpu.gemm_split_k_min))) if tiles < gpu.sms else 1
    return _tiled(gpu, precision, m, n, k, 1, split)


def gemm_time(gpu: GPU, precision: str, m: float, n: float, k: float, count: float = 1.0) -> float:
    """Seconds for one GEMM of (m x k) @ (k x n), or for `count` of them with their own weights in one grouped
    kernel (an MoE layer's experts: Megatron-Core's grouped GEMM, the serving engines' fused MoE kernels):
    the tiles of every expert spread over the SMs together, each expert's operands read once, one fixed
    cost."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    if count == 1:
        return _gemm(gpu, precision, m, n, k)
    return _grouped(gpu, precision, m, n, k, count)


@lru_cache(maxsize=65536)
def _grouped(gpu: GPU, precision: str, m: float, n: float, k: float, count: float) -> float:
    return _tiled(gpu, precision, m, n, k, count, 1)


def batched_gemm_time(gpu: GPU, precision: str, m: float, n: float, k: float, batch: float) -> float:
    """Seconds for one strided-batched GEMM (cuBLAS gemmStridedBatched, PyTorch's bmm/baddbmm): `batch`
    products of (m x k) @ (k x n) in one kernel, their tiles spread over the SMs together (waves over all of
    them), one kernel's fixed cost."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    return _tiled(gpu, precision, m, n, k, batch, 1)


def attention_rate(gpu: GPU, kernel: str, seq: float, causal: bool, head_dim: float) -> float:
    """FLOP/s of a fused attention kernel over `seq` keys (fwd and bwd alike; FA2's FLOPs convention)."""
    plateau = gpu.attention_plateau(kernel, causal)
    s_half = CAUSAL_S_HALF if causal else FULL_S_HALF
    head = head_dim / (head_dim + HEAD_DIM_HALF) * (128 + HEAD_DIM_HALF) / 128
    return plateau * 1e12 * seq / (seq + s_half) * min(1.0, head)


def attention_time(gpu: GPU, kernel: str, flops: float, seq: float, cp: int, head_dim: float,
                   backward: bool) -> float:
    """One forward (or backward) of causal attention over `seq` tokens split in `cp` chunks (context
    parallelism runs a kernel per pair of chunks: the diagonal pairs causal, the others full), for `flops`
    of forward work as the kernel does it."""
    if flops <= 0:
        return 0.0
    chunk = seq / cp
    causal = attention_rate(gpu, kernel, chunk, True, head_dim)
    full = attention_rate(gpu, kernel, chunk, False, head_dim) if cp > 1 else causal
    diagonal = 1.0 / cp                 # the share of the (causal) work in the diagonal pairs
    t = flops * (diagonal / causal + (1.0 - diagonal) / full)
    kernels = cp
    if backward:
        t *= ATTENTION_BACKWARD_WORK
    return t + kernels * gpu.kernel_overhead_us * 1e-6
