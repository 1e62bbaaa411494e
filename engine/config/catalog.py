"""The catalogs: TOML data in engine/config/catalogs/ (GPUs, fabrics, models, fault causes), loaded once into
typed objects."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from .fields import Context, Field, check_table, optional
from .frozen import hash_once, state_without_hash


@dataclass(frozen=True)
class GPU:
    __hash__ = hash_once              # (hashed again at every cache lookup otherwise)
    __getstate__ = state_without_hash

    name: str
    bf16_tflops: float
    hbm_gb: float
    hbm_tb_s: float
    scale_up_link: str           # fabric name of its scale-up links (NVLink generation, xGMI, ICI,
                                 # NeuronLink...)
    tdp_w: float
    idle_w: float
    memory_bound_w: float
    fp8_tflops: float | None = None
    scale_up: str = "nvswitch"   # its scale-up domain as built: the default of a scenario's cluster.scale_up
    scale_up_domain: int = 8     # the most GPUs one scale-up domain joins (NVL72: 72; a TPU v5p pod: 8,960)
    source: str = ""
    # Kernel parameters of the performance model (engine/model/kernels.py); each value in gpus.toml names the
    # measurement it comes from. Defaults are the H100 figures.
    sms: int = 132                        # streaming multiprocessors (GEMM tiles run on them in waves)
    gemm_efficiency: float = 0.71         # sustained fraction of dense BF16 peak in a GEMM's main loop
    fp8_gemm_efficiency: float = 0.66     # the same for FP8 GEMMs, as a fraction of the FP8 peak
    gemm_tile: tuple[int, int] = (64, 128)   # output tile of one SM (fitted to the measured H100 GEMM table)
    gemm_k0: float = 128.0                # a tile's fixed prologue/epilogue, in units of k
    gemm_split_k_min: int = 512           # split-K parts are at least this long
    flash2_tflops: float = 333.0          # FlashAttention-2 plateau, causal (fwd + bwd,
                                          # FA2's FLOPs convention)
    flash2_full_tflops: float = 331.0     # the same without the causal mask
    flash3_tflops: float = 490.0          # FA3 / cuDNN fused attention (Hopper and newer); 0: not available
    flash3_full_tflops: float = 490.0
    flash1_share: float = 0.40            # FlashAttention-1 and Triton's FlashAttention (2022-23 stacks:
                                          # MPT's attn_impl "flash" and "triton") as a share of FA2's rate
                                          # (FITTED per GPU: gpus.toml; on other GPUs as on the H100)
    hbm_efficiency: float = 0.80          # fraction of HBM bandwidth reached by elementwise kernels
    host_link_gb_s: float = 55.0          # GPU <-> host memory per direction (PCIe Gen5 x16 as copies reach
                                          # it; Gen4 and NVLink-C2C in gpus.toml): offload (job `offload`)
    host_memory_gb_s: float = 75.0        # the host memory bandwidth one GPU's share of the CPUs reaches (two
                                          # sockets of 8 DDR5 channels, ~300 GB/s each, for 8 GPUs)
    gemm_overlap: float = 0.6             # share of the shorter of a GEMM's weight stream and main loop
                                          # hidden under the longer (engine/model/kernels.py)
    kernel_overhead_us: float = 4.0       # a kernel's fixed cost in a stream of kernels (ramp-up, tail)
    serving_overhead_us: float = 100.0    # a serving engine's fixed cost per iteration (scheduling,
                                          # sampling, launching the iteration's CUDA graph): serving_cost.py
    server_overhead_w: float | None = None   # host, NICs, fans and PSU losses per GPU (None:
                                             # scaled from H100)

    def server_overhead(self) -> float:
        """Watts of server overhead per GPU: the catalog value,
        or 575 W scaled by TDP from the H100 figure."""
        return self.server_overhead_w if self.server_overhead_w is not None else 575.0 * self.tdp_w / 700.0

    def gemm_peak_tflops(self, precision: str) -> float:
        """Sustained GEMM throughput for large shapes: peak times the measured GEMM efficiency."""
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops * self.fp8_gemm_efficiency
        return self.bf16_tflops * self.gemm_efficiency

    def attention_kernel(self, wanted: str) -> str:
        """The fused attention kernel a job runs: "flash1" when asked; "flash3" where the GPU has it (asked or
        "auto"), else "flash2"."""
        if wanted in ("flash1", "flash2") or not self.flash3_tflops:
            return wanted if wanted == "flash1" else "flash2"
        return "flash3"

    def attention_plateau(self, kernel: str, causal: bool) -> float:
        """TF/s a fused attention kernel reaches on long sequences (fwd + bwd, FA2's FLOPs convention).
        FlashAttention-1 and the Triton FlashAttention kernel ("flash1") reach `flash1_share` of FA2's."""
        chosen = self.attention_kernel(kernel)
        if chosen == "flash3":
            return self.flash3_tflops if causal else self.flash3_full_tflops
        fa2 = self.flash2_tflops if causal else self.flash2_full_tflops
        return fa2 * self.flash1_share if chosen == "flash1" else fa2

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for the precision; FP8 falls back to BF16 on GPUs without FP8 tensor cores."""
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops


@dataclass(frozen=True)
class Fabric:
    __hash__ = hash_once              # (hashed again at every cache lookup otherwise)
    __getstate__ = state_without_hash

    name: str
    kind: str                    # SCALE_UP_KINDS (inside a scale-up domain) or SCALE_OUT_KINDS (NICs)
    gb_s: float                  # line rate per direction, per GPU (scale-up, all its links) or per NIC
                                 # (scale-out)
    busbw_gb_s: float            # all-reduce bus bandwidth over all those links (NCCL's where measured)
    latency_us: float            # a collective step's latency (alpha)
    nvls_busbw_gb_s: float | None = None
    source: str = ""
    alltoall_efficiency: float = 1.0   # all-to-all bus bandwidth as a fraction of busbw_gb_s
    links: int = 1               # links the GPU's gb_s is spread over (mesh: one per peer; torus:
                                 # one per neighbour)
    hop_latency_us: float = 0.0  # a torus: latency of each hop beyond the first

    @property
    def link_busbw_gb_s(self) -> float:
        """Bus bandwidth of one of its links (a mesh's link to one peer, a torus's link to one neighbour)."""
        return self.busbw_gb_s / self.links


SCALE_UP_KINDS = ("nvlink", "pcie", "xgmi", "roce-mesh", "ici", "neuronlink")
SCALE_OUT_KINDS = ("ib", "roce", "efa", "dcn")


@dataclass(frozen=True)
class Model:
    __hash__ = hash_once              # (hashed again at every cache lookup otherwise)
    __getstate__ = state_without_hash

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    ffn_activation: str          # "swiglu" | "gelu" | "relu2" (squared ReLU: a plain two-matrix MLP)
    vocab: int
    head_dim: int | None = None  # defaults to hidden / heads
    experts: int = 0             # MoE: routed experts per MoE layer (0 = dense)
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0        # MoE: the first N layers are dense
    attention: str = "gqa"       # "gqa" (MHA when kv_heads == heads) | "mla"
    q_lora_rank: int = 0         # MLA only
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    tied_embeddings: bool = False
    norm: str = "rmsnorm"        # "rmsnorm" (Llama, DeepSeek) | "layernorm" (GPT, MPT, BLOOM, Nemotron)
    rotary: bool = True          # rotary position embeddings on Q and K (False: learned positions or ALiBi)
    routed_nodes: int = 0        # MoE node-limited routing: a token's experts on at most this many nodes
                                 # (DeepSeek-V3: 4, its topk_group of 8 groups; 0: no limit)
    mtp_layers: int = 0          # multi-token prediction modules trained with the model (DeepSeek-V3: 1):
                                 # each a transformer layer, a projection and the output head again, on
                                 # the last pipeline stage (a job's `mtp_layers` can turn them off)
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads


GPU_SPEC: dict[str, Field] = {
    "bf16_tflops": Field("float", positive=True, high=1e5),
    "fp8_tflops": optional("float", positive=True, high=1e5),
    "hbm_gb": Field("float", positive=True, high=1e5),
    "hbm_tb_s": Field("float", positive=True, high=1e3),
    "scale_up_link": Field("str"),
    "tdp_w": Field("float", positive=True, high=1e5),
    "idle_w": Field("float", positive=True, high=1e5),
    "memory_bound_w": Field("float", positive=True, high=1e5),
    "scale_up": optional("str", "nvswitch", choices=("nvswitch", "nvl72", "xgmi-mesh", "roce-mesh",
                                                     "torus-2d", "torus-3d")),
    "scale_up_domain": optional("int", 8, positive=True, high=1e5),
    "source": optional("str", ""),
    "sms": optional("int", None, positive=True, high=10_000),
    "gemm_overlap": optional("float", None, low=0.0, high=1.0),
    "host_link_gb_s": optional("float", None, positive=True, high=10_000.0),
    "host_memory_gb_s": optional("float", None, positive=True, high=10_000.0),
    "gemm_efficiency": optional("float", None, positive=True, high=1.0),
    "fp8_gemm_efficiency": optional("float", None, positive=True, high=1.0),
    "gemm_tile": optional("any", None, doc="two integers: the output tile (m, n) of one SM"),
    "gemm_k0": optional("float", None, low=0.0, high=1e5),
    "gemm_split_k_min": optional("int", None, positive=True, high=1e6),
    "flash2_tflops": optional("float", None, positive=True, high=1e5),
    "flash2_full_tflops": optional("float", None, positive=True, high=1e5),
    "flash3_tflops": optional("float", None, low=0.0, high=1e5),
    "flash3_full_tflops": optional("float", None, low=0.0, high=1e5),
    "flash1_share": optional("float", None, positive=True, high=1.0),
    "hbm_efficiency": optional("float", None, positive=True, high=1.0),
    "kernel_overhead_us": optional("float", None, low=0.0, high=1e4),
    "serving_overhead_us": optional("float", None, low=0.0, high=1e6),
    "server_overhead_w": optional("float", None, low=0.0, high=1e5),
}

FABRIC_SPEC: dict[str, Field] = {
    "kind": Field("str", choices=SCALE_UP_KINDS + SCALE_OUT_KINDS),
    "gb_s": Field("float", positive=True, high=1e5),
    "busbw_gb_s": Field("float", positive=True, high=1e5),
    "nvls_busbw_gb_s": optional("float", positive=True, high=1e5),
    "latency_us": Field("float", low=0, high=1e6),
    "source": optional("str", ""),
    "alltoall_efficiency": optional("float", None, positive=True, high=1.0),
    "links": optional("int", None, positive=True, high=1024),
    "hop_latency_us": optional("float", None, low=0.0, high=1e6),
}

MODEL_SPEC: dict[str, Field] = {
    "layers": Field("int", positive=True, high=100_000),
    "hidden": Field("int", positive=True, high=1_000_000),
    "heads": Field("int", positive=True, high=100_000),
    "kv_heads": optional("int", None, positive=True, high=100_000),
    "head_dim": optional("int", None, positive=True, high=100_000),
    "ffn": Field("int", positive=True, high=10_000_000),
    "ffn_activation": optional("str", "swiglu", choices=("swiglu", "gelu", "relu2")),   # relu2: squared ReLU
    "vocab": Field("int", positive=True, high=100_000_000),
    "experts": optional("int", 0, low=0, high=100_000),
    "experts_per_token": optional("int", 0, low=0, high=100_000),
    "shared_experts": optional("int", 0, low=0, high=1_000),
    "moe_ffn": optional("int", 0, low=0, high=10_000_000),
    "dense_layers": optional("int", 0, low=0, high=100_000),
    "attention": optional("str", "gqa", choices=("gqa", "mla")),
    "q_lora_rank": optional("int", 0, low=0, high=1_000_000),
    "kv_lora_rank": optional("int", 0, low=0, high=1_000_000),
    "qk_rope_dim": optional("int", 0, low=0, high=1_000_000),
    "tied_embeddings": optional("bool", False),
    "norm": optional("str", "rmsnorm", choices=("rmsnorm", "layernorm")),
    "rotary": optional("bool", True),
    "routed_nodes": optional("int", 0, low=0, high=100_000),
    "mtp_layers": optional("int", 0, low=0, high=16),
    "source": optional("str", ""),
}


def _read(name: str) -> dict[str, Any]:
    with resources.files("clustertop.engine.config.catalogs").joinpath(name).open("rb") as f:
        return tomllib.load(f)


_Entry = TypeVar("_Entry", GPU, Fabric, Model)    # a catalog's entry


def _build(cls: type[_Entry], name: str, values: dict[str, Any]) -> _Entry:
    allowed = {f.name for f in fields(cls)}
    return cls(name=name, **{k: v for k, v in values.items() if k in allowed and v is not None})


@cache
def gpus() -> dict[str, GPU]:
    ctx = Context("engine/config/catalogs/gpus.toml")
    out = {}
    for name, table in _read("gpus.toml").items():
        values = check_table(ctx, name, table, GPU_SPEC)
        tile = values["gemm_tile"]
        if tile is not None:
            if not (isinstance(tile, list) and len(tile) == 2
                    and all(isinstance(x, int) and x > 0 for x in tile)):
                raise ctx.error(f"{name}.gemm_tile", "expected two positive integers, as [64, 128]")
            values["gemm_tile"] = tuple(tile)
        out[name] = _build(GPU, name, values)
    return out


@cache
def fabrics() -> dict[str, Fabric]:
    ctx = Context("engine/config/catalogs/fabrics.toml")
    return {name: _build(Fabric, name, check_table(ctx, name, table, FABRIC_SPEC))
            for name, table in _read("fabrics.toml").items()}


@cache
def scale_out_fabrics() -> dict[str, Fabric]:
    """The fabrics a cluster's NICs can be (SCALE_OUT_KINDS), in the catalog's order."""
    return {name: f for name, f in fabrics().items() if f.kind in SCALE_OUT_KINDS}


def build_model(ctx: Context, path: str, name: str, table: Any) -> Model:
    """A Model from a catalog entry or an inline scenario table, with its consistency checks."""
    values = check_table(ctx, path, table, MODEL_SPEC)
    if values["kv_heads"] is None:
        values["kv_heads"] = values["heads"]
    if values["head_dim"] is None and values["hidden"] % values["heads"]:
        raise ctx.error(f"{path}.heads", f"hidden ({values['hidden']}) must be divisible by heads "
                        f"({values['heads']}), or give head_dim")
    if values["heads"] % values["kv_heads"]:
        raise ctx.error(f"{path}.kv_heads", f"heads ({values['heads']}) must be a multiple of kv_heads "
                        f"({values['kv_heads']})")
    if values["experts"]:
        if not 1 <= values["experts_per_token"] <= values["experts"]:
            raise ctx.error(f"{path}.experts_per_token",
                            f"expected between 1 and experts ({values['experts']}) for an MoE model")
        if values["moe_ffn"] <= 0:
            raise ctx.error(f"{path}.moe_ffn", "expected the expert FFN size (> 0) for an MoE model")
        if values["dense_layers"] >= values["layers"]:
            raise ctx.error(f"{path}.dense_layers", f"expected fewer than layers ({values['layers']})")
    elif values["experts_per_token"] or values["moe_ffn"] or values["shared_experts"]:
        raise ctx.error(f"{path}.experts", "MoE keys are set but experts is 0; set experts > 0")
    if values["attention"] == "mla" and not (values["kv_lora_rank"] and values["q_lora_rank"]):
        raise ctx.error(f"{path}.kv_lora_rank", "MLA attention needs q_lora_rank and kv_lora_rank > 0")
    return _build(Model, name, values)


@cache
def models() -> dict[str, Model]:
    ctx = Context("engine/config/catalogs/models.toml")
    return {name: build_model(ctx, name, name, table) for name, table in _read("models.toml").items()}


# ----- site defaults: optics and economics (site.toml) -------------------------------------------------

@dataclass(frozen=True)
class OpticsCatalog:
    """Transceiver power by link speed and kind, and the fibre's latency (site.toml [optics])."""

    transceiver_w: tuple[tuple[float, float], ...]   # (Gb/s, W) of pluggable transceivers, by speed
    lpo_share: float              # linear-drive pluggables: this share of a pluggable's power
    cpo_share: float              # co-packaged optics: this share
    fibre_latency_us_per_km: float
    transceivers_per_link: int


SPEEDS_GBPS = {"400g": 400.0, "800g": 800.0, "1.6t": 1600.0}

OPTICS_SPEC: dict[str, Field] = {
    "transceiver_w": Field("table"),
    "lpo_share": Field("float", positive=True, high=1.0),
    "cpo_share": Field("float", positive=True, high=1.0),
    "fibre_latency_us_per_km": Field("float", positive=True, high=1e3),
    "transceivers_per_link": Field("int", low=0, high=16),
}

ECONOMICS_SPEC: dict[str, Field] = {
    "capex_usd_per_accelerator": optional("float", low=0.0, high=1e8),
    "depreciation_years": optional("float", positive=True, high=100.0),
    "electricity_usd_per_mwh": optional("float", low=0.0, high=1e5),
    "cloud_usd_per_accelerator_hour": optional("float", low=0.0, high=1e4),
}


@cache
def optics() -> OpticsCatalog:
    ctx = Context("engine/config/catalogs/site.toml")
    values = check_table(ctx, "optics", _read("site.toml")["optics"], OPTICS_SPEC)
    watts = []
    for speed, w in values.pop("transceiver_w").items():
        if speed not in SPEEDS_GBPS or not isinstance(w, (int, float)) or w <= 0:
            raise ctx.error(f"optics.transceiver_w.{speed}", f"expected a speed of {', '.join(SPEEDS_GBPS)} "
                            "and its watts (> 0)")
        watts.append((SPEEDS_GBPS[speed], float(w)))
    return OpticsCatalog(transceiver_w=tuple(sorted(watts)), **values)


@cache
def economics_defaults() -> dict[str, float]:
    """The [economics] defaults (site.toml): what a scenario's [economics] table overrides."""
    ctx = Context("engine/config/catalogs/site.toml")
    values = check_table(ctx, "economics", _read("site.toml")["economics"], ECONOMICS_SPEC)
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise ctx.error(f"economics.{missing[0]}", "missing default")
    return values


# ----- fault causes (Llama 3 Table 5) ----------------------------------------------------------------

DAY = 86400.0


@dataclass(frozen=True)
class Cause:
    name: str
    count: int            # interruptions in the reference snapshot
    component: str        # "gpu" | "host" | "link": what the rate scales with
    category: str
    scope: str            # "node": the node is out until replaced; "link": a network link; "job":
                          # software only
    rate_per_s: float     # per component


@cache
def causes() -> tuple[Cause, ...]:
    """Llama 3 Table 5's interruption causes (faults.toml), each with its rate per component."""
    data = _read("faults.toml")
    days = data["reference_days"]
    counts = {"gpu": data["reference_gpus"], "host": data["reference_hosts"], "link": data["reference_links"]}
    return tuple(Cause(name=name, count=c["count"], component=c["component"], category=c["category"],
                       scope=c["scope"], rate_per_s=c["count"] / (counts[c["component"]] * days * DAY))
                 for name, c in data["causes"].items())


def cause(name: str) -> Cause:
    """A Table 5 cause by name; KeyError when there is none."""
    for c in causes():
        if c.name == name:
            return c
    raise KeyError(name)
