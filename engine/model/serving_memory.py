"""Where a serving replica's GPU memory goes: weights, the iteration's activations, the runtime's reserve and
a paged K/V cache.

The weights are the model's parameters split over TP and PP (routed experts also over EP) at the job's
precision, the embeddings and output layer in BF16 (FP8 builds keep them so). Activations are one iteration's
working set at the token budget (`max_tokens_per_step`): the widest layer's intermediate tensors and the
sampled tokens' logits. The K/V cache gets `kv_cache_fraction` of what is left after the weights, the
activations and the runtime's reserve (TensorRT-LLM's `free_gpu_memory_fraction`, vLLM's share of
`gpu_memory_utilization`), and is paged: it is handed out in blocks of `BLOCK_TOKENS` tokens as a request's
context grows, so a replica holds as many requests as their contexts fit, not as many as their longest
possible context would.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.cluster import Cluster
from ..config.job import Job
from ..config.units import GB
from . import compute as cm
from . import memory as mem
from .kernels import BF16
from .serving_cost import WEIGHT_BYTES, kv_bytes_per_token, kv_dtype

BLOCK_TOKENS = 64          # tokens of one K/V block (TensorRT-LLM's default tokens_per_block; vLLM uses 16)


@dataclass(frozen=True)
class ServingMemory:
    """One GPU of a replica, in bytes."""

    capacity: float
    weights: float
    activations: float
    reserve: float
    kv_cache: float            # the K/V pool
    kv_per_token: float        # bytes a token of context takes in it
    kv_dtype: str

    @property
    def fits(self) -> bool:
        """The weights and activations fit, with room for at least one block of K/V."""
        return self.kv_cache >= self.kv_per_token * BLOCK_TOKENS

    @property
    def kv_tokens(self) -> int:
        """Tokens of context the K/V pool holds, whole blocks only."""
        if self.kv_per_token <= 0:
            return 0
        return int(self.kv_cache // (self.kv_per_token * BLOCK_TOKENS)) * BLOCK_TOKENS

    def batch_limit(self, length: float, max_batch: int) -> int:
        """Requests of a mean length (prompt and output) a replica runs at once: as many as the cache is sure
        to hold to their end (each wastes half a block on average), at most `max_batch`."""
        per_request = max(1.0, length) + BLOCK_TOKENS / 2
        return max(0, min(max_batch, int(self.kv_tokens // per_request)))

    def breakdown_gb(self) -> dict[str, float]:
        return {"weights": round(self.weights / GB, 2), "activations": round(self.activations / GB, 2),
                "kv_cache": round(self.kv_cache / GB, 2), "reserve": round(self.reserve / GB, 2)}


def weights_bytes(job: Job) -> float:
    """Bytes of parameters one GPU of a replica holds."""
    model = job.model
    dense, moe = cm.layer_kinds(model)
    params = (dense * cm.layer_params_per_gpu(model, False, job.tp, job.ep)
              + moe * cm.layer_params_per_gpu(model, True, job.tp, job.ep)) / job.pp
    embeddings = cm.embedding_params(model) / (job.tp * job.pp)
    return float(params * WEIGHT_BYTES[job.precision] + embeddings * BF16)


def activation_bytes(job: Job) -> float:
    """One iteration's working set at the token budget: the widest intermediate (QKV or the MLP's gated
    up-projection) and its input and output, in BF16, plus the logits of a budget's worth of sampled tokens
    capped at the batch (FP32)."""
    model, t, tokens = job.model, job.tp, job.max_tokens_per_step
    ffn = model.moe_ffn * (model.experts_per_token + model.shared_experts) if model.is_moe else model.ffn
    up = 2 if model.ffn_activation == "swiglu" else 1
    widest = max(model.heads * model.dim_head / t + cm.kv_width_per_rank(model, t), up * ffn / t)
    working = tokens * (widest + 2 * model.hidden) * BF16
    logits = min(tokens, job.max_batch) * model.vocab / t * 4
    return float(working + logits)


def serving_memory(cluster: Cluster, job: Job) -> ServingMemory:
    capacity = mem.capacity_bytes(cluster.gpu)
    weights = weights_bytes(job)
    activations = activation_bytes(job)
    reserve = mem.FRAMEWORK_RESERVE_BYTES
    free = capacity - weights - activations - reserve
    kv = max(0.0, free) * job.kv_cache_fraction
    return ServingMemory(capacity, weights, activations, reserve, kv, kv_bytes_per_token(job), kv_dtype(job))
