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
from .kernels import BF16, attention_time, batched_gemm_time, gemm_time, memory_time

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
    attention: str = "auto"   # "auto" | "flash1" | "flash2" | "flash3" (fused kernels) | SCORES_IN_MEMORY
                              # (scores materialized)
    dropout: float = 0.0      # hidden and attention dropout probability (masks stored and applied when > 0)
    fused: bool = True        # memory-bound ops fused into single kernels (else eager PyTorch, op by op)
    ce_fused: bool = True     # the loss in one fused kernel (else Megatron's vocab-parallel loss, op by op)
    expert_gemm: str = "per_expert"   # the local experts' GEMMs: one kernel each ("per_expert") or one
                                      # grouped kernel for all ("grouped")


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
    gemm_s: float = 0.0  # the GEMMs' part of compute_s (what TP communication overlap can hide behind)


@dataclass(frozen=True)
class BlockCost:
    """Forward, backward and recompute of one block, and its model FLOPs (per microbatch, GPU)."""

    fwd: PassCost
    bwd: PassCost
    recompute: PassCost | None
    model_flops: float


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


def mtp_is_moe(model: Model) -> bool:
    """Whether a multi-token prediction module's layer is an MoE layer (as the model's last layers are)."""
    return is_moe_layer(model, model.layers)


def embedding_params(model: Model) -> int:
    """Input embedding plus output layer (one matrix when tied)."""
    return model.vocab * model.hidden * (1 if model.tied_embeddings else 2)


def layer_kinds(model: Model) -> tuple[int, int]:
    """(dense, MoE) layers of the whole model: an MoE model's first `dense_layers` are dense."""
    n_moe = model.layers - model.dense_layers if model.is_moe else 0
    return model.layers - n_moe, n_moe


@lru_cache(maxsize=256)
def total_params(model: Model) -> tuple[float, float]:
    """(total, active per token) parameters of the whole model, embeddings included."""
    dense = layer_params(model, False)
    moe = layer_params(model, True) if model.is_moe else dense
    n_dense, n_moe = layer_kinds(model)
    emb = embedding_params(model)
    return (n_dense * dense[0] + n_moe * moe[0] + emb, n_dense * dense[1] + n_moe * moe[1] + emb)


# ----------------------------------------------------------------------------------------- FLOPs accounting

@lru_cache(maxsize=256)
def model_flops_per_token(model: Model, seq_len: int) -> float:
    """Model FLOPs per trained token (forward + backward): 6 N plus causal attention 6 s h per layer."""
    d_qk, d_v, _ = attention_dims(model)
    dense = layer_params(model, False)[1] - 2 * model.hidden
    moe = layer_params(model, True)[1] - 2 * model.hidden if model.is_moe else dense
    n_dense, n_moe = layer_kinds(model)
    matmul = n_dense * dense + n_moe * moe + model.hidden * model.vocab
    # each multi-token prediction module: a layer, the 2h -> h projection and the output head again
    mtp = model.mtp_layers
    matmul += mtp * ((moe if mtp_is_moe(model) else dense) + 2 * model.hidden**2 + model.hidden * model.vocab)
    attention = seq_len * model.heads * (d_qk + d_v) * (model.layers + mtp)   # forward, causal: s/2 keys
    return 6.0 * matmul + 3.0 * attention


# -------------------------------------------------------------------------------------------- one layer

def _gemms(model: Model, moe: bool, sh: Shard) -> list[tuple[float, float, float, float]]:
    """Forward GEMMs of one layer as (m, n, k, count) per GPU, for a training microbatch."""
    return layer_gemms(model, moe, sh.tokens, sh.tp, sh.ep)


