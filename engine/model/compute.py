"""Compute cost of the model on one GPU: FLOPs, GEMM shapes, and their time for one microbatch.

Everything here is per GPU of a tensor-parallel group (TP degree t) working on one microbatch of
`tokens` = micro_batch * seq_len / cp tokens. GEMMs run at a shape-dependent fraction of the GPU's sustained
peak; memory-bound work (norms, residual adds, activation functions, rotary embedding, cross-entropy) runs at
HBM bandwidth. Attention uses a fused (flash) kernel: the s x s scores are never stored, and the masked half
of causal attention is skipped.

FLOPs accounting (docs/performance-model.md): *model* FLOPs count 6 per parameter per token for the matmul
weights (non-embedding, plus the output layer: the 6N of Kaplan et al.) and, for causal attention, the half of
the score and value products that masking leaves: 3 s (d_qk + d_v) per head per layer per token (6 s h for
d_qk = d_v = h / heads). *Hardware* FLOPs add what recomputation runs again. Megatron-LM and PaLM count
attention without the causal halving (12 s h); engine/model/validate.py converts where a publication does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..config.catalog import GPU, Model

BF16 = 2  # bytes per activation element
GRAD_ACCUMULATION_BYTES = 8.0   # FP32 main gradient read + written per parameter per microbatch


@dataclass(frozen=True)
class Shard:
    """How one microbatch is split over one GPU."""

    tokens: int          # query tokens per GPU per microbatch (micro_batch * seq_len / cp)
    seq_len: int         # keys each query can attend to (before causal masking)
    tp: int
    cp: int
    sp: bool             # sequence parallelism: norms and residual adds split over TP
    ep: int
    precision: str       # "bf16" | "fp8" (GEMMs only)


@dataclass(frozen=True)
class PassCost:
    """One pass over one block (a layer, the embedding or the output layer) for one microbatch on one GPU."""

    compute_s: float     # GEMMs, attention and memory-bound kernels
    flops: float         # FLOPs the kernels execute (causal attention counted at what it does)
    tp_collectives: int  # TP collectives of message tp_bytes in this pass (all-reduce, or RS + AG pairs)
    tp_bytes: float      # full (TP-gathered) activation message per collective
    cp_bytes: float      # K/V bytes one GPU sends per CP ring step (0 without CP)
    cp_overlap_s: float  # compute a CP ring step can hide its transfer behind
    ep_bytes: float      # bytes one GPU holds for each of the pass's two EP all-to-alls (dispatch, combine)


@dataclass(frozen=True)
class BlockCost:
    """Forward, backward and recompute of one block, and its model / hardware FLOPs (per microbatch, GPU)."""

    fwd: PassCost
    bwd: PassCost
    recompute: PassCost | None
    model_flops: float
    hardware_flops: float


# ---------------------------------------------------------------------------------------------- parameters

def attention_dims(model: Model) -> tuple[int, int, int]:
    """(query-key head dim, value head dim, K/V width per token that CP exchanges) of the attention."""
    d = model.dim_head
    if model.attention == "mla":
        d_qk = d + model.qk_rope_dim
        return d_qk, d, model.heads * (d_qk + d)
    return d, d, 2 * model.kv_heads * d


def kv_width_per_rank(model: Model, tp: int) -> float:
    """K/V width per token on one TP rank: KV heads split over TP, replicated when there are fewer than TP."""
    _, _, width = attention_dims(model)
    if model.attention == "mla":
        return width / tp
    return 2 * max(model.kv_heads / tp, 1.0) * model.dim_head


def attention_params(model: Model) -> int:
    h, d = model.hidden, model.dim_head
    if model.attention == "mla":
        d_qk, d_v, _ = attention_dims(model)
        return (h * model.q_lora_rank + model.q_lora_rank * model.heads * d_qk
                + h * (model.kv_lora_rank + model.qk_rope_dim)
                + model.kv_lora_rank * model.heads * (d + d_v) + model.heads * d_v * h)
    return h * model.heads * d * 2 + h * 2 * model.kv_heads * d


def _mlp_params(hidden: int, ffn: int, activation: str) -> int:
    return (3 if activation == "swiglu" else 2) * hidden * ffn


def layer_params(model: Model, moe: bool) -> tuple[int, int]:
    """(total, active per token) parameters of one transformer layer, norms included."""
    h = model.hidden
    attn = attention_params(model) + 2 * h
    if not moe:
        mlp = _mlp_params(h, model.ffn, model.ffn_activation)
        return attn + mlp, attn + mlp
    expert = _mlp_params(h, model.moe_ffn, model.ffn_activation)
    router = h * model.experts
    shared = model.shared_experts * expert
    return (attn + router + shared + model.experts * expert,
            attn + router + shared + model.experts_per_token * expert)


def layer_params_per_gpu(model: Model, moe: bool, tp: int, ep: int) -> float:
    """Parameters of one layer held by one GPU: everything split over TP, routed experts also over EP."""
    total = layer_params(model, moe)[0]
    if not moe:
        return total / tp
    experts = model.experts * _mlp_params(model.hidden, model.moe_ffn, model.ffn_activation)
    return (total - experts) / tp + experts / tp / ep


def is_moe_layer(model: Model, index: int) -> bool:
    return model.is_moe and index >= model.dense_layers


def embedding_params(model: Model) -> int:
    """Input embedding plus output layer (one matrix when tied)."""
    return model.vocab * model.hidden * (1 if model.tied_embeddings else 2)


def total_params(model: Model) -> tuple[float, float]:
    """(total, active per token) parameters of the whole model, embeddings included."""
    dense = layer_params(model, False)
    moe = layer_params(model, True) if model.is_moe else dense
    n_moe = model.layers - model.dense_layers if model.is_moe else 0
    n_dense = model.layers - n_moe
    emb = embedding_params(model)
    return (n_dense * dense[0] + n_moe * moe[0] + emb, n_dense * dense[1] + n_moe * moe[1] + emb)


# ----------------------------------------------------------------------------------------- FLOPs accounting

def model_flops_per_token(model: Model, seq_len: int) -> float:
    """Model FLOPs per trained token (forward + backward): 6 N plus causal attention 6 s h per layer."""
    d_qk, d_v, _ = attention_dims(model)
    dense = layer_params(model, False)[1] - 2 * model.hidden
    moe = layer_params(model, True)[1] - 2 * model.hidden if model.is_moe else dense
    n_moe = model.layers - model.dense_layers if model.is_moe else 0
    matmul = (model.layers - n_moe) * dense + n_moe * moe + model.hidden * model.vocab
    attention = seq_len * model.heads * (d_qk + d_v) * model.layers     # forward, causal: s/2 keys per query
    return 6.0 * matmul + 3.0 * attention


# ------------------------------------------------------------------------------------------ kernel timing

def _shape(gpu: GPU, dim: float) -> float:
    """Throughput factor of one GEMM dimension: small dimensions waste tiles and waves."""
    return dim / (dim + gpu.gemm_half_dim)


def gemm_time(gpu: GPU, precision: str, m: float, n: float, k: float, count: float = 1.0) -> float:
    """Seconds for `count` GEMMs of (m x k) @ (k x n): compute at the shape's throughput, or HBM if slower."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    rate = gpu.gemm_peak_tflops(precision) * 1e12 * _shape(gpu, m) * _shape(gpu, n) * _shape(gpu, k)
    elem = 1 if precision == "fp8" else BF16
    traffic = (m * k + k * n) * elem + m * n * BF16
    return count * (max(flops / rate, traffic / hbm_rate(gpu)) + gpu.kernel_overhead_us * 1e-6)


