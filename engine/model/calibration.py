"""The public calibration set: published training runs, small to large,
as scenarios with their published figure.

`engine/config/catalogs/calibration_runs.toml` holds the sources' tables as published (llm-foundry, NeMo, DGX
Cloud recipes, torchtitan, FlashAttention's GPT-3 runs, Megatron-Bridge). Each source's rows become scenarios
here, with the source's own setup (its cluster, its software stack: FSDP or Megatron's distributed optimizer,
FP8, overlap) written out once per source, and the figure the source publishes: tokens/s per GPU where it
gives them, else its TFLOP/s per GPU in its own FLOPs convention. `engine/config/catalogs/reference_runs.toml`
adds the Llama 3 and BLOOM runs. `clustertop validate` estimates every row and reports the error per row and
the mean absolute percentage error per source and overall.

A row the scenario format cannot express is left out with the reason (`SKIPPED`).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..config.catalog import GPU, Model
from ..config.fields import Context
from ..config.job import Job
from ..config.scenario import Scenario, parse

if TYPE_CHECKING:
    from .estimate import JobEstimate

CALIBRATION_FILE = "calibration_runs.toml"
REFERENCE_FILE = "reference_runs.toml"

# tokens/s per GPU, or TFLOP/s per GPU in a FLOPs convention (flops_per_token below)
TOKENS = "tokens_per_s_per_gpu"
TFLOPS_MODEL = "tflops_per_gpu_model"           # clustertop's model FLOPs: 6 N + causal attention
TFLOPS_MEGATRON = "tflops_per_gpu_megatron"     # Narayanan et al. SC21 eq. 3 (96 ... with full recomputation)
TFLOPS_NEMO = "tflops_per_gpu_nemo"             # NeMo's formulas: matmuls + full
                                                # (non-causal) attention 12 s h
ROW_TOLERANCE = 0.25        # a row further off than this is a miss (the target: no row beyond 25%)

MTP_FLOPS_SPLIT = 255e9     # FLOPs per token between DeepSeek-V3's count without MTP (249.8 G) and with it
                            # (260.0 G): Megatron's formula at seq 4096

SKIPPED = {
    "torchtitan_h100_500w_llama3_8b": "H100s with 96 GB HBM2e capped at 500 W: not a catalog GPU, and a "
                                      "power cap would need a figure no measurement here gives; fsdp_compile "
                                      "needs torch.compile",
    "torchtitan Llama3-8B 64 x A100": "torchtitan's op-level selective AC recomputes every other matmul: no "
                                      "recompute setting of ours says that",
    "megatron_bridge_2511 gb300": "GB300's catalog entry is not calibrated (GB200's kernel figures): its "
                                  "rows stay out of the set the constants were fitted on (as a check they "
                                  "come out -4% (8B), +6% (70B, FSDP with activations offloaded) and "
                                  "-14% (405B))",
    "gemm_h100_bf16_tflops": "a kernel table: it fits the GEMM model (engine/model/kernels.py), "
                             "it is not a run",
    "flash_attention2_tflops": "a kernel table: it fits the attention model (engine/model/kernels.py)",
}


@dataclass(frozen=True)
class Row:
    """One published run: the scenario that describes it and what was published."""

    source: str          # the table of calibration_runs.toml (or "llama3", "bloom")
    name: str
    scenario: dict[str, Any]
    published: float
    measure: str         # TOKENS or a TFLOPS_* convention
    fit: bool = False    # used to fit the efficiency constants (docs/performance-model.md 9); else held out
    tolerance: float = ROW_TOLERANCE


@cache
def catalog_tables(name: str) -> dict[str, Any]:
    """A TOML file of published runs in engine/config/catalogs/, loaded once."""
    with resources.files("clustertop.engine.config.catalogs").joinpath(name).open("rb") as f:
        return tomllib.load(f)


def tables() -> dict[str, Any]:
    return catalog_tables(CALIBRATION_FILE)


def records(table: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A table's rows as {column: value}."""
    for row in table["rows"]:
        yield dict(zip(table["columns"], row))