def layer_gemms(model: Model, moe: bool, tokens: float, tp: int, ep: int,
                experts_used: float | None = None) -> list[tuple[float, float, float, float]]:
    """Forward GEMMs of one layer as (m, n, k, count) on one GPU over `tokens` tokens: the attention
    projections, then the MLP, or the router, the local experts and the shared experts. `experts_used`: the
    local experts the tokens reach (a serving batch of a few tokens touches few; default every one)."""
    h, t, T = model.hidden, tp, tokens
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
    local = max(1, model.experts // ep) if experts_used is None else experts_used
    per_expert = T * model.experts_per_token / local          # token copies each local expert receives
    out += [(T, model.experts, h, 1), (per_expert, up * model.moe_ffn / t, h, local),
            (per_expert, h, model.moe_ffn / t, local)]
    if model.shared_experts:
        f = model.shared_experts * model.moe_ffn
        out += [(T, up * f / t, h, 1), (T, h, f / t, 1)]
    return out


# Bytes per element the memory-bound ops of a layer's forward move (reads + writes, BF16 tensors), fused (one
# kernel per op: Megatron-LM / Transformer Engine / torch.compile) and eager (PyTorch op by op, as written in
# the Llama reference code: RMSNorm in FP32 is x.float(), pow, mean, rsqrt, mul, type_as, mul by the weight;
# rotary embedding in FP32 complex arithmetic; SiLU then a separate multiply). LayerNorm and GELU are single
# kernels in either. The backward moves about twice as much. (fused, eager) bytes and (fused, eager) kernels:
NORM_BYTES = {"rmsnorm": (4.0, 36.0), "layernorm": (4.0, 4.0)}
NORM_KERNELS = {"rmsnorm": (1, 7), "layernorm": (1, 1)}
ACTIVATION_BYTES = {"swiglu": (6.0, 10.0), "gelu": (4.0, 4.0), "relu2": (4.0, 8.0)}   # per FFN element
ROTARY_BYTES = (4.0, 28.0)       # per element of Q and K
ADD_BYTES = 6.0                  # a residual add: two reads, one write
# Cross-entropy, (bytes per logit forward, backward, kernels forward, backward). Fused (Megatron-Core's
# cross_entropy_loss_fusion, Transformer Engine): read the BF16 logits, write FP32 max/sum and softmax (10);
# backward softmax minus one-hot into BF16 gradients (6). Megatron's vocab-parallel loss op by op
# (tensor_parallel.vocab_parallel_cross_entropy(logits.float()), Megatron-LM 2019-2024 and Megatron-Core
# without the fusion): the FP32 copy (2 + 4), the max (4), the shifted copy (4 + 4), exp in place (4 + 4),
# the sum (4), the division in place, kept for the backward (4 + 4); backward the softmax scaled by the loss's
# gradient in place (4 + 4) and cast back to BF16 (4 + 2). Eager (F.cross_entropy under autocast): the
# logits upcast to FP32 (2 + 4), log_softmax (4 + 4), the loss gathered; backward a dense FP32 gradient (4),
# log_softmax's backward (4 + 4 + 4), the cast back (4 + 2).
CROSS_ENTROPY = {"fused": (10.0, 6.0, 4, 3), "vocab_parallel": (38.0, 14.0, 8, 3),
                 "eager": (14.0, 22.0, 6, 6)}


def elementwise(model: Model, moe: bool, sh: Shard) -> tuple[float, float, int]:
    """(norm + residual bytes, activation-function + rotary + dispatch bytes, kernels) of one forward per GPU
    per microbatch."""
    h, t, T = model.hidden, sh.tp, sh.tokens
    k = 0 if sh.fused else 1
    split = t if sh.sp else 1
    norms_residual = (2 * NORM_BYTES[model.norm][k] + 2 * ADD_BYTES) * h * T / split
    if sh.dropout > 0:          # the two fused bias-dropout-adds also write a 1-byte mask per element
        norms_residual += 2 * h * T / split
    d_qk, _, _ = attention_dims(model)
    rotary = 0.0
    if model.rotary:
        rotary = ROTARY_BYTES[k] * (model.heads * d_qk / t + kv_width_per_rank(model, t) / 2) * T
    if moe:
        ffn = model.moe_ffn * (model.experts_per_token + model.shared_experts)
        dispatch: float = 4 * T * model.experts_per_token * h * BF16    # permute + unpermute (r + w)
    else:
        ffn, dispatch = model.ffn, 0.0
    act = ACTIVATION_BYTES[model.ffn_activation][k] * ffn * T / t + rotary + dispatch
    kernels = 2 * NORM_KERNELS[model.norm][k] + 2 + (2 if sh.fused or model.ffn_activation == "swiglu" else 1)
    if model.rotary:
        kernels += 1 if sh.fused else 6
    return norms_residual, act, kernels


def _fp8_casts(gemms: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """Bytes of the FP8 quantization kernels of a layer's GEMMs (Transformer Engine's fused cast-transpose):
    forward, each GEMM's input read in BF16 and written in FP8 twice (as is, and transposed for the weight
    gradient): 4 bytes per element; backward, the same for each output gradient."""
    fwd = sum(4.0 * m * k * c for m, n, k, c in gemms)
    bwd = sum(4.0 * m * n * c for m, n, k, c in gemms)
    return fwd, bwd


@lru_cache(maxsize=4096)
def layer_cost(gpu: GPU, model: Model, moe: bool, sh: Shard, recompute: str) -> BlockCost:
    """Forward, backward and recompute of one transformer layer for one microbatch on one GPU."""
    T, t = sh.tokens, sh.tp
    gemms = _gemms(model, moe, sh)

    def gemm(m: float, n: float, k: float, c: float) -> float:
        if c > 1 and sh.expert_gemm == "per_expert":     # each expert's GEMM its own kernel, its own waves
            return c * gemm_time(gpu, sh.precision, m, n, k)
        return gemm_time(gpu, sh.precision, m, n, k, c)

    g_fwd = sum(gemm(m, n, k, c) for m, n, k, c in gemms)
    # Backward: data gradient (m x n) @ (n x k) and weight gradient (k x m) @ (m x n), same FLOPs each.
    g_bwd = sum(gemm(m, k, n, c) + gemm(k, n, m, c) for m, n, k, c in gemms)
    gemm_flops = sum(2.0 * m * n * k * c for m, n, k, c in gemms)

    d_qk, d_v, _ = attention_dims(model)
    heads = model.heads / t
    done_attn = T * sh.seq_len * heads * (d_qk + d_v)      # forward, causal:
                                                           # each query sees s/2 keys on average
    head_dim = (d_qk + d_v) / 2
    if sh.attention in SCORES_IN_MEMORY:
        a_fwd, a_bwd = unfused_attention(gpu, model, sh)
    else:
        a_fwd = attention_time(gpu, sh.attention, done_attn, sh.seq_len, sh.cp, head_dim, backward=False)
        a_bwd = attention_time(gpu, sh.attention, done_attn, sh.seq_len, sh.cp, head_dim, backward=True)

    nr, act, kernels = elementwise(model, moe, sh)
    cast_fwd, cast_bwd = _fp8_casts(gemms) if sh.precision == "fp8" else (0.0, 0.0)
    casts = len(gemms) if cast_fwd else 0
    m_fwd = memory_time(gpu, nr + act + cast_fwd, kernels + casts)
    # Backward also adds each microbatch's weight gradients into the FP32 main gradients: read + write 8 bytes
    # per parameter (fused into the weight-gradient GEMM by Megatron's gradient-accumulation fusion, or a
    # separate add; either way the traffic is there every microbatch).
    accumulate = GRAD_ACCUMULATION_BYTES * layer_params_per_gpu(model, moe, t, sh.ep)
    m_bwd = memory_time(gpu, 2 * (nr + act) + accumulate + cast_bwd, 2 * kernels + casts)

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
                   a_fwd / ranks, ep_fwd, g_fwd)
    bwd = PassCost(g_bwd + a_bwd + m_bwd, 2 * (gemm_flops + done_attn), n_tp, tp_bytes, 2 * cp_bytes,
                   a_bwd / ranks, ep_bytes, g_bwd)
    model_flops = 3.0 * (gemm_flops + done_attn)
    rec: PassCost | None = None
    if recompute == "full":
        rec = fwd
    elif recompute == "selective":
        # norms and the MLP activation are recomputed from their inputs: memory-bound, no GEMM FLOPs; without
        # a fused attention kernel the attention core (scores, softmax, dropout, values) is recomputed as well
        # (Korthikanti et al.'s selective recomputation)
        core = a_fwd if sh.attention in SCORES_IN_MEMORY else 0.0
        # MLA keeps its latents, not Q, K and V (engine/model/memory.py): the two up-projections run again
        # (DeepSeek-V3 report 3.2.3; Megatron-Core's recompute module "mla_up_proj")
        up = [gemms[1], gemms[3]] if model.attention == "mla" else []
        g_up = sum(gemm_time(gpu, sh.precision, m, n, k, c) for m, n, k, c in up)
        rec = PassCost(memory_time(gpu, nr / 2 + act / 2, kernels // 2) + core + g_up,
                       sum(2.0 * m * n * k * c for m, n, k, c in up), 0, 0.0, 0.0, 0.0, 0.0, g_up)
    return BlockCost(fwd, bwd, rec, model_flops)


# Attention kernels that keep the s x s scores in memory, and the bytes per score (BF16) of the elementwise
# work between the two batched GEMMs: forward, backward, kernels. One fused scale-mask-softmax reads and
# writes the scores (2 + 2) and its backward reads the output and its gradient and writes one (6); op by op,
# the scale (2 + 2), the mask (2 + 2 and its byte) and the softmax (2 + 2) each pass over them, and back.
SOFTMAX_BYTES = {"fused_softmax": (4.0, 6.0, 1), "unfused": (13.0, 15.0, 3)}
SCORES_IN_MEMORY = tuple(SOFTMAX_BYTES)


def unfused_attention(gpu: GPU, model: Model, sh: Shard) -> tuple[float, float]:
    """Attention with the scores in memory. "fused_softmax" (Megatron-LM 2020-2023, Megatron-DeepSpeed): per
    sequence and head the full s x s scores as a batched GEMM (the causal mask hides half of them, the GEMM
    computes all), one fused scale-mask-softmax kernel (read and write the scores), attention dropout (a
    1-byte mask), the product with V. "unfused" (PyTorch op by op): the scale, the mask and the softmax are
    three kernels, each reading and writing the scores. The backward runs the four data-gradient GEMMs and the
    elementwise backward of each. Forward and backward seconds for one microbatch on one GPU."""
    d_qk, d_v, _ = attention_dims(model)
    s = sh.seq_len
    q = sh.tokens                       # queries on this GPU (all of a sequence without CP)
    batch = q / (s / sh.cp) * model.heads / sh.tp      # (sequence, head) pairs
    rows = s / sh.cp
    elements = batch * rows * s
    drop = sh.dropout > 0
    fwd_bytes, bwd_bytes, kernels = SOFTMAX_BYTES[sh.attention]
    fwd = (batched_gemm_time(gpu, "bf16", rows, s, d_qk, batch)
           + batched_gemm_time(gpu, "bf16", rows, d_v, s, batch)
           + memory_time(gpu, elements * (fwd_bytes + (5 if drop else 0)), kernels + drop))
    bwd = (batched_gemm_time(gpu, "bf16", rows, s, d_v, batch)
           + batched_gemm_time(gpu, "bf16", s, d_v, rows, batch)
           + batched_gemm_time(gpu, "bf16", rows, d_qk, s, batch)
           + batched_gemm_time(gpu, "bf16", s, d_qk, rows, batch)
           + memory_time(gpu, elements * (bwd_bytes + (5 if drop else 0)), kernels + drop))
    return fwd, bwd


# ---------------------------------------------------------------------------------- embedding and output

@lru_cache(maxsize=1024)
def embedding_cost(gpu: GPU, model: Model, sh: Shard) -> BlockCost:
    """Input embedding lookup (first stage): memory-bound; a TP reduction of its output."""
    T, t = sh.tokens, sh.tp
    out = T * model.hidden * BF16 / (t if sh.sp else 1)
    tp_bytes = T * model.hidden * BF16 if t > 1 else 0.0
    fwd = PassCost(memory_time(gpu, 2 * out, 1), 0.0, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    bwd = PassCost(memory_time(gpu, 4 * out, 2), 0.0, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0)
    return BlockCost(fwd, bwd, None, 0.0)


@lru_cache(maxsize=1024)
def mtp_cost(gpu: GPU, model: Model, sh: Shard) -> BlockCost:
    """What a multi-token prediction module adds to its layer and its output head (DeepSeek-V3 report 2.2;
    Megatron-Core's MultiTokenPredictionLayer): the next tokens' embeddings looked up, both inputs normed,
    concatenated and projected from 2h to h (a GEMM split over TP), on the last stage."""
    T, t, h = sh.tokens, sh.tp, model.hidden
    split = t if sh.sp else 1
    g_fwd = gemm_time(gpu, sh.precision, T, h / t, 2 * h)
    g_bwd = gemm_time(gpu, sh.precision, T, 2 * h, h / t) + gemm_time(gpu, sh.precision, 2 * h, h / t, T)
    act = T * h * BF16 / split                      # one h-wide activation
    k = 0 if sh.fused else 1
    moved = 2 * act + 2 * NORM_BYTES[model.norm][k] / BF16 * act + 4 * act      # lookup, two norms, concat
    kernels = 1 + 2 * NORM_KERNELS[model.norm][k] + 1
    flops = 2.0 * T * h / t * 2 * h
    tp_bytes = T * h * BF16 if t > 1 else 0.0
    fwd = PassCost(g_fwd + memory_time(gpu, moved, kernels), flops, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0,
                   0.0, g_fwd)
    bwd = PassCost(g_bwd + memory_time(gpu, 2 * moved, 2 * kernels), 2 * flops, 1 if t > 1 else 0, tp_bytes,
                   0.0, 0.0, 0.0, g_bwd)
    return BlockCost(fwd, bwd, None, 3 * flops)


@lru_cache(maxsize=1024)
def output_cost(gpu: GPU, model: Model, sh: Shard) -> BlockCost:
    """Final norm, output projection over the TP-split vocabulary and the cross-entropy loss (last stage)."""
    T, t, h = sh.tokens, sh.tp, model.hidden
    v = model.vocab / t
    # the output layer stays in BF16 under FP8 training (Transformer Engine recipes keep the first and last
    # layers in higher precision)
    g_fwd = gemm_time(gpu, "bf16", T, v, h)
    g_bwd = (gemm_time(gpu, "bf16", T, h, v) + gemm_time(gpu, "bf16", h, v, T)
             + memory_time(gpu, GRAD_ACCUMULATION_BYTES * h * v, 1))
    logits = T * v
    # cross-entropy in FP32 over the logits (bytes per logit: CROSS_ENTROPY) and the final norm
    kind = "eager" if not sh.fused else "fused" if sh.ce_fused else "vocab_parallel"
    fwd_bytes, bwd_bytes, fwd_kernels, bwd_kernels = CROSS_ENTROPY[kind]
    ce_fwd = memory_time(gpu, logits * fwd_bytes + 4 * h * T * BF16 / (t if sh.sp else 1), fwd_kernels)
    ce_bwd = memory_time(gpu, logits * bwd_bytes + 8 * h * T * BF16 / (t if sh.sp else 1), bwd_kernels)
    flops = 2.0 * T * v * h
    tp_bytes = T * h * BF16 if t > 1 else 0.0
    fwd = PassCost(g_fwd + ce_fwd, flops, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0, g_fwd)
    bwd = PassCost(g_bwd + ce_bwd, 2 * flops, 1 if t > 1 else 0, tp_bytes, 0.0, 0.0, 0.0, g_bwd)
    return BlockCost(fwd, bwd, None, 3 * flops)


def host_optimizer_time(gpu: GPU, params: float, grad_bytes: float) -> float:
    """Adam in host memory (optimizer offload: Megatron-Core's optimizer_cpu_offload, DeepSpeed
    ZeRO-Offload) over this GPU's shard of `params`: the gradients down and the BF16 weights back over the
    host link (each direction on its own, bucket by bucket: the larger of the two), and the step itself on the
    CPU, bound by its memory (the same 34 bytes per parameter as on the GPU)."""
    link = gpu.host_link_gb_s * 1e9
    return params * max(grad_bytes, BF16) / link + params * 34.0 / (gpu.host_memory_gb_s * 1e9)


def optimizer_time(gpu: GPU, params_on_gpu: float, shards: int) -> float:
    """Adam step over this GPU's shard: FP32 master weights, two moments, gradient in, BF16 weights out.

    Per parameter: read 4 (grad) + 12 (master, m, v), write 12 + 2 (BF16 copy), plus a read of the gradient
    for the global norm: about 34 bytes, all at HBM bandwidth.
    """
    return memory_time(gpu, 34.0 * params_on_gpu / max(1, shards), 4)