def hbm_rate(gpu: GPU) -> float:
    """Bytes per second elementwise kernels reach."""
    return gpu.hbm_tb_s * 1e12 * gpu.hbm_efficiency


def memory_time(gpu: GPU, traffic: float, kernels: int) -> float:
    return traffic / hbm_rate(gpu) + kernels * gpu.kernel_overhead_us * 1e-6


def attention_time(gpu: GPU, flops: float, queries: float, keys: float, backward: bool) -> float:
    """Fused attention kernel: a fraction of BF16 peak that falls for short sequences."""
    if flops <= 0:
        return 0.0
    eff = gpu.attention_bwd_efficiency if backward else gpu.attention_fwd_efficiency
    rate = gpu.bf16_tflops * 1e12 * eff * _shape(gpu, queries) * _shape(gpu, keys)
    return flops / rate + gpu.kernel_overhead_us * 1e-6


# -------------------------------------------------------------------------------------------- one layer

def _gemms(model: Model, moe: bool, sh: Shard) -> list[tuple[float, float, float, float]]:
    """Forward GEMMs of one layer as (m, n, k, count) per GPU."""
    h, t, T = model.hidden, sh.tp, sh.tokens
    d = model.dim_head
    out: list[tuple[float, float, float, float]] = []
    if model.attention == "mla":
        d_qk, d_v, _ = attention_dims(model)
        out += [(T, model.q_lora_rank, h, 1), (T, model.heads * d_qk / t, model.q_lora_rank, 1),
                (T, model.kv_lora_rank + model.qk_rope_dim, h, 1),
                (T, model.heads * (d + d_v) / t, model.kv_lora_rank, 1), (T, h, model.heads * d_v / t, 1)]
    else:
        out += [(T, model.heads * d / t + kv_width_per_rank(model, t), h, 1), (T, h, model.heads * d / t, 1)]
    up = 2 if model.ffn_activation == "swiglu" else 1
    if not moe:
        out += [(T, up * model.ffn / t, h, 1), (T, h, model.ffn / t, 1)]
        return out
    local = max(1, model.experts // sh.ep)
    per_expert = T * model.experts_per_token / local          # token copies each local expert receives
    out += [(T, model.experts, h, 1), (per_expert, up * model.moe_ffn / t, h, local),
            (per_expert, h, model.moe_ffn / t, local)]
    if model.shared_experts:
        f = model.shared_experts * model.moe_ffn
        out += [(T, up * f / t, h, 1), (T, h, f / t, 1)]
    return out


def _elementwise_bytes(model: Model, moe: bool, sh: Shard) -> tuple[float, float]:
    """(norm + residual bytes, activation-function + rotary bytes) one forward moves per GPU per microbatch."""
    h, t, T = model.hidden, sh.tp, sh.tokens
    split = t if sh.sp else 1
    norms_residual = (2 * 4 * h + 2 * 6 * h) * BF16 / 2 * T / split   # 2 norms (r+w), 2 adds (2r+1w)
    d_qk, _, _ = attention_dims(model)
    rotary = 2 * 2 * (model.heads * d_qk / t + kv_width_per_rank(model, t) / 2) * T
    per_value = 6 if model.ffn_activation == "swiglu" else 4             # bytes per FFN element (r + w)
    if moe:
        ffn = model.moe_ffn * (model.experts_per_token + model.shared_experts)
        dispatch = 4 * T * model.experts_per_token * h * BF16           # permute + unpermute (r + w)
    else:
        ffn, dispatch = model.ffn, 0.0
    act = per_value * ffn * T / t + rotary + dispatch
    return norms_residual, act


@lru_cache(maxsize=4096)
def layer_cost(gpu: GPU, model: Model, moe: bool, sh: Shard, recompute: str) -> BlockCost:
    """Forward, backward and recompute of one transformer layer for one microbatch on one GPU."""
    T, t = sh.tokens, sh.tp
    gemms = _gemms(model, moe, sh)
    g_fwd = sum(gemm_time(gpu, sh.precision, m, n, k, c) for m, n, k, c in gemms)
    # Backward: data gradient (m x n) @ (n x k) and weight gradient (k x m) @ (m x n), same FLOPs each.
    g_bwd = sum(gemm_time(gpu, sh.precision, m, k, n, c) + gemm_time(gpu, sh.precision, k, n, m, c)
                for m, n, k, c in gemms)
    gemm_flops = sum(2.0 * m * n * k * c for m, n, k, c in gemms)

    d_qk, d_v, _ = attention_dims(model)
    heads = model.heads / t
    done_attn = T * sh.seq_len * heads * (d_qk + d_v)      # forward, causal: each query sees s/2 keys on average
    queries = sh.seq_len / sh.cp
    a_fwd = attention_time(gpu, done_attn, queries, sh.seq_len, backward=False)
    a_bwd = attention_time(gpu, 2 * done_attn, queries, sh.seq_len, backward=True)

    nr, act = _elementwise_bytes(model, moe, sh)
    m_fwd = memory_time(gpu, nr + act, 8)
    # Backward also adds each microbatch's weight gradients into the FP32 main gradients: read + write 8 bytes
    # per parameter (fused into the weight-gradient GEMM by Megatron's gradient-accumulation fusion, or a
    # separate add; either way the traffic is there every microbatch).
    accumulate = GRAD_ACCUMULATION_BYTES * layer_params_per_gpu(model, moe, t, sh.ep)
    m_bwd = memory_time(gpu, 2 * (nr + act) + accumulate, 12)

    tp_bytes = T * model.hidden * BF16 if t > 1 else 0.0
    n_tp = 2 if t > 1 else 0
    cp_ring = sh.cp > 1
    cp_bytes = T * kv_width_per_rank(model, t) * BF16 if cp_ring else 0.0
    ep_bytes = T * model.experts_per_token * model.hidden * BF16 if moe and sh.ep > 1 else 0.0
    ranks = float(sh.cp)
    # FP8 training quantizes the forward dispatch to FP8 (the expert GEMMs' input); the combine and the
    # backward all-to-alls stay BF16 (DeepSeek-V3 report 3.3.3, low-precision communication)
    ep_fwd = ep_bytes * (1.0 + BF16) / (2 * BF16) if sh.precision == "fp8" else ep_bytes
    fwd = PassCost(g_fwd + a_fwd + m_fwd, gemm_flops + done_attn, n_tp, tp_bytes, cp_bytes,
                   a_fwd / ranks, ep_fwd)
    bwd = PassCost(g_bwd + a_bwd + m_bwd, 2 * (gemm_flops + done_attn), n_tp, tp_bytes, 2 * cp_bytes,
                   a_bwd / ranks, ep_bytes)
    model_flops = 3.0 * (gemm_flops + done_attn)
    rec: PassCost | None = None
    hardware = model_flops
    if recompute == "full":
        rec = fwd
        hardware += gemm_flops + done_attn
    elif recompute == "selective":
        # norms and the MLP activation are recomputed from their inputs: memory-bound, no GEMM FLOPs
        rec = PassCost(memory_time(gpu, nr / 2 + act / 2, 3), 0.0, 0, 0.0, 0.0, 0.0, 0.0)
    return BlockCost(fwd, bwd, rec, model_flops, hardware)


# ---------------------------------------------------------------------------------- embedding and output

@lru_cache(maxsize=1024)
def embedding_cost(gpu: GPU, model: Model, sh: Shard) -> BlockCost:
    """Input embedding lookup (first stage): memory-bound; a TP reduction of its output."""
    T, t = sh.tokens, sh.tp
    out = T * model.hidden * BF16 / (t if sh.sp else 1)
    tp_bytes = T * model.hidden * BF16 if t > 1 else 0.0
    fwd = PassCost(memory_time(gpu, 2 * out, 1), 0.0, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    bwd = PassCost(memory_time(gpu, 4 * out, 2), 0.0, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    return BlockCost(fwd, bwd, None, 0.0, 0.0)


@lru_cache(maxsize=1024)
def output_cost(gpu: GPU, model: Model, sh: Shard) -> BlockCost:
    """Final norm, output projection over the TP-split vocabulary and the cross-entropy loss (last stage)."""
    T, t, h = sh.tokens, sh.tp, model.hidden
    v = model.vocab / t
    g_fwd = gemm_time(gpu, sh.precision, T, v, h)
    g_bwd = (gemm_time(gpu, sh.precision, T, h, v) + gemm_time(gpu, sh.precision, h, v, T)
             + memory_time(gpu, GRAD_ACCUMULATION_BYTES * h * v, 1))
    logits = T * v
    # cross-entropy in FP32: logits read, max/sum/softmax written (fwd); softmax - one-hot (bwd)
    ce_fwd = memory_time(gpu, logits * (BF16 + 4 + 4) + 4 * h * T * BF16 / (t if sh.sp else 1), 4)
    ce_bwd = memory_time(gpu, logits * (4 + BF16) + 8 * h * T * BF16 / (t if sh.sp else 1), 3)
    flops = 2.0 * T * v * h
    tp_bytes = T * h * BF16 if t > 1 else 0.0
    fwd = PassCost(g_fwd + ce_fwd, flops, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    bwd = PassCost(g_bwd + ce_bwd, 2 * flops, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    return BlockCost(fwd, bwd, None, 3 * flops, 3 * flops)


def optimizer_time(gpu: GPU, params_on_gpu: float, shards: int) -> float:
    """Adam step over this GPU's shard: FP32 master weights, two moments, gradient in, BF16 weights out.

    Per parameter: read 4 (grad) + 12 (master, m, v), write 12 + 2 (BF16 copy), plus a read of the gradient
    for the global norm: about 34 bytes, all at HBM bandwidth.
    """
    return memory_time(gpu, 34.0 * params_on_gpu / max(1, shards), 4)
