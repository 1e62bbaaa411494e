"""A [[jobs]] table of a scenario: the typed Job (a training run or a served model, its layout and software
stack) and its checks against the cluster it runs on."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from . import catalog
from .catalog import Model
from .cluster import MAX_GPUS, Cluster
from .errors import quote
from .fields import Context, Field, Sections, catalog_entry, check_table_memo, optional
from .geometry import RANK_ORDERS

MAX_PIPELINE_STAGES = 16_384   # each stage is costed on its own (Llama 3 405B ran 16)
# A served request's time outside the engine, in its TTFT: the HTTP hop, the tokenizer and the first token's
# detokenizing (Triton's ensemble around TensorRT-LLM). FITTED on TensorRT-LLM's online TTFT fitting rows
# (docs/performance-model.md 12); 0 for an engine measured directly (trtllm-bench).
FRONTEND_LATENCY_MS = 3.5


@dataclass(frozen=True)
class Job:
    name: str
    model: Model
    seq_len: int
    global_batch: int
    micro_batch: int | str       # int or "auto"
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    virtual_stages: int | str    # int or "auto"
    recompute: str               # "none" | "selective" | "full" | "auto"
    precision: str               # "bf16" | "fp8"
    zero: int
    schedule: str                # "1f1b" | "gpipe"  (1f1b with virtual_stages > 1 is interleaved 1F1B)
    sequence_parallel: bool
    first_gpu: int
    gpus: int
    kind: str = "training"       # "training" | "inference"
    request_rate: float | str = 0.0   # inference: requests per second arriving at the whole job, or "max":
                                      #   every request queued at once (an offline throughput benchmark)
    prompt_tokens: int = 0       # inference: mean prompt length
    output_tokens: int = 0       # inference: mean generated tokens per request
    max_batch: int = 0           # inference: sequences one replica runs at once (in-flight batching)
    max_tokens_per_step: int = 8192   # inference: tokens one iteration packs (decode tokens + prefill chunks)
    kv_cache_fraction: float = 0.90   # inference: share of the memory left after weights and activations
                                      #   that the paged K/V cache takes
    kv_cache_dtype: str = "auto"      # inference: "fp8" | "bf16" | "auto" (as the weights)
    length_spread: float = 0.7        # inference: coefficient of variation of prompt and output lengths
                                      #   (0: every request the same, as benchmarks run)
    requests: int = 0                 # inference: a benchmark of this many requests, measured whole
                                      #   (0: the steady state)
    frontend_latency_ms: float = FRONTEND_LATENCY_MS   # inference: the request's path outside the engine
                                      #   (HTTP, tokenizer, the first token's detokenizing), in every TTFT
    # The software stack (docs/performance-model.md "Software stack");
    # the defaults are Megatron-LM's current ones
    attention_kernel: str = "auto"       # "flash3" (FA3 / cuDNN, Hopper+) | "flash2" | "flash1" |
                                         # "fused_softmax" | "unfused" | "auto"
    dropout: float = 0.0                 # hidden and attention dropout probability (0: none, as Llama trains)
    offload: str = "none"                # to host memory over the host link: "optimizer" (its states, Adam on
                                         # the CPU), "activations" (all but the layers in flight) or "none"
    cross_entropy_fusion: bool = True    # the loss over the vocabulary in one fused kernel (Megatron-Core's
                                         # cross_entropy_loss_fusion; else its vocab-parallel loss op by op)
    fused_kernels: bool = True           # norms, activations, rotary fused (Megatron, TE, compile);
                                         # else eager
    overlap_p2p_comm: bool = True        # pipeline sends behind compute, interleaved schedules only (else,
                                         # and without virtual stages, the sender waits for them)
    overlap_grad_reduce: bool = True     # DP gradient reduction in buckets behind the backward
                                         # (else after it)
    overlap_param_gather: bool = True    # parameter all-gather (ZeRO) ahead of the forward (else exposed)
    tp_comm_overlap: bool = False        # TP collectives overlapped with the GEMMs (Transformer Engine)
    grad_reduce_dtype: str = "fp32"      # the data type gradients are reduced in: "fp32" | "bf16"
    rank_order: str = "tp-cp-pp-dp"      # where ranks sit, innermost first (engine/config/geometry.py):
                                         # Llama 3's order, or Megatron-Core's "tp-cp-ep-dp-pp"
    ep_dispatch: str = "alltoall"        # MoE token dispatch: "alltoall" (NCCL, a copy per routed expert)
                                         # or "deepep" (DeepEP: one copy per destination node over the
                                         # network, forwarded inside it over NVLink)
    expert_gemm: str = "per_expert"      # an MoE layer's local experts: a GEMM kernel each (Transformer
                                         # Engine's GroupedLinear, cuBLAS per expert) or "grouped": one
                                         # kernel for all (DeepGEMM, CUTLASS grouped GEMM, torch._grouped_mm)

    @property
    def is_inference(self) -> bool:
        return self.kind == "inference"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


JOB_SPEC: dict[str, Field] = {
    "name": optional("str", None),
    "model": Field("any", doc="a catalog model name or an inline [jobs.model] table"),
    "kind": optional("str", "training", choices=("training", "inference")),
    "seq_len": optional("int", None, positive=True, high=10_000_000,
                        doc="an integer (required for training)"),
    "global_batch": optional("int", None, positive=True, high=100_000_000,
                             doc="an integer (required for training)"),
    "request_rate": optional("float", None, positive=True, high=1e9, auto=True, word="max"),
    "prompt_tokens": optional("int", 1024, positive=True, high=10_000_000),
    "output_tokens": optional("int", 256, positive=True, high=10_000_000),
    "max_batch": optional("int", 256, positive=True, high=1_000_000),
    "max_tokens_per_step": optional("int", None, positive=True, high=10_000_000),
    "kv_cache_fraction": optional("float", None, positive=True, high=1.0),
    "kv_cache_dtype": optional("str", None, choices=("auto", "fp8", "bf16")),
    "length_spread": optional("float", None, low=0.0, high=4.0),
    "requests": optional("int", None, positive=True, high=10_000_000),
    "frontend_latency_ms": optional("float", None, low=0.0, high=60_000.0),
    "micro_batch": optional("int", 1, positive=True, high=100_000, auto=True),
    "tp": optional("int", 1, positive=True, high=MAX_GPUS),
    "cp": optional("int", 1, positive=True, high=MAX_GPUS),
    "pp": optional("int", 1, positive=True, high=MAX_PIPELINE_STAGES),
    "dp": optional("int", None, positive=True, high=MAX_GPUS),
    "ep": optional("int", 1, positive=True, high=MAX_GPUS),
    "virtual_stages": optional("int", 1, positive=True, high=10_000, auto=True),
    "recompute": optional("str", "none", choices=("none", "selective", "full"), auto=True),
    "precision": optional("str", "bf16", choices=("bf16", "fp8")),
    "zero": optional("int", 1, low=0, high=3),
    "offload": optional("str", "none", choices=("none", "optimizer", "activations")),
    "schedule": optional("str", "1f1b", choices=("1f1b", "gpipe", "dualpipe")),
    "sequence_parallel": optional("bool", True),
    "first_gpu": optional("int", None, low=0, high=MAX_GPUS),
    "gpus": optional("int", None, positive=True, high=MAX_GPUS),
    "attention_kernel": optional("str", "auto", choices=("auto", "flash1", "flash2", "flash3",
                                                          "fused_softmax", "unfused")),
    "dropout": optional("float", 0.0, low=0.0, high=0.9),
    "fused_kernels": optional("bool", True),
    "cross_entropy_fusion": optional("bool", True),
    "overlap_p2p_comm": optional("bool", True),
    "overlap_grad_reduce": optional("bool", True),
    "overlap_param_gather": optional("bool", True),
    "tp_comm_overlap": optional("bool", False),
    "grad_reduce_dtype": optional("str", "fp32", choices=("fp32", "bf16")),
    "rank_order": optional("str", "tp-cp-pp-dp", choices=tuple(RANK_ORDERS)),
    "ep_dispatch": optional("str", "alltoall", choices=("alltoall", "deepep")),
    "expert_gemm": optional("str", "per_expert", choices=("per_expert", "grouped")),
    "mtp_layers": optional("int", None, low=0, high=16,
                           doc="the model's multi-token prediction modules trained (default: the model's)"),
}


# keys only an inference job takes (a training job's are refused)
SERVING_KEYS = ("request_rate", "max_tokens_per_step", "kv_cache_fraction", "kv_cache_dtype", "length_spread",
                "requests", "frontend_latency_ms")


def check_job(ctx: Context, path: str, raw: Any, cluster: Cluster, next_gpu: int,
              sections: Sections | None = None) -> Job:
    """A [[jobs]] table checked against its cluster: the model, the layout and the GPUs it takes."""
    j = check_table_memo(sections, ctx, path, raw, JOB_SPEC)
    name = j["name"] or f"job{path[5:-1]}"
    model = _model(ctx, path, j["model"], name)
    if j["mtp_layers"] is not None and j["mtp_layers"] != model.mtp_layers:
        model = replace(model, mtp_layers=j["mtp_layers"])      # trained with or without them
    if j["kind"] == "inference":
        _inference_defaults(ctx, path, j)
    else:
        for key in ("seq_len", "global_batch"):
            if j[key] is None:
                raise ctx.error(f"{path}.{key}", "missing required key for a training job (an integer)")
        for key in SERVING_KEYS:
            if j[key] is not None:
                raise ctx.error(f"{path}.{key}", 'only inference jobs take requests; set kind = "inference"')
    first, dp, gpus = _placement(ctx, path, j, cluster, next_gpu)
    _check_layout(ctx, path, j, model, dp)
    _check_hardware(ctx, path, j, cluster)
    return Job(name=name, model=model, seq_len=j["seq_len"], global_batch=j["global_batch"],
               micro_batch=j["micro_batch"], tp=j["tp"], cp=j["cp"], pp=j["pp"], dp=dp, ep=j["ep"],
               virtual_stages=j["virtual_stages"], recompute=j["recompute"], precision=j["precision"],
               zero=j["zero"], schedule=j["schedule"], sequence_parallel=j["sequence_parallel"],
               offload=j["offload"],
               first_gpu=first, gpus=gpus, kind=j["kind"], request_rate=j["request_rate"] or 0.0,
               prompt_tokens=j["prompt_tokens"], output_tokens=j["output_tokens"], max_batch=j["max_batch"],
               max_tokens_per_step=j["max_tokens_per_step"] or 8192,
               kv_cache_fraction=j["kv_cache_fraction"] or 0.90, kv_cache_dtype=j["kv_cache_dtype"] or "auto",
               length_spread=0.7 if j["length_spread"] is None else j["length_spread"],
               requests=j["requests"] or 0,
               frontend_latency_ms=(FRONTEND_LATENCY_MS if j["frontend_latency_ms"] is None
                                    else j["frontend_latency_ms"]),
               attention_kernel=j["attention_kernel"], dropout=j["dropout"],
               overlap_p2p_comm=j["overlap_p2p_comm"], fused_kernels=j["fused_kernels"],
               cross_entropy_fusion=j["cross_entropy_fusion"],
               overlap_grad_reduce=j["overlap_grad_reduce"], overlap_param_gather=j["overlap_param_gather"],
               tp_comm_overlap=j["tp_comm_overlap"], grad_reduce_dtype=j["grad_reduce_dtype"],
               rank_order=j["rank_order"], ep_dispatch=j["ep_dispatch"],
               expert_gemm=j["expert_gemm"])


def _model(ctx: Context, path: str, raw: Any, name: str) -> Model:
    """A catalog model by name, or an inline [jobs.model] table."""
    if isinstance(raw, str):
        return catalog_entry(ctx, f"{path}.model", raw, catalog.models())
    if isinstance(raw, dict):
        return catalog.build_model(ctx, f"{path}.model", f"{name}-model", raw)
    raise ctx.error(f"{path}.model", "expected a catalog model name or an inline table of the model")


def _placement(ctx: Context, path: str, j: dict[str, Any], cluster: Cluster,
               next_gpu: int) -> tuple[int, int, int]:
    """(first GPU, dp, GPUs) of the job: dp derived from its GPUs or its GPUs from dp, inside the cluster."""
    tp, cp, pp = j["tp"], j["cp"], j["pp"]
    first = next_gpu if j["first_gpu"] is None else j["first_gpu"]
    per_replica = tp * cp * pp
    dp, gpus = j["dp"], j["gpus"]
    if dp is None:
        gpus = gpus or (cluster.gpus - first)
        if gpus % per_replica:
            raise ctx.error(f"{path}.tp", f"tp*cp*pp = {per_replica} does not divide the job's {gpus} GPUs; "
                            "expected dp = gpus / (tp*cp*pp) to be whole")
        dp = gpus // per_replica
    elif gpus is None:
        gpus = per_replica * dp
    elif per_replica * dp != gpus:
        raise ctx.error(f"{path}.dp", f"tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp} = {per_replica * dp} is not the "
                        f"job's {gpus} GPUs; expected them to be equal")
    if gpus <= 0:
        raise ctx.error(f"{path}.first_gpu", f"starts at GPU {first}: no GPU of the cluster is left for it")
    if first + gpus > cluster.gpus:
        raise ctx.error(f"{path}.dp" if j["dp"] else f"{path}.gpus",
                        f"the job needs {gpus:,} GPUs from GPU {first:,} but the cluster has "
                        f"{cluster.gpus:,}; expected a job that fits in the cluster")
    return first, dp, gpus


def _check_layout(ctx: Context, path: str, j: dict[str, Any], model: Model, dp: int) -> None:
    """The parallel layout against the model (heads, layers, experts) and the batch."""
    tp, cp, pp, ep = j["tp"], j["cp"], j["pp"], j["ep"]
    if model.heads % tp:
        raise ctx.error(f"{path}.tp", f"the model's {model.heads} attention heads are not divisible by "
                        f"tp = {tp}; expected tp to divide heads")
    if model.layers < pp:
        raise ctx.error(f"{path}.pp",
                        f"pp = {pp} exceeds the model's {model.layers} layers; expected pp <= layers")
    if j["seq_len"] % cp:
        raise ctx.error(f"{path}.cp", f"seq_len {j['seq_len']} is not divisible by cp = {cp}")
    if ep > 1:
        if not model.is_moe:
            raise ctx.error(f"{path}.ep",
                            f"ep = {ep} but {model.name} is dense; expected ep = 1 (or an MoE model)")
        if model.experts % ep:
            raise ctx.error(f"{path}.ep",
                            f"the model's {model.experts} experts are not divisible by ep = {ep}")
        if (dp * cp) % ep:
            raise ctx.error(f"{path}.ep", f"ep = {ep} must divide dp*cp = {dp * cp} (experts are sharded "
                            "across data-parallel ranks)")
    mb = j["micro_batch"]
    if j["kind"] == "training" and j["global_batch"] % dp:     # (a serving replica batches requests)
        raise ctx.error(f"{path}.global_batch", f"{j['global_batch']} sequences do not split evenly over "
                        f"dp = {dp}; expected a multiple of {dp}")
    if j["kind"] == "training" and mb != "auto" and j["global_batch"] % (dp * mb):
        raise ctx.error(f"{path}.global_batch", f"{j['global_batch']} is not divisible by dp*micro_batch = "
                        f"{dp}*{mb} = {dp * mb}; expected a multiple of {dp * mb}")
    v = j["virtual_stages"]
    if v != "auto" and v > 1:
        if pp == 1:
            raise ctx.error(f"{path}.virtual_stages",
                            "interleaving needs pp > 1; expected virtual_stages = 1")
        if model.layers < pp * v:
            raise ctx.error(f"{path}.virtual_stages", f"pp*virtual_stages = {pp * v} exceeds the model's "
                            f"{model.layers} layers")
        if j["schedule"] == "gpipe":
            raise ctx.error(f"{path}.virtual_stages", "interleaved stages need schedule = \"1f1b\"")


def _check_hardware(ctx: Context, path: str, j: dict[str, Any], cluster: Cluster) -> None:
    """Kernels and number formats the cluster's GPU has."""
    if j["attention_kernel"] == "flash3" and not cluster.gpu.flash3_tflops:
        raise ctx.error(f"{path}.attention_kernel", f"{cluster.gpu.name} has no FlashAttention-3 / cuDNN "
                        "fused attention figure (Hopper and newer); expected \"flash2\" or \"auto\"")
    if j["precision"] == "fp8" and not cluster.gpu.fp8_tflops:
        raise ctx.error(f"{path}.precision", f"{cluster.gpu.name} has no FP8 tensor cores; expected \"bf16\"")
    if j["kv_cache_dtype"] == "fp8" and not cluster.gpu.fp8_tflops:
        raise ctx.error(f"{path}.kv_cache_dtype", f"{cluster.gpu.name} has no FP8 support; expected \"bf16\"")