# ---- clusters and software stacks, one per source ----------------------------------------------------------

def _cluster(gpu: str, n: int, scale_out: str) -> dict[str, Any]:
    """Nodes of 8 GPUs on NVSwitch (fewer: part of one), one NIC per GPU, no oversubscription."""
    per_node = min(8, n)
    return {"gpu": gpu, "gpus": n, "gpus_per_node": per_node, "scale_up": "nvswitch", "scale_out": scale_out,
            "nics_per_node": per_node, "gpus_per_rack": 16 if per_node == 8 else per_node}


def _scenario(name: str, cluster: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """A run as a scenario: no faults, no stragglers (a benchmark measures the steady state)."""
    return {"name": name, "description": name, "cluster": cluster, "jobs": [{"name": "run", **job}],
}


DGX_H100 = ("h100-sxm-80gb", "ib-ndr-400g")
BRIDGE_GPUS = {"h100": "h100-sxm-80gb", "b200": "b200-sxm-180gb", "gb200": "gb200"}
DGX_A100 = ("a100-sxm-80gb", "ib-hdr-200g")


def _llm_foundry() -> Iterator[Row]:
    """MosaicML llm-foundry benchmarks: PyTorch FSDP (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2), no TP/PP,
    eager kernels; FSDP reduces gradients in BF16 (mixed_precision PURE) behind the backward and prefetches
    the parameters' all-gather. Attention: MPT's 2023 kernels (`attn_impl` "triton", the Triton FlashAttention
    that also takes ALiBi, or "flash", FlashAttention-1: the tables predate llm-foundry's FlashAttention-2
    support), both of the FA1 class ("flash1"). MosaicML's H100 nodes have 8 x 400G InfiniBand."""
    for r in records(tables()["llm_foundry"]):
        gpu, net = DGX_H100 if r["gpu"] == "h100" else DGX_A100
        zero = 2 if r["note"] == "SHARD_GRAD_OP" else 3
        job = {"model": f"mpt-{r['model']}", "seq_len": r["seq"], "global_batch": r["global_batch"],
               "micro_batch": r["micro_batch"], "tp": 1, "pp": 1, "dp": r["gpus"], "zero": zero,
               "recompute": "full" if r["ac"] else "none", "precision": r["precision"],
               "grad_reduce_dtype": "bf16", "attention_kernel": "flash1", "fused_kernels": False}
        name = f"mpt-{r['model']} {r['gpu']} {r['precision']} {r['gpus']} GPUs seq {r['seq']}"
        yield Row("llm_foundry", name, _scenario(name, _cluster(gpu, r["gpus"], net), job), r["tok_s_gpu"],
                  TOKENS)


_NEMO_MODELS = {"llama3-8b": "llama3.1-8b", "llama3-70b": "llama3.1-70b"}


def _megatron_job(model: str, r: dict[str, Any], precision: str, attention: str,
                  ce_fusion: bool = True) -> dict[str, Any]:
    """Megatron-Core as NeMo runs it: distributed optimizer (ZeRO-1), gradients reduced in BF16 behind the
    backward, parameters gathered ahead, TP communication overlapped, sequence parallelism with TP. Attention:
    Transformer Engine ran FlashAttention-2 on Hopper in the NeMo 24.03 container ("flash2"), cuDNN's fused
    attention (FA3 class) from the mid-2024 containers on ("flash3"). The loss: NeMo 1.x (the 24.03 and 24.07
    containers) ran Megatron-Core's vocab-parallel cross-entropy op by op (`cross_entropy_loss_fusion` came in
    Megatron-Core 0.7, off by default, and NeMo 1.x's configs leave it off); NeMo 2.0 and Megatron-Bridge
    (the DGX Cloud recipes, the 25.11 container) turn it on."""
    gpus = r["gpus"]
    tp, pp, cp = r.get("tp", 1), r.get("pp", 1), r.get("cp", 1)
    return {"model": _NEMO_MODELS.get(model, model), "seq_len": r["seq"], "global_batch": r["global_batch"],
            "micro_batch": r.get("micro_batch", 1), "tp": tp, "pp": pp, "cp": cp,
            "dp": gpus // (tp * pp * cp),
            "virtual_stages": r.get("vp", 1), "zero": 1, "recompute": "none", "precision": precision,
            "sequence_parallel": tp > 1, "grad_reduce_dtype": "bf16", "tp_comm_overlap": tp > 1,
            "attention_kernel": attention, "cross_entropy_fusion": ce_fusion}


def _nemo() -> Iterator[Row]:
    for r in records(tables()["nemo_2407_fp8"]):
        name = f"{r['model']} fp8 {r['gpus']} GPUs tp{r['tp']} pp{r['pp']} cp{r['cp']} vp{r['vp']}"
        job = _megatron_job(r["model"], r, "fp8", "flash3", ce_fusion=False)
        yield Row("nemo", name, _scenario(name, _cluster(*DGX_H100[:1], r["gpus"], DGX_H100[1]), job),
                  r["tok_s_gpu"], TOKENS)
    table = tables()["nemo_long_sequence_llama2_7b_fp8"]
    for r in records(table):
        run = {**r, "micro_batch": 1}
        name = f"llama2-7b fp8 seq {r['seq']} {r['gpus']} GPUs tp{r['tp']} pp{r['pp']} cp{r['cp']}"
        job = _megatron_job("llama2-7b", run, "fp8", "flash2", ce_fusion=False)
        yield Row("nemo", name, _scenario(name, _cluster(*DGX_H100[:1], r["gpus"], DGX_H100[1]), job),
                  r["tflops_cp"], TFLOPS_NEMO)
    bridge = [r for r in records(tables()["megatron_bridge_2511"]) if r["system"] in BRIDGE_GPUS]
    # (SKIPPED: GB300, not calibrated). The MoE rows come last, so that the dense rows keep their places.
    for r in sorted(bridge, key=lambda r: r["ep"] > 1):
        name = (f"{r['model']} {r['precision']} {r['system']} {r['gpus']} GPUs tp{r['tp']} pp{r['pp']} "
                f"cp{r['cp']}{' ep' + str(r['ep']) if r['ep'] > 1 else ''} (25.11)")
        job = _megatron_job(r["model"], r, "fp8" if r["precision"].startswith("fp8") else "bf16", "flash3")
        if r["ep"] > 1:      # Megatron-Core's rank order: experts next to TP, PP outermost
            job.update(ep=r["ep"], rank_order="tp-cp-ep-dp-pp")
            # with or without DeepSeek-V3's MTP module as each ran: the table's TFLOP/s per token is
            # Megatron's count with it (260.0 GFLOP at seq 4096) on B200, without it (249.8) on GB200, GB300
            job["mtp_layers"] = 1 if r["tflops"] * 1e12 / r["tok_s_gpu"] > MTP_FLOPS_SPLIT else 0
            # the recipes recompute MLA's up-projections (recompute_modules ["mla_up_proj"])
            job["recompute"] = "selective"
        if r["fsdp"]:
            job["zero"] = 3
            if r["system"] in ("gb200", "gb300"):      # FSDP on Grace parts offloads activations over
                job["offload"] = "activations"         # NVLink-C2C (without it: 329 GB of 186)
        cluster = _cluster(BRIDGE_GPUS[r["system"]], r["gpus"], DGX_H100[1])
        if r["system"] == "gb200":       # one NVLink domain per rack: 64 of an NVL72's GPUs in use
            cluster.update(scale_up="nvl72", gpus_per_node=min(r["gpus"], 64),
                           nics_per_node=min(r["gpus"], 64), gpus_per_rack=min(r["gpus"], 64))
        yield Row("nemo", name, _scenario(name, cluster, job), r["tok_s_gpu"], TOKENS)


def _dgxc() -> Iterator[Row]:
    for r in records(tables()["dgxc"]):
        name = f"{r['model']} {r['precision']} {r['gpus']} GPUs tp{r['tp']} cp{r['cp']}"
        job = _megatron_job(r["model"], r, r["precision"], "flash3")
        yield Row("dgxc", name, _scenario(name, _cluster(*DGX_H100[:1], r["gpus"], DGX_H100[1]), job),
                  r["tok_s_gpu"], TOKENS)


# torchtitan docs/performance.md, 64 x A100 80GB (the table's comment): FSDP (gradients reduced in FP32),
# PyTorch's SDPA (FlashAttention-2), eager (not compiled: the norms, rotary and SwiGLU run op by op), local
# batch per GPU, default seq 8192 (Llama 3) and 4096 (Llama 2). The
# Llama3-8B row's "selective" AC recomputes every other matmul: no recompute setting says that (SKIPPED).
_TORCHTITAN_A100 = (("llama2-13b", 4096, 2, "none", 2162.0), ("llama3.1-70b", 8192, 1, "full", 331.0))


def _torchtitan() -> Iterator[Row]:
    for model, seq, local, ac, tok in _TORCHTITAN_A100:
        name = f"{model} a100 64 GPUs seq {seq} AC {ac}"
        job = {"model": model, "seq_len": seq, "global_batch": 64 * local, "micro_batch": local, "tp": 1,
               "pp": 1, "dp": 64, "zero": 3, "recompute": ac, "precision": "bf16",
               "grad_reduce_dtype": "fp32", "attention_kernel": "flash2", "fused_kernels": False}
        yield Row("torchtitan", name, _scenario(name, _cluster(DGX_A100[0], 64, DGX_A100[1]), job), tok,
                  TOKENS)


def _flash_attention() -> Iterator[Row]:
    """FlashAttention's GPT-3 runs: 8 A100, seq 2048, data parallel (batch of 0.5M or 1M tokens), no AC."""
    for r in records({"columns": tables()["flash_attention_gpt3_a100"]["columns"],
                       "rows": tables()["flash_attention_gpt3_a100"]["rows"]}):
        sequences = 256 if r["batch_tokens"] < 750_000 else 512
        name = f"{r['model']} a100 8 GPUs"
        job = {"model": r["model"], "seq_len": 2048, "global_batch": sequences, "micro_batch": "auto",
               "tp": 1, "pp": 1, "dp": 8, "zero": 1, "recompute": "none", "precision": "bf16"}
        yield Row("flash_attention", name, _scenario(name, _cluster(DGX_A100[0], 8, DGX_A100[1]), job),
                  r["tok_s_8gpu"] / 8, TOKENS)


def _references() -> Iterator[Row]:
    """The runs of reference_runs.toml (Llama 3 Table 4, BLOOM), with their own tolerance."""
    with resources.files("clustertop.engine.config.catalogs").joinpath(REFERENCE_FILE).open("rb") as f:
        runs = tomllib.load(f)["runs"]
    measures = {"model": TFLOPS_MODEL, "megatron": TFLOPS_MEGATRON}
    for run in runs:
        source = run["name"].split("-")[0]
        yield Row(source, run["name"], run["scenario"], float(run["published"]), measures[run["metric"]],
                  True, float(run["tolerance"]))


SOURCES: dict[str, Callable[[], Iterator[Row]]] = {
    "llm_foundry": _llm_foundry, "nemo": _nemo, "dgxc": _dgxc, "torchtitan": _torchtitan,
    "flash_attention": _flash_attention, "references": _references,
}


@cache
def rows() -> tuple[Row, ...]:
    """Every row, in source order. Within each calibration source, every other row (the first, the third, ...)
    is a fitting row; the Llama 3 and BLOOM rows fitted the model before and count as fitting rows too."""
    out = []
    for name, make in SOURCES.items():
        for i, row in enumerate(make()):
            fit = i % 2 == 0
            out.append(row if name == "references" else dataclasses.replace(row, fit=fit))
    return tuple(out)


# ---- FLOPs conventions -------------------------------------------------------------------------------------

def megatron_flops_per_step(job: Job, recompute: str) -> float:
    """Narayanan et al. (SC21) eq. 3: 72 (or 96 with full recomputation) B s l h^2
    (1 + s/6h + V/(12|16) l h)."""
    m = job.model
    b, s, l, h, v = job.global_batch, job.seq_len, m.layers, m.hidden, m.vocab
    if recompute == "full":
        return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


def nemo_flops_per_token(model: Model, seq: int) -> float:
    """NeMo's count (nemo/utils/flops_formulas.py): per layer 12 h^2 (1 + kv/heads) for Q, K, V and the output
    projection, 18 h f (gated) or 12 h f for the MLP, 12 s h for attention (full, not causal), and 6 V h."""
    h, f, layers = model.hidden, model.ffn, model.layers
    mlp = 18 * h * f if model.ffn_activation == "swiglu" else 12 * h * f
    per_layer = 12 * h * h * (1 + model.kv_heads / model.heads) + mlp + 12 * seq * h
    return layers * per_layer + 6 * model.vocab * h


# ---- predictions -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    row: Row
    predicted: float | None
    estimate: JobEstimate
    memory_note: str = ""          # the model's memory verdict when it differs from the run's (which ran)

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.row.published - 1.0


def scenario(row: Row) -> Scenario:
    """A row's scenario, validated like a scenario file."""
    file = REFERENCE_FILE if row.source in ("llama3", "bloom") else \
        "serving_runs.toml" if row.source.startswith("trtllm") else CALIBRATION_FILE
    return parse(row.scenario, Context(f"engine/config/catalogs/{file}: {row.name}"), file)


def predict(row: Row, gpu_overrides: dict[str, GPU] | None = None) -> Prediction:
    """Estimate a row's run and put it in the row's measure. A run that was measured fits in memory: when the
    memory model says it does not, its speed is still predicted (with room enough) and the verdict noted."""
    from .estimate import estimate_job

    s = scenario(row)
    if gpu_overrides and s.cluster.gpu.name in gpu_overrides:
        s = dataclasses.replace(s, cluster=dataclasses.replace(s.cluster,
                                                               gpu=gpu_overrides[s.cluster.gpu.name]))
    job = s.jobs[0]
    est = estimate_job(s, job, plan=False, hints=False)
    note = ""
    if not est.fits:
        note = f"the memory model says {est.memory_gb_per_gpu:.1f} of {est.capacity_gb:.1f} GB: out of memory"
        roomy = dataclasses.replace(s.cluster.gpu, hbm_gb=s.cluster.gpu.hbm_gb * 4)
        s = dataclasses.replace(s, cluster=dataclasses.replace(s.cluster, gpu=roomy))
        est = estimate_job(s, job, plan=False, hints=False)
    return Prediction(row, measure_of(row.measure, est), est, note)


def measure_of(measure: str, est: JobEstimate) -> float | None:
    """The estimate in a row's measure."""
    if est.kind == "inference":
        from .serving_calibration import measure_of as serving_measure
        return serving_measure(measure, est)
    if not est.fits or est.tokens_per_s is None:
        return None
    job = est.job
    if measure == TOKENS:
        return est.tokens_per_s / job.gpus
    if measure == TFLOPS_NEMO:
        return nemo_flops_per_token(job.model, job.seq_len) * est.tokens_per_s / job.gpus / 1e12
    if measure == TFLOPS_MODEL:
        return est.model_tflops_per_gpu
    if measure == TFLOPS_MEGATRON:
        assert est.step_time_s is not None           # an estimate that fits has a step time
        return megatron_flops_per_step(job, str(job.recompute)) / est.step_time_s / job.gpus / 1e12
    raise ValueError(f"unknown measure {measure!r}")
