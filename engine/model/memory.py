"""Memory per GPU: weights, gradients, optimizer state (ZeRO 0-3), activations in flight, buffers, reserve.

Mixed-precision Adam as Megatron-LM runs it: BF16 weights (2 bytes per parameter), FP32 gradient accumulation
(4 bytes; Megatron turns it on for BF16), FP32 master weights and two moments (12 bytes). ZeRO-1 shards the
12 over the data-parallel (x context-parallel) group, ZeRO-2 also the gradients, ZeRO-3 also the weights.

Activations per layer per token (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", section 4, written out for any attention / MLP shape; no dropout, fused attention):
  norm inputs 2*2h, norm outputs 2*2h, Q 2*d_q, K and V 2*d_kv, attention output 2*h_attn,
  MLP: SwiGLU 2*2f (gate, up) + 2f (product), GELU 2f + 2f;
all split over TP, the norm terms only with sequence parallelism. For MHA with a 4h GELU MLP this is 34 h
(their sbh(34 + 5as/h) less the 5as/h term a fused attention kernel never stores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from ..config.catalog import GPU, Model
from ..config.units import GB, GiB
from .compute import attention_dims, kv_width_per_rank
from .kernels import BF16

# CUDA context, cuBLAS/cuDNN workspaces and NCCL channel buffers: about 1.5 GB per process in practice
# (PyTorch issue discussions report 0.5-1 GB of context on H100, NCCL ~0.3-1 GB with many communicators).
FRAMEWORK_RESERVE_BYTES = 1.5 * GB
# The caching allocator cannot hand out every byte: fragmentation costs a few percent of what it manages
# (PyTorch memory snapshots of large training jobs typically show 3-8% reserved-but-unallocated).
FRAGMENTATION = 0.05
# Megatron's DDP gradient buckets and the distributed optimizer's all-gather staging (40M elements each).
COMM_BUCKET_BYTES = 2 * 40e6 * 4

Bytes = TypeVar("Bytes", float, np.ndarray)      # one GPU's bytes,
                                                 # or an array of them over the pipeline stages


def capacity_bytes(gpu: GPU) -> float:
    """Usable HBM: the catalog's '80 GB' is 80 GiB (nvidia-smi reports 81559 MiB on an H100 80GB)."""
    return gpu.hbm_gb * GiB


def activation_bytes_per_token(model: Model, moe: bool, tp: int, sp: bool, recompute: str,
                               fp8: bool = False, scores: float = 0.0, dropout: bool = False) -> float:
    """Bytes one layer keeps per token of a microbatch until its backward, on one GPU of the TP group.

    fp8 (FP8 training as DeepSeek-V3 runs it, report section 3.3.3): the inputs of FP8 GEMMs (attention
    output projection, the SwiGLU inputs, the dispatched expert inputs, the MLA latents) are cached in FP8,
    1 byte instead of 2; norm inputs on the residual stream stay BF16. With selective recomputation, MLA's
    up-projections (Q, K, V) are recomputed from the cached latents in the backward (section 3.2.3).

    Without a fused attention kernel, `scores` are the keys each query's score row holds (heads x keys on this
    GPU): the softmax output (2 bytes each) is kept for the backward, and with dropout its mask and output
    (1 + 2 bytes): Korthikanti's 5 a s / h term. Selective recomputation recomputes them instead. `dropout`
    also keeps the 1-byte masks of the two hidden dropouts.
    """
    g = 1.0 if fp8 else BF16                             # bytes of a cached GEMM input
    h = model.hidden
    d_qk, d_v, _ = attention_dims(model)
    kv_width = kv_width_per_rank(model, tp) * tp          # replicated KV heads count on every rank
    q = model.heads * d_qk
    attn_out = model.heads * d_v
    norm_in = 2 * h * BF16
    norm_out: float = 2 * h * BF16
    if recompute == "full":
        return h * BF16 / (tp if sp else 1)            # the layer input only
    if model.attention == "mla":
        extra = (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_dim) * g      # latent inputs
    else:
        extra = 0.0
    if model.attention == "mla" and recompute == "selective":
        attn = attn_out * g + extra                      # Q, K, V recomputed from the latents
    else:
        attn = (q + kv_width) * BF16 + attn_out * g + extra
    if moe:
        f = model.moe_ffn * (model.experts_per_token + model.shared_experts)
        dispatch = model.experts_per_token * h * g      # the routed copies of each token (expert inputs)
    else:
        f, dispatch = model.ffn, 0.0
    inner = 2 * f * g if model.ffn_activation == "swiglu" else f * g
    act_out: float = f * BF16
    if recompute == "selective":
        norm_out = 0.0       # recomputed from the norm inputs
        act_out = 0.0        # recomputed from the FFN inputs
    split_norm = tp if sp else 1
    masks = 2 * h * 1.0 if dropout else 0.0
    score_bytes = scores * (5.0 if dropout else 2.0) if recompute == "none" else 0.0
    return (norm_in + norm_out + masks) / split_norm + (attn + inner + act_out + dispatch) / tp + score_bytes