def _inference_defaults(ctx: Context, path: str, j: dict[str, Any]) -> None:
    """An inference job serves requests: its "sequence" is a prompt plus its output, one per replica slot."""
    if j["request_rate"] is None:
        raise ctx.error(f"{path}.request_rate", "missing required key for an inference job "
                        '(requests per second, a number, or "max" for an offline benchmark)')
    for key in ("cp", "virtual_stages"):
        if j[key] not in (1, None):
            raise ctx.error(f"{path}.{key}", f"inference jobs are modelled without {key}; expected 1")
    if j["seq_len"] is None:
        j["seq_len"] = j["prompt_tokens"] + j["output_tokens"]
    if j["global_batch"] is None:
        replicas = j["dp"] or 1
        j["global_batch"] = replicas * j["max_batch"]
    j["micro_batch"] = 1 if j["micro_batch"] == "auto" else j["micro_batch"]
    j["recompute"] = "none"
    j["zero"] = 0


def check_disjoint(ctx: Context, jobs: list[Job]) -> None:
    """Jobs hold disjoint GPU ranges: each overlaps at most its neighbour in GPU order (sorted: n log n)."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].first_gpu, i))
    for a, b in itertools.pairwise(order):
        first, other = sorted((a, b))
        if jobs[a].first_gpu + jobs[a].gpus > jobs[b].first_gpu:
            job, prev = jobs[other], jobs[first]
            raise ctx.error(f"jobs[{other}].first_gpu",
                            f"job {quote(job.name)} overlaps job {quote(prev.name)} "
                            f"(GPUs {prev.first_gpu}-{prev.first_gpu + prev.gpus - 1}); "
                            "expected disjoint GPU ranges")
