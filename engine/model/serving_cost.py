"""What one iteration of a serving engine costs on one replica (TP x PP GPUs), from first principles.

An in-flight batching engine (TensorRT-LLM, vLLM, SGLang) runs the whole model once per iteration over a
packed batch of tokens: one decode token for every running request and chunks of prompts being prefilled, up
to a token budget. Per layer, on each GPU of the replica:

- the GEMMs (QKV, output projection, the MLP or the experts a batch touches) at the batch's token count: at a
  few tokens they are bound by reading the weights from HBM, at thousands by the tensor cores
  (engine/model/kernels.py's tiled-GEMM model covers both); FP8 weights move half the bytes, at FP8 rate;
- decode attention: every running request's K/V cache is read once (paged attention: HBM-bound, the K/V
  precision's bytes per token), and a prompt chunk's attention over its prefix runs in the fused kernel;
- the memory-bound elementwise work (norms, residual adds, activation, rotary) over the batch;
- tensor parallelism: two all-reduces of the batch's activations per layer, a few hundred KB at most, so
  mostly latency (engine/model/collectives.py);
- MoE: the router, the experts the batch's tokens touch (their weights read once per iteration), the shared
  experts, and with expert parallelism the all-to-all that sends each token to its experts and back.

After the last layer the output projection runs for the tokens that are sampled (one per decode request and
one per prompt whose last chunk ran), and each iteration pays the engine's own fixed cost (scheduling,
sampling, launching the iteration's CUDA graph): `serving_overhead_us` of the GPU's catalog entry.

A replica's pipeline stages run one after another for an iteration (PP serves models too large for the TP
group's memory): an iteration's latency is the stages' sum, every layer and the hand-offs between the
stages. Engines that keep several micro-batches in flight through the stages get more throughput from PP than
this (the model's PP throughput is a lower bound; its latencies hold). The cost is linear in the decode
context (K/V read), which lets a serving simulation skip runs of identical iterations in closed form
(engine/model/inference.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.cluster import Cluster
from ..config.job import Job
from . import collectives as col
from . import compute as cm
from .kernels import BF16, attention_time, gemm_time, hbm_rate, memory_time

KV_BYTES = {"fp8": 1, "bf16": 2}
WEIGHT_BYTES = {"fp8": 1, "bf16": 2}


def kv_dtype(job: Job) -> str:
    """The K/V cache's precision: as set, else the weights' (an FP8 build keeps its K/V cache in FP8)."""
    return job.kv_cache_dtype if job.kv_cache_dtype != "auto" else job.precision


def kv_bytes_per_token(job: Job) -> float:
    """K/V cache bytes one token of context takes on one GPU of the replica (its stage's layers)."""
    return cm.kv_width_per_rank(job.model, job.tp) * KV_BYTES[kv_dtype(job)] * job.model.layers / job.pp


def touched_experts(experts: int, per_token: int, tokens: float) -> float:
    """Expected distinct experts `tokens` tokens route to, each choosing `per_token` of `experts` uniformly:
    E (1 - (1 - k/E)^T). A decode batch of 8 tokens on 128 experts of which each takes 8 touches ~50."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return float(experts * (1.0 - (1.0 - per_token / experts) ** tokens))


@dataclass(frozen=True)
class Iteration:
    """One iteration's batch on one replica."""

    decode: int               # decode tokens: one per running request
    context: float            # their K/V context, summed over the requests (tokens)
    prefill: int = 0          # prompt tokens of the chunks prefilled in this iteration
    prefill_attention: float = 0.0   # sum over those tokens of the keys each attends to (causal)
    sampled: int = 0          # tokens whose logits are computed (decode requests + prompts finishing)


class IterationCost:
    """Seconds of one iteration of `job` on `cluster`: `seconds(it)`, and the parts of it (`parts(it)`).

    Costs of the GEMM-bound parts depend on the batch's token count only and are cached by it; the decode
    attention is linear in the context: seconds(it) = fixed(tokens, sampled) + per_context * context
    + prefill attention."""

    def __init__(self, cluster: Cluster, job: Job) -> None:
        self.cluster, self.job, self.gpu = cluster, job, cluster.gpu
        model = job.model
        self.layers = model.layers                              # every stage's layers, run in turn
        self.dense_layers, self.moe_layers = cm.layer_kinds(model)
        d_qk, d_v, _ = cm.attention_dims(model)
        self.head_dim = (d_qk + d_v) / 2
        self.heads = model.heads / job.tp
        kv = kv_bytes_per_token(job)
        # decode attention per token of context: its K/V read (HBM) or its FLOPs, whichever is slower
        flops = 2.0 * self.heads * (d_qk + d_v) * model.layers
        read = job.pp * kv / hbm_rate(self.gpu)                 # each stage reads its layers' K/V in turn
        self.per_context = max(read, flops / (self.gpu.peak_tflops("bf16") * 1e12 * 0.5))
        self.overhead = self.gpu.serving_overhead_us * 1e-6
        self.attention = self.gpu.attention_kernel(job.attention_kernel)
        self._fixed: dict[tuple[int, int], float] = {}
        self.tp_route = col.route(cluster, job, ("tp",)) if job.tp > 1 else None
        self.pp_route = col.route(cluster, job, ("pp",)) if job.pp > 1 else None
        self.ep_route = col.route(cluster, job, ("ep",), "all2all") if model.is_moe and job.ep > 1 else None

    def seconds(self, it: Iteration) -> float:
        tokens = it.decode + it.prefill
        return (self.fixed(tokens, it.sampled) + self.per_context * it.context
                + self.prefill_attention(it.prefill_attention, it.prefill))

    def parts(self, it: Iteration) -> dict[str, float]:
        """The iteration's time by part (seconds): weights and GEMMs, attention, communication, the rest."""
        tokens = it.decode + it.prefill
        gemm, elementwise = self._layers(tokens)
        return {"gemm": gemm, "decode_attention": self.per_context * it.context,
                "prefill_attention": self.prefill_attention(it.prefill_attention, it.prefill),
                "elementwise": elementwise, "communication": self._communication(tokens),
                "output": self._output(it.sampled), "overhead": self.overhead}

    def fixed(self, tokens: int, sampled: int) -> float:
        """Everything but attention: the layers' GEMMs and elementwise work, the collectives, the output
        layer over the sampled tokens, the engine's overhead. Cached by the batch's size (bucketed)."""
        if tokens <= 0:
            return 0.0
        key = (_bucket(tokens), _bucket(sampled))
        found = self._fixed.get(key)
        if found is None:
            gemm, elementwise = self._layers(key[0])
            found = self._fixed[key] = (gemm + elementwise + self._communication(key[0])
                                        + self._output(key[1]) + self.overhead)
        return found

    def prefill_attention(self, work: float, tokens: int) -> float:
        """Causal attention of prompt chunks over their prefixes in the fused kernel: `work` is the sum over
        the chunks' tokens of the keys each sees (a whole prompt of s tokens: s^2 / 2)."""
        if work <= 0 or tokens <= 0:
            return 0.0
        flops = 2.0 * work * self.heads * 2 * self.head_dim          # QK^T and PV per layer
        return self.layers * attention_time(self.gpu, self.attention, flops, 2.0 * work / tokens, 1,
                                            self.head_dim, backward=False)

    # ---- the parts ---------------------------------------------------------------------------------------

    def _layers(self, tokens: float) -> tuple[float, float]:
        """(GEMMs, elementwise) seconds of a stage's layers over `tokens` tokens."""
        gemm = elementwise = 0.0
        for n, moe in ((self.dense_layers, False), (self.moe_layers, True)):
            if n <= 0:
                continue
            g = sum(gemm_time(self.gpu, self.job.precision, m, nn, k, c)
                    for m, nn, k, c in _gemms(self.job, moe, tokens))
            gemm += n * g
            nbytes = _elementwise_bytes(self.job, moe, tokens)
            elementwise += n * memory_time(self.gpu, nbytes, SERVING_KERNELS)
        return gemm, elementwise

    def _communication(self, tokens: float) -> float:
        job, model = self.job, self.job.model
        t = 0.0
        if self.tp_route is not None:
            t += 2 * self.layers * self._allreduce(tokens * model.hidden * BF16)
        if self.pp_route is not None:
            hop = col.p2p(self.cluster, self.pp_route, tokens * model.hidden * BF16).time_s
            t += (job.pp - 1) * hop
        if self.ep_route is not None:
            moved = tokens * model.experts_per_token * model.hidden * BF16
            t += 2 * self.moe_layers * col.all_to_all(self.cluster, self.ep_route, moved).time_s
        return t

    def _allreduce(self, nbytes: float) -> float:
        """A TP all-reduce of a batch's activations. Inside a scale-up domain serving engines use a one-shot
        kernel for the small buffers of decode (TensorRT-LLM's custom all-reduce, vLLM's and SGLang's): each
        GPU reads its peers' buffers over the links and sums them, one step of latency; for larger buffers a
        two-shot one (each GPU reduces its share, then gathers the others'); across nodes NCCL's
        (engine/model/collectives.py); whichever is fastest."""
        assert self.tp_route is not None
        nccl = col.allreduce(self.cluster, self.tp_route, nbytes).time_s
        if self.tp_route.k > 1:
            return nccl
        link, n = self.cluster.node_link, self.job.tp
        alpha, bw = link.latency_us * 1e-6, link.gb_s * 1e9
        one_shot = alpha + (n - 1) * nbytes / bw                   # read every peer's whole buffer
        two_shot = 2 * alpha + 2 * (n - 1) / n * nbytes / bw       # reduce-scatter, then all-gather
        return min(one_shot, two_shot, nccl)

    def _output(self, sampled: float) -> float:
        """The final norm and the output projection (vocab split over TP) for the sampled tokens, and the
        logits' read by the sampler, on the last stage."""
        if sampled <= 0:
            return 0.0
        m, t = self.job.model, self.job.tp
        g = gemm_time(self.gpu, "bf16", sampled, m.vocab / t, m.hidden)
        return g + memory_time(self.gpu, sampled * m.vocab / t * 4, 2)


def _gemms(job: Job, moe: bool, tokens: float) -> list[tuple[float, float, float, float]]:
    """A layer's GEMMs (m, n, k, count) on one GPU over a batch of `tokens` (engine/model/compute.py's), with
    the experts the batch touches: each of the EP group's ranks gets T x k / ep copies of the group's T x ep
    tokens on average, spread over the local experts those tokens touch; each touched expert reads its
    weights once."""
    model = job.model
    touched = None
    if moe:
        group = touched_experts(model.experts, model.experts_per_token, tokens * job.ep)
        touched = min(model.experts / job.ep, max(1.0, group / job.ep))
    return cm.layer_gemms(model, moe, tokens, job.tp, job.ep, touched)


# Memory-bound kernels of a layer in a serving engine: the two fused residual-add + norms, the MLP's
# activation (or the experts' routing), the rotary embedding with the K/V cache write, and the attention
# kernel's own cost.
SERVING_KERNELS = 5
# Bytes per element they move: a fused add + norm reads the residual and the input and writes both (4 + 6),
# the activation reads the gate and up halves and writes their product (6 per FFN element), rotary reads and
# writes Q and K in place (4).
ADD_NORM_BYTES = 10.0
ACTIVATION_BYTES = 6.0
ROTARY_BYTES = 4.0


def _elementwise_bytes(job: Job, moe: bool, tokens: float) -> float:
    """Bytes one layer's memory-bound kernels move over a batch of `tokens`, on one GPU."""
    model, t = job.model, job.tp
    ffn = model.moe_ffn * (model.experts_per_token + model.shared_experts) if moe else model.ffn
    d_qk, _, _ = cm.attention_dims(model)
    rotary = (ROTARY_BYTES * (model.heads * d_qk / t + cm.kv_width_per_rank(model, t) / 2)
              if model.rotary else 0.0)
    per_token = 2 * ADD_NORM_BYTES * model.hidden + ACTIVATION_BYTES * ffn / t + rotary
    if moe:
        per_token += 4 * model.experts_per_token * model.hidden * BF16        # permute and unpermute
    return per_token * tokens


def _bucket(x: float) -> int:
    """A token count rounded to 1/32 of its power of two, so costs of nearby batch sizes share a cache entry
    (within 3%)."""
    if x <= 64:
        return max(0, round(x))
    step = 2 ** max(0, int(math.log2(x)) - 5)
    return int(round(x / step) * step)