@dataclass(frozen=True)
class StageMemory(Generic[Bytes]):
    """What one GPU of a pipeline stage holds, in bytes (or, each field an array over the stages, what one GPU
    of each stage holds: stage_memory takes and gives either)."""

    weights: Bytes
    gradients: Bytes
    optimizer: Bytes
    activations: Bytes
    buffers: Bytes
    reserve: Bytes

    @property
    def total(self) -> Bytes:
        total: Bytes = (self.weights + self.gradients + self.optimizer + self.activations + self.buffers
                        + self.reserve)
        return total

    def stage(self: StageMemory[np.ndarray], i: int) -> StageMemory[float]:
        """Stage i's memory, of a StageMemory of arrays over the stages."""
        return StageMemory(float(self.weights[i]), float(self.gradients[i]), float(self.optimizer[i]),
                           float(self.activations[i]), float(self.buffers[i]), float(self.reserve[i]))

    def parts_gb(self: StageMemory[float]) -> dict[str, float]:
        return {k: round(v / GB, 2) for k, v in (("weights", self.weights), ("gradients", self.gradients),
                                                 ("optimizer", self.optimizer),
                                                 ("activations", self.activations), ("buffers", self.buffers),
                                                 ("reserve", self.reserve))}


OPTIMIZER_BYTES = 12.0      # per parameter: FP32 master weights and Adam's two moments


def stage_memory(*, params: Bytes, expert_params: Bytes, largest_layer_params: Bytes, zero: int,
                 dp_shards: int, expert_shards: int, activations: Bytes, transient: float | Bytes,
                 logits: Bytes, grad_bytes: float = 4.0,
                 optimizer_bytes: float = OPTIMIZER_BYTES) -> StageMemory[Bytes]:
    """Memory of one GPU: `params` are its (TP/PP/EP-sharded) parameters,
    of which `expert_params` are experts.

    dp_shards is the data-parallel (x CP) group the optimizer state is sharded over; expert parameters are
    sharded over their own, smaller group (expert_shards). `activations` are the bytes in flight under the
    schedule, `transient` the working set of the layer being computed (backward, recompute), `logits` the
    output layer's FP32 logits on the last stage; `grad_bytes` per gradient (FP32, or BF16 when gradients are
    kept and reduced in BF16); `optimizer_bytes` per parameter (0: the states are in host memory).
    """
    dense = params - expert_params

    def shard(n: Bytes, stage_min: int) -> Bytes:
        return dense / dp_shards + expert_params / expert_shards if zero >= stage_min else n

    weights = BF16 * (shard(params, 3))
    if zero >= 3:
        weights += 2 * BF16 * largest_layer_params      # gathered copies:
                                                        # current layer and the prefetched one
    grads = grad_bytes * shard(params, 2)
    if zero >= 2:
        grads += COMM_BUCKET_BYTES
    optimizer = optimizer_bytes * shard(params, 1)
    buffers = transient + logits + COMM_BUCKET_BYTES
    managed = weights + grads + optimizer + activations + buffers
    reserve = FRAMEWORK_RESERVE_BYTES + FRAGMENTATION * managed
    return StageMemory(weights, grads, optimizer, activations, buffers, reserve)
