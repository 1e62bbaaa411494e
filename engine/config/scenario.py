"""Scenario files (TOML, format v1): loading, validation and the typed objects everything downstream uses.

Validation happens here, once. A bad scenario ends in one UserError line naming the file, the line or key
path, what is wrong and what is expected.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from . import catalog, facility
from .catalog import GPU, Fabric, Model
from .errors import UserError, quote
from .fields import Context, Field, check_table, did_you_mean, optional
from .optics import SiteOptics, site_optics
from .tomlfile import read_toml
from .units import parse_duration

FORMAT_VERSION = 1
MAX_GPUS = 10_000_000
MAX_JOBS = 1_000
MAX_PIPELINE_STAGES = 16_384   # each stage is costed on its own (Llama 3 405B ran 16)


@dataclass(frozen=True)
class DegradedLinks:
    """Part of a tier running below its capacity: e.g. half the spine uplinks of one pod down."""
    tier: str                    # "leaf" | "spine" | "core" | "campus"
    pod: int | None              # which pod's links (None: every pod)
    capacity: float              # fraction of the links' bandwidth left (0 < capacity <= 1)


# cluster.scale_up: what joins the GPUs of one scale-up domain (the topology's "node"), README and
# docs/performance-model.md 3c. The link each uses is the GPU's own (gpus.toml scale_up_link), or PCIe.
SCALE_UPS = ("nvswitch", "nvl72", "xgmi-mesh", "roce-mesh", "torus-2d", "torus-3d", "pcie")
TORUS_DIMS = {"torus-2d": 2, "torus-3d": 3}
MESHES = ("xgmi-mesh", "roce-mesh")
OPTICS = ("pluggable", "lpo", "cpo")


@dataclass(frozen=True)
class Cluster:
    gpu: GPU
    gpus: int
    gpus_per_node: int           # GPUs of one scale-up domain (the topology's "node")
    scale_up: str                # SCALE_UPS: what joins a node's GPUs
    scale_up_link: Fabric        # the GPU's scale-up links (NVLink, xGMI, ICI, NeuronLink, Gaudi's RoCE mesh)
    pcie: Fabric                 # the host PCIe path (used when scale_up = "pcie")
    scale_out: Fabric
    nics_per_node: int
    gpus_per_rack: int
    racks_per_pod: int
    pod_oversubscription: float
    rack_oversubscription: float
    pods_per_building: int       # 0: one building holds every pod
    building_oversubscription: float
    pue: float
    site_power_budget_mw: float | None
    ecmp_flows: int = 16                          # flows each connection is split over across ECMP paths
    degraded: tuple[DegradedLinks, ...] = ()      # links running below capacity (failed optics, bad cables)
    torus: tuple[int, ...] = ()                   # a torus scale-up: the domain's extent per dimension, x first
    optics: str = "pluggable"                     # OPTICS: the transceivers of the optical links
    building_distance_km: float = 0.0             # fibre between buildings: 4.9 us per km on collectives crossing
    hosts: tuple[str, ...] = ()   # node i's host name (real telemetry: docs/telemetry.md); empty: hostname order

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @cached_property
    def transceivers(self) -> SiteOptics:
        """The optical transceivers of its fabric and their power (engine/config/optics.py), counted once."""
        return site_optics(self)

    @property
    def node_link(self) -> Fabric:
        """The fabric GPUs of one scale-up domain talk over: the GPU's scale-up links, or PCIe through the host."""
        return self.pcie if self.scale_up == "pcie" else self.scale_up_link


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
    request_rate: float = 0.0    # inference: requests per second arriving at the whole job
    prompt_tokens: int = 0       # inference: mean prompt length
    output_tokens: int = 0       # inference: mean generated tokens per request
    max_batch: int = 0           # inference: sequences one replica decodes at once (continuous batching)
    # The software stack (docs/performance-model.md "Software stack"); the defaults are Megatron-LM's current ones
    attention_kernel: str = "auto"       # "flash3" (FA3 / cuDNN, Hopper+) | "flash2" | "flash1" | "unfused" | "auto"
    dropout: float = 0.0                 # hidden and attention dropout probability (0: none, as Llama trains)
    fused_kernels: bool = True           # norms, activations, rotary fused (Megatron, TE, compile); else eager
    overlap_p2p_comm: bool = True        # pipeline sends run behind compute (else the sender waits for them)
    overlap_grad_reduce: bool = True     # DP gradient reduction in buckets behind the backward (else after it)
    overlap_param_gather: bool = True    # parameter all-gather (ZeRO) ahead of the forward (else exposed)
    tp_comm_overlap: bool = False        # TP collectives overlapped with the GEMMs (Transformer Engine)
    grad_reduce_dtype: str = "fp32"      # the data type gradients are reduced in: "fp32" | "bf16"

    @property
    def is_inference(self) -> bool:
        return self.kind == "inference"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


@dataclass(frozen=True)
class Injection:
    """A fault scheduled by the scenario ([[faults.inject]]), for demos and tests."""
    at_s: float                  # when, from the start of the run
    gpu: int                     # the GPU hit (its node or NIC link, depending on the cause)
    cause: str                   # a Llama 3 Table 5 cause (engine/config/catalogs/faults.toml)


@dataclass(frozen=True)
class Faults:
    """Random interruptions (Llama 3 Table 5 causes), detection and restart."""
    enabled: bool
    rate_scale: float            # multiplies every per-component rate (1.0 = Llama 3's observed rates)
    detection_s: float           # from the fault to the job noticing (NCCL timeout, health checks)
    restart_s: float             # from detection to training again (reschedule, load checkpoint, warm up)
    spare_nodes: int             # healthy nodes ready to replace failed ones
    repair_s: float              # time to repair a failed node when no spare is left
    planned_per_day: float       # planned interruptions (maintenance, upgrades) per job per day
    planned_s: float             # duration of a planned interruption
    inject: tuple[Injection, ...] = ()   # scheduled faults, in time order


@dataclass(frozen=True)
class Checkpoint:
    interval_s: float | str      # seconds between checkpoints, or "auto" (Young/Daly optimum)
    mode: str                    # "sync": all GPUs wait while writing | "async": snapshot to host, write behind
    storage_tb_s: float          # aggregate storage write bandwidth


@dataclass(frozen=True)
class Variability:
    """GPU-to-GPU speed differences and the day/night swing."""
    straggler_sigma: float       # std dev of per-GPU speed factors (lognormal around 1)
    slow_gpu_fraction: float     # fraction of GPUs markedly slow (bad thermals, throttling)
    slow_gpu_factor: float       # speed of those GPUs (0.9 = 10% slower)
    diurnal_amplitude: float     # peak-to-trough throughput swing over a day (Llama 3: 1-2%)


@dataclass(frozen=True)
class Economics:
    """What the accelerators and their power cost ([economics]; defaults in catalogs/site.toml)."""
    capex_usd_per_accelerator: float     # an accelerator with its share of server, network and storage
    depreciation_years: float            # written off over this many years
    electricity_usd_per_mwh: float
    cloud_usd_per_accelerator_hour: float = 0.0   # > 0: rented at this price (power included) instead of owned

    def usd_per_hour(self, gpus: int, facility_w: float) -> float:
        """What `gpus` accelerators drawing `facility_w` cost per hour: rented, or owned plus their electricity."""
        if self.cloud_usd_per_accelerator_hour > 0:
            return gpus * self.cloud_usd_per_accelerator_hour
        return gpus * self._capex_per_hour() + facility_w / 1e6 * self.electricity_usd_per_mwh

    def run_cost(self, gpus: int, energy_mwh: float, hours: float) -> float:
        """Dollars of a run of `hours` that used `energy_mwh` on `gpus` accelerators."""
        if self.cloud_usd_per_accelerator_hour > 0:
            return gpus * self.cloud_usd_per_accelerator_hour * hours
        return gpus * self._capex_per_hour() * hours + energy_mwh * self.electricity_usd_per_mwh

    def _capex_per_hour(self) -> float:
        return self.capex_usd_per_accelerator / (self.depreciation_years * HOURS_PER_YEAR)

    @classmethod
    def of(cls, table: Any) -> Economics | None:
        """From a recording header's scenario.economics (untrusted): None unless every figure is a finite
        number >= 0 (and the depreciation > 0)."""
        if not isinstance(table, dict):
            return None
        names = ("capex_usd_per_accelerator", "depreciation_years", "electricity_usd_per_mwh",
                 "cloud_usd_per_accelerator_hour")
        values = [table.get(n, 0.0) for n in names]
        if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in values) or values[1] <= 0:
            return None
        return cls(*(float(v) for v in values))


HOURS_PER_YEAR = 365 * 24


@cache
def default_economics() -> Economics:
    """The [economics] defaults of catalogs/site.toml (hardware.toml's ranges, their middles)."""
    return Economics(**catalog.economics_defaults())


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    duration_s: float
    cluster: Cluster
    jobs: tuple[Job, ...]
    faults: Faults
    checkpoint: Checkpoint
    variability: Variability
    path: str = ""
    compare_with: str = ""       # the twin `clustertop compare` shows beside it (a built-in name or a .toml path)
    economics: Economics = dataclasses.field(default_factory=lambda: default_economics())

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as plain data (catalog entries expanded), for recordings and --json. An empty
        `cluster.hosts` is left out, so simulated recordings are as they were before real telemetry came."""
        data = dataclasses.asdict(self)
        if not data["cluster"]["hosts"]:
            del data["cluster"]["hosts"]
        return data


TOP_SPEC: dict[str, Field] = {
    "name": Field("str"),
    "description": optional("str", "", lines=True),
    "seed": optional("int", 1, low=0, high=2**63 - 1),
    "duration": optional("str", 3600.0, parse=parse_duration),   # default 1h (defaults are not parsed)
    "format": optional("int", FORMAT_VERSION, low=1, high=FORMAT_VERSION),
    "cluster": Field("table"),
    "jobs": Field("any", doc="an array of [[jobs]] tables"),
    "faults": optional("table", None),
    "checkpoint": optional("table", None),
    "variability": optional("table", None),
    "economics": optional("table", None),
    "compare_with": optional("str", ""),
}

FAULTS_SPEC: dict[str, Field] = {
    "enabled": optional("bool", True),
    "rate_scale": optional("float", 1.0, low=0.0, high=1e6),
    "detection": optional("str", 120.0, parse=parse_duration),
    "restart": optional("str", 600.0, parse=parse_duration),
    "spare_nodes": optional("int", 16, low=0, high=10_000_000),
    "repair": optional("str", 4 * 3600.0, parse=parse_duration),
    "planned_per_day": optional("float", 47 / 54, low=0.0, high=1000.0),
    "planned": optional("str", 1200.0, parse=parse_duration),
    "inject": optional("any", None, doc="an array of [[faults.inject]] tables"),
}

INJECT_SPEC: dict[str, Field] = {
    "at": Field("str", parse=parse_duration, doc='a duration from the start, such as "30s"'),
    "gpu": Field("int", low=0, high=MAX_GPUS),
    "cause": optional("str", "Faulty GPU"),
}

CHECKPOINT_SPEC: dict[str, Field] = {
    "interval": optional("str", "auto", parse=parse_duration, auto=True),
    "mode": optional("str", "sync", choices=("sync", "async")),
    "storage_tb_s": optional("float", 2.0, positive=True, high=1e6),
}

VARIABILITY_SPEC: dict[str, Field] = {
    "straggler_sigma": optional("float", 0.005, low=0.0, high=0.5),
    "slow_gpu_fraction": optional("float", 0.0, low=0.0, high=1.0),
    "slow_gpu_factor": optional("float", 0.9, positive=True, high=1.0),
    "diurnal_amplitude": optional("float", 0.015, low=0.0, high=0.5),
}

CLUSTER_SPEC: dict[str, Field] = {
    "gpu": Field("str"),
    "gpus": Field("int", positive=True, high=MAX_GPUS, auto=True),   # "auto": as many as the power budget holds
    "gpus_per_node": optional("int", None, positive=True, high=100_000),   # default: by scale_up
    "scale_up": optional("str", None, choices=SCALE_UPS),                  # default: the GPU's, as built
    "node_fabric": optional("str", None, choices=("nvswitch", "pcie")),    # the older name of scale_up
    "torus": optional("any", None, doc="an array of 2 (torus-2d) or 3 (torus-3d) positive integers"),
    "pcie": optional("str", "pcie-gen5", choices=("pcie-gen4", "pcie-gen5")),
    "scale_out": optional("str", "ib-ndr-400g"),
    "nics_per_node": optional("int", None, positive=True, high=1024),   # default: one per GPU
    "gpus_per_rack": optional("int", None, positive=True, high=100_000),   # default 16, or one scale-up domain
    "optics": optional("str", "pluggable", choices=OPTICS),
    "building_distance_km": optional("float", 0.0, low=0.0, high=20_000.0),
    "racks_per_pod": optional("int", 192, positive=True, high=1_000_000),
    "pod_oversubscription": optional("float", 1.0, low=1.0, high=1000.0),
    "rack_oversubscription": optional("float", 1.0, low=1.0, high=1000.0),
    "pods_per_building": optional("int", 0, low=0, high=1_000_000),
    "building_oversubscription": optional("float", 1.0, low=1.0, high=1000.0),
    "pue": optional("float", 1.2, low=1.0, high=3.0),
    "site_power_budget_mw": optional("float", None, positive=True, high=100_000.0),
    "ecmp_flows": optional("int", 16, positive=True, high=1024),
    "degraded": optional("any", None, doc="an array of [[cluster.degraded]] tables"),
    "hosts": optional("any", None, doc="an array of host names, node 0 first"),
}

JOB_SPEC: dict[str, Field] = {
    "name": optional("str", None),
    "model": Field("any", doc="a catalog model name or an inline [jobs.model] table"),
    "kind": optional("str", "training", choices=("training", "inference")),
    "seq_len": optional("int", None, positive=True, high=10_000_000, doc="an integer (required for training)"),
    "global_batch": optional("int", None, positive=True, high=100_000_000,
                             doc="an integer (required for training)"),
    "request_rate": optional("float", None, positive=True, high=1e9),
    "prompt_tokens": optional("int", 1024, positive=True, high=10_000_000),
    "output_tokens": optional("int", 256, positive=True, high=10_000_000),
    "max_batch": optional("int", 256, positive=True, high=1_000_000),
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
    "schedule": optional("str", "1f1b", choices=("1f1b", "gpipe", "dualpipe")),
    "sequence_parallel": optional("bool", True),
    "first_gpu": optional("int", None, low=0, high=MAX_GPUS),
    "gpus": optional("int", None, positive=True, high=MAX_GPUS),
    "attention_kernel": optional("str", "auto", choices=("auto", "flash1", "flash2", "flash3", "unfused")),
    "dropout": optional("float", 0.0, low=0.0, high=0.9),
    "fused_kernels": optional("bool", True),
    "overlap_p2p_comm": optional("bool", True),
    "overlap_grad_reduce": optional("bool", True),
    "overlap_param_gather": optional("bool", True),
    "tp_comm_overlap": optional("bool", False),
    "grad_reduce_dtype": optional("str", "fp32", choices=("fp32", "bf16")),
}


def builtin_dir() -> Path:
    """Where the built-in scenarios are: package data when installed, scenarios/ in a source checkout."""
    try:
        return Path(str(resources.files("clustertop.engine.config.scenarios")))
    except ModuleNotFoundError:   # running from a source tree, where scenarios/ sits beside engine/
        return Path(__file__).resolve().parents[2] / "scenarios"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def resolve_path(arg: str) -> Path:
    """A built-in scenario name or a path to a .toml file."""
    if "/" not in arg and not arg.endswith(".toml"):
        path = builtin_dir() / f"{arg}.toml"
        if path.is_file():
            return path
        if not Path(arg).exists():
            hint = did_you_mean(arg, builtin_names())
            raise UserError(f"unknown scenario{hint}; expected a built-in name ({', '.join(builtin_names())}) "
                            "or a path to a .toml file", arg)
    return Path(arg)


def load(arg: str) -> Scenario:
    """Load and validate a scenario given by built-in name or path."""
    path = resolve_path(arg)
    data, text = read_toml(path)
    return parse(data, Context(str(path), text), str(path))


Sections = dict[str, tuple[tuple[Any, ...], Any]]


def _section(sections: Sections | None, key: str, raws: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """`build()`, or what it gave for the very same raw tables (identity, not equality) when `sections` has it.

    A sweep parses thousands of points that share every table but the ones it varies (overrides.apply copies
    only what it sets): the tables a point shares with the base were validated by the first point that met
    them, a pure function of those tables, so the same objects are not checked again. Tables that differ (or
    any table when `sections` is None) are validated in full.
    """
    if sections is None:
        return build()
    hit = sections.get(key)
    if hit is not None and len(hit[0]) == len(raws) and all(a is b for a, b in zip(hit[0], raws)):
        return hit[1]
    value = build()
    sections[key] = (raws, value)       # kept with its tables, so their ids stay theirs
    return value


def _check_keys(sections: Sections | None, ctx: Context, path: str, table: Any, spec: dict[str, Field]) -> dict[str, Any]:
    """check_table, given the last table checked at `path` and its result when `sections` keeps them: the values
    a sweep's point shares with it (the same objects) are not checked again, the others are."""
    if sections is None:
        return check_table(ctx, path, table, spec)
    memo = f"keys of {path}"
    hit = sections.get(memo)
    out = check_table(ctx, path, table, spec, (hit[0][0], hit[1]) if hit is not None else None)
    sections[memo] = ((table,), dict(out))       # a copy: the caller may fill in derived values (inference defaults)
    return out


def parse(data: dict[str, Any], ctx: Context, path: str = "", sections: Sections | None = None) -> Scenario:
    """Validate a scenario's raw table. `sections`: a sweep's memo of the tables its points share (see _section)."""
    top = _check_keys(sections, ctx, "", data, TOP_SPEC)
    cluster = _section(sections, "cluster", (top["cluster"],), lambda: _cluster(ctx, top["cluster"]))
    raw_jobs = top["jobs"]
    if isinstance(raw_jobs, dict):
        raw_jobs = [raw_jobs]
    if not isinstance(raw_jobs, list) or not raw_jobs:
        raise ctx.error("jobs", "expected at least one [[jobs]] table")
    if len(raw_jobs) > MAX_JOBS:
        raise ctx.error("jobs", f"{len(raw_jobs):,} jobs; expected at most {MAX_JOBS:,} (each job is estimated and "
                        "simulated on its own, and every sample carries each job's status)")
    jobs: list[Job] = []
    next_gpu = 0
    for i, raw in enumerate(raw_jobs):
        job = _job(ctx, f"jobs[{i}]", raw, cluster, next_gpu, sections)
        jobs.append(job)
        next_gpu = job.first_gpu + job.gpus
    _check_disjoint(ctx, jobs)
    seen: dict[str, int] = {}
    for i, job in enumerate(jobs):
        if seen.setdefault(job.name, i) != i:
            raise ctx.error(f"jobs[{i}].name", f"job name {quote(job.name)} is also jobs[{seen[job.name]}]'s; "
                            "expected unique job names")
    faults = _section(sections, "faults", (top["faults"], top["cluster"]),
                      lambda: _faults(ctx, top["faults"], cluster))
    checkpoint = _section(sections, "checkpoint", (top["checkpoint"],), lambda: _checkpoint(ctx, top["checkpoint"]))
    variability = _section(sections, "variability", (top["variability"],),
                           lambda: Variability(**check_table(ctx, "variability", top["variability"] or {},
                                                             VARIABILITY_SPEC)))
    economics = _section(sections, "economics", (top["economics"],), lambda: _economics(ctx, top["economics"]))
    return Scenario(name=top["name"], description=top["description"], seed=top["seed"],
                    duration_s=top["duration"], cluster=cluster, jobs=tuple(jobs), faults=faults,
                    checkpoint=checkpoint, variability=variability, path=path, economics=economics,
                    compare_with=top["compare_with"])


def _faults(ctx: Context, raw: Any, cluster: Cluster) -> Faults:
    f = check_table(ctx, "faults", raw or {}, FAULTS_SPEC)
    return Faults(enabled=f["enabled"], rate_scale=f["rate_scale"], detection_s=f["detection"],
                  restart_s=f["restart"], spare_nodes=f["spare_nodes"], repair_s=f["repair"],
                  planned_per_day=f["planned_per_day"], planned_s=f["planned"],
                  inject=_injections(ctx, f["inject"], cluster))


def _checkpoint(ctx: Context, raw: Any) -> Checkpoint:
    c = check_table(ctx, "checkpoint", raw or {}, CHECKPOINT_SPEC)
    return Checkpoint(interval_s=c["interval"], mode=c["mode"], storage_tb_s=c["storage_tb_s"])


def _economics(ctx: Context, raw: Any) -> Economics:
    economics = default_economics()
    if raw is not None:
        e = check_table(ctx, "economics", raw, catalog.ECONOMICS_SPEC)
        economics = dataclasses.replace(economics, **{k: x for k, x in e.items() if x is not None})
    return economics


def _check_disjoint(ctx: Context, jobs: list[Job]) -> None:
    """Jobs hold disjoint GPU ranges: each overlaps at most its neighbour in GPU order (sorted: n log n)."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].first_gpu, i))
    for a, b in itertools.pairwise(order):
        first, other = sorted((a, b))
        if jobs[a].first_gpu + jobs[a].gpus > jobs[b].first_gpu:
            job, prev = jobs[other], jobs[first]
            raise ctx.error(f"jobs[{other}].first_gpu", f"job {quote(job.name)} overlaps job {quote(prev.name)} "
                            f"(GPUs {prev.first_gpu}-{prev.first_gpu + prev.gpus - 1}); expected disjoint GPU ranges")


def _injections(ctx: Context, raw: Any, cluster: Cluster) -> tuple[Injection, ...]:
    """[[faults.inject]]: faults at given times and GPUs, with a Table 5 cause."""
    from .catalog import causes

    if raw is None:
        return ()
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ctx.error("faults.inject", "expected an array of [[faults.inject]] tables (at, gpu, cause)")
    names = [c.name for c in causes()]
    out = []
    for i, entry in enumerate(raw):
        path = f"faults.inject[{i}]"
        e = check_table(ctx, path, entry, INJECT_SPEC)
        if e["gpu"] >= cluster.gpus:
            raise ctx.error(f"{path}.gpu", f"GPU {e['gpu']:,} is not in the cluster; expected 0 to "
                            f"{cluster.gpus - 1:,}")
        if e["cause"] not in names:
            raise ctx.error(f"{path}.cause", f"unknown cause {e['cause']!r}{did_you_mean(e['cause'], names)}; "
                            f"expected a Llama 3 Table 5 cause such as \"Faulty GPU\" or \"Software bug\"")
        out.append(Injection(at_s=e["at"], gpu=e["gpu"], cause=e["cause"]))
    return tuple(sorted(out, key=lambda x: (x.at_s, x.gpu)))


def _catalog_entry(ctx: Context, key: str, name: str, entries: dict[str, Any]) -> Any:
    if name not in entries:
        hint = did_you_mean(name, entries)
        raise ctx.error(key, f"unknown name {name!r}{hint}; expected one of {', '.join(entries)}")
    return entries[name]


def _cluster(ctx: Context, table: dict[str, Any]) -> Cluster:
    c = check_table(ctx, "cluster", table, CLUSTER_SPEC)
    gpu = _catalog_entry(ctx, "cluster.gpu", c.pop("gpu"), catalog.gpus())
    fabrics = catalog.fabrics()
    link = fabrics[gpu.scale_up_link]
    _scale_up(ctx, c, gpu, link)
    scale_out_names = {n: f for n, f in fabrics.items() if f.kind in catalog.SCALE_OUT_KINDS}
    scale_out = _catalog_entry(ctx, "cluster.scale_out", c.pop("scale_out"), scale_out_names)
    if c["nics_per_node"] is None:
        c["nics_per_node"] = c["gpus_per_node"]
    if c["nics_per_node"] > c["gpus_per_node"] * 4:
        raise ctx.error("cluster.nics_per_node", f"{c['nics_per_node']} NICs for {c['gpus_per_node']} GPUs; "
                        "expected at most 4 per GPU")
    if c["gpus_per_rack"] % c["gpus_per_node"]:
        raise ctx.error("cluster.gpus_per_rack", f"{c['gpus_per_rack']} is not a whole number of nodes of "
                        f"{c['gpus_per_node']}; expected a multiple of gpus_per_node")
    del c["node_fabric"]
    c["pcie"] = fabrics[c["pcie"]]
    if c["gpus"] == "auto":
        c["gpus"] = _size_from_budget(ctx, c, gpu, scale_out, link)
    if c["gpus"] % c["gpus_per_node"]:
        raise ctx.error("cluster.gpus", f"{c['gpus']} GPUs is not a whole number of nodes of "
                        f"{c['gpus_per_node']} (gpus_per_node); expected a multiple of {c['gpus_per_node']}")
    c["degraded"] = _degraded(ctx, c["degraded"], _pod_count(c))
    c["hosts"] = _hosts(ctx, c["hosts"], c["gpus"] // c["gpus_per_node"])
    return Cluster(gpu=gpu, scale_out=scale_out, scale_up_link=link, **c)


def _size_from_budget(ctx: Context, c: dict[str, Any], gpu: GPU, scale_out: Fabric, link: Fabric) -> int:
    """gpus = "auto": the most GPUs, in whole racks, the site's budget powers at full load, optics included."""
    budget = c["site_power_budget_mw"]
    if budget is None:
        raise ctx.error("cluster.gpus", '"auto" sizes the cluster from site_power_budget_mw; set that budget '
                        "or give a GPU count")
    shape = Cluster(gpu=gpu, scale_out=scale_out, scale_up_link=link, **{**c, "gpus": c["gpus_per_rack"],
                                                                         "degraded": ()})
    n = facility.gpus_for_budget(budget, gpu, c["pue"], c["gpus_per_rack"],
                                 lambda n: site_optics(dataclasses.replace(shape, gpus=n)).watts)
    if n > MAX_GPUS:
        raise ctx.error("cluster.site_power_budget_mw", f"{budget:,g} MW powers {n:,} {gpu.name}, beyond the "
                        f"supported maximum of {MAX_GPUS:,} GPUs; expected a smaller budget or a GPU count")
    if n < c["gpus_per_rack"]:
        raise ctx.error("cluster.site_power_budget_mw", f"{budget} MW does not power one rack of "
                        f"{c['gpus_per_rack']} {gpu.name}")
    return n


def _scale_up(ctx: Context, c: dict[str, Any], gpu: GPU, link: Fabric) -> None:
    """Resolve cluster.scale_up (or its older name node_fabric), gpus_per_node, torus and gpus_per_rack."""
    if c["node_fabric"] is not None:
        if c["scale_up"] is not None:
            raise ctx.error("cluster.node_fabric", "node_fabric is the older name of scale_up; expected one of them")
        c["scale_up"] = c["node_fabric"]
    allowed = scale_ups(gpu, link)
    scale_up = c["scale_up"] or gpu.scale_up
    if scale_up not in allowed:
        raise ctx.error("cluster.scale_up", f"{gpu.name} cannot have a {scale_up!r} scale-up domain (its links "
                        f"are {link.name}); expected " + " or ".join(f'"{a}"' for a in allowed))
    c["scale_up"] = scale_up
    dims = TORUS_DIMS.get(scale_up)
    if c["torus"] is not None and dims is None:
        raise ctx.error("cluster.torus", f'a torus shape needs scale_up = "torus-2d" or "torus-3d", not {scale_up!r}')
    if dims is not None:
        c["torus"] = _torus(ctx, c, dims, gpu.scale_up_domain)
        c["gpus_per_node"] = math.prod(c["torus"])
    else:
        c["torus"] = ()
        if c["gpus_per_node"] is None:
            c["gpus_per_node"] = 72 if scale_up == "nvl72" else 8
    limit = link.links + 1 if scale_up in MESHES else gpu.scale_up_domain if scale_up != "pcie" else 1024
    if scale_up == "nvswitch":
        limit = min(limit, 8)          # an NVSwitch baseboard (HGX) joins 8 GPUs; NVL72 is a rack of 72
    if c["gpus_per_node"] > limit:
        raise ctx.error("cluster.gpus_per_node", f"{c['gpus_per_node']} GPUs exceed a {scale_up} domain of "
                        f"{gpu.name} ({limit}); expected at most {limit}")
    if c["gpus_per_rack"] is None:
        c["gpus_per_rack"] = max(16, c["gpus_per_node"])


def scale_ups(gpu: GPU, link: Fabric) -> tuple[str, ...]:
    """The scale-up domains a GPU can be built in: its own, and the others its links allow."""
    if link.kind == "nvlink":
        return ("nvswitch", "pcie") + (("nvl72",) if gpu.scale_up_domain >= 72 else ())
    if link.kind == "xgmi":
        return (gpu.scale_up, "pcie")
    return (gpu.scale_up,)


def _torus(ctx: Context, c: dict[str, Any], dims: int, domain: int) -> tuple[int, ...]:
    """The torus shape: as given, else the most balanced one of gpus_per_node (default: the cluster, at most the
    GPU's domain) chips."""
    raw = c["torus"]
    if raw is None:
        n = c["gpus_per_node"] or min(c["gpus"] if isinstance(c["gpus"], int) else domain, domain)
        return balanced_shape(n, dims)
    if not (isinstance(raw, list) and len(raw) == dims and all(isinstance(x, int) and not isinstance(x, bool)
                                                                and x > 0 for x in raw)):
        raise ctx.error("cluster.torus", f"expected an array of {dims} positive integers (the torus's extent "
                        f"per dimension, x first), got {raw!r}")
    if c["gpus_per_node"] is not None and math.prod(raw) != c["gpus_per_node"]:
        raise ctx.error("cluster.torus", f"{' x '.join(map(str, raw))} = {math.prod(raw)} chips is not "
                        f"gpus_per_node ({c['gpus_per_node']}); expected them to be equal")
    return tuple(raw)


def balanced_shape(n: int, dims: int) -> tuple[int, ...]:
    """The factorisation of n in `dims` factors closest to a cube (smallest largest/smallest ratio), ascending."""
    def shapes(m: int, k: int, low: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(m,)] if m >= low else []
        return [(a, *rest) for a in range(low, round(m ** (1 / k)) + 1) if m % a == 0
                for rest in shapes(m // a, k - 1, a)]
    return min(shapes(n, dims, 1), key=lambda s: (s[-1] / s[0], s))


DEGRADED_SPEC: dict[str, Field] = {
    "tier": Field("str", choices=("leaf", "spine", "core", "campus")),
    "pod": optional("int", None, low=0, high=MAX_GPUS),
    "capacity": Field("float", positive=True, high=1.0),
}


def _pod_count(c: dict[str, Any]) -> int:
    per_pod = c["gpus_per_rack"] * c["racks_per_pod"]
    return -(-c["gpus"] // per_pod)


def _hosts(ctx: Context, raw: Any, nodes: int) -> tuple[str, ...]:
    """cluster.hosts: which host is node 0, 1, ... when real telemetry is placed on the cluster (names as the
    DCGM exporter's Hostname label or Prometheus's instance, with or without its port)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(h, str) and h.strip() and len(h) <= 256 for h in raw):
        raise ctx.error("cluster.hosts", "expected an array of host names (non-empty strings of at most 256 "
                        "characters), node 0 first")
    if len(raw) > nodes:
        raise ctx.error("cluster.hosts", f"{len(raw):,} hosts for {nodes:,} nodes; expected at most one per node")
    seen: set[str] = set()
    for i, host in enumerate(raw):
        if host in seen:
            raise ctx.error("cluster.hosts", f"{quote(host)} is listed twice (hosts[{i}]); expected each host once")
        seen.add(host)
    return tuple(raw)


def load_cluster(arg: str) -> tuple[str, Cluster, tuple[Job, ...]]:
    """(name, cluster, jobs) of a scenario file, or of a file with only a [cluster] table (and an optional name):
    where real telemetry is placed. Jobs, when the file has them, say which GPUs run what."""
    path = resolve_path(arg)
    data, text = read_toml(path)
    ctx = Context(str(path), text)
    if isinstance(data, dict) and "jobs" in data:
        s = parse(data, ctx, str(path))
        return s.name, s.cluster, s.jobs
    spec = {**TOP_SPEC, "name": optional("str", path.stem), "jobs": optional("any", None)}
    top = check_table(ctx, "", data, spec)
    return top["name"], _cluster(ctx, top["cluster"]), ()


def parse_cluster(table: dict[str, Any], where: str) -> Cluster:
    """A [cluster] table built by the program (a watched cluster's), checked as a file's would be."""
    return _cluster(Context(where), table)


def _degraded(ctx: Context, raw: Any, pods: int) -> tuple[DegradedLinks, ...]:
    if raw is None:
        return ()
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ctx.error("cluster.degraded", "expected an array of [[cluster.degraded]] tables")
    out = []
    for i, entry in enumerate(raw):
        d = check_table(ctx, f"cluster.degraded[{i}]", entry, DEGRADED_SPEC)
        if d["pod"] is not None and d["pod"] >= pods:
            raise ctx.error(f"cluster.degraded[{i}].pod", f"pod {d['pod']} does not exist; the cluster has "
                            f"{pods} pod(s), numbered from 0")
        out.append(DegradedLinks(**d))
    return tuple(out)


def _job(ctx: Context, path: str, raw: Any, cluster: Cluster, next_gpu: int, sections: Sections | None = None) -> Job:
    j = _check_keys(sections, ctx, path, raw, JOB_SPEC)
    name = j["name"] or f"job{path[5:-1]}"
    raw_model = j["model"]
    if isinstance(raw_model, str):
        model = _catalog_entry(ctx, f"{path}.model", raw_model, catalog.models())
    elif isinstance(raw_model, dict):
        model = catalog.build_model(ctx, f"{path}.model", f"{name}-model", raw_model)
    else:
        raise ctx.error(f"{path}.model", "expected a catalog model name or an inline table of the model")
    if j["kind"] == "inference":
        _inference_defaults(ctx, path, j)
    else:
        for key in ("seq_len", "global_batch"):
            if j[key] is None:
                raise ctx.error(f"{path}.{key}", "missing required key for a training job (an integer)")
        if j["request_rate"] is not None:
            raise ctx.error(f"{path}.request_rate", 'only inference jobs take requests; set kind = "inference"')
    tp, cp, pp, ep = j["tp"], j["cp"], j["pp"], j["ep"]
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
                        f"the job needs {gpus:,} GPUs from GPU {first:,} but the cluster has {cluster.gpus:,}; "
                        "expected a job that fits in the cluster")
    if model.heads % tp:
        raise ctx.error(f"{path}.tp", f"the model's {model.heads} attention heads are not divisible by tp = {tp}; "
                        "expected tp to divide heads")
    if model.layers < pp:
        raise ctx.error(f"{path}.pp", f"pp = {pp} exceeds the model's {model.layers} layers; expected pp <= layers")
    if j["seq_len"] % cp:
        raise ctx.error(f"{path}.cp", f"seq_len {j['seq_len']} is not divisible by cp = {cp}")
    if ep > 1:
        if not model.is_moe:
            raise ctx.error(f"{path}.ep", f"ep = {ep} but {model.name} is dense; expected ep = 1 (or an MoE model)")
        if model.experts % ep:
            raise ctx.error(f"{path}.ep", f"the model's {model.experts} experts are not divisible by ep = {ep}")
        if (dp * cp) % ep:
            raise ctx.error(f"{path}.ep", f"ep = {ep} must divide dp*cp = {dp * cp} (experts are sharded across "
                            "data-parallel ranks)")
    mb = j["micro_batch"]
    if j["global_batch"] % dp:
        raise ctx.error(f"{path}.global_batch", f"{j['global_batch']} sequences do not split evenly over "
                        f"dp = {dp}; expected a multiple of {dp}")
    if mb != "auto" and j["global_batch"] % (dp * mb):
        raise ctx.error(f"{path}.global_batch", f"{j['global_batch']} is not divisible by dp*micro_batch = "
                        f"{dp}*{mb} = {dp * mb}; expected a multiple of {dp * mb}")
    v = j["virtual_stages"]
    if v != "auto" and v > 1:
        if pp == 1:
            raise ctx.error(f"{path}.virtual_stages", "interleaving needs pp > 1; expected virtual_stages = 1")
        if model.layers < pp * v:
            raise ctx.error(f"{path}.virtual_stages", f"pp*virtual_stages = {pp * v} exceeds the model's "
                            f"{model.layers} layers")
        if j["schedule"] == "gpipe":
            raise ctx.error(f"{path}.virtual_stages", "interleaved stages need schedule = \"1f1b\"")
    if j["attention_kernel"] == "flash3" and not cluster.gpu.flash3_tflops:
        raise ctx.error(f"{path}.attention_kernel", f"{cluster.gpu.name} has no FlashAttention-3 / cuDNN fused "
                        "attention figure (Hopper and newer); expected \"flash2\" or \"auto\"")
    if j["precision"] == "fp8" and not cluster.gpu.fp8_tflops:
        raise ctx.error(f"{path}.precision", f"{cluster.gpu.name} has no FP8 tensor cores; expected \"bf16\"")
    return Job(name=name, model=model, seq_len=j["seq_len"], global_batch=j["global_batch"], micro_batch=mb,
               tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, virtual_stages=v, recompute=j["recompute"],
               precision=j["precision"], zero=j["zero"], schedule=j["schedule"],
               sequence_parallel=j["sequence_parallel"], first_gpu=first, gpus=gpus, kind=j["kind"],
               request_rate=j["request_rate"] or 0.0, prompt_tokens=j["prompt_tokens"],
               output_tokens=j["output_tokens"], max_batch=j["max_batch"], attention_kernel=j["attention_kernel"],
               dropout=j["dropout"], overlap_p2p_comm=j["overlap_p2p_comm"], fused_kernels=j["fused_kernels"],
               overlap_grad_reduce=j["overlap_grad_reduce"], overlap_param_gather=j["overlap_param_gather"],
               tp_comm_overlap=j["tp_comm_overlap"], grad_reduce_dtype=j["grad_reduce_dtype"])


def _inference_defaults(ctx: Context, path: str, j: dict[str, Any]) -> None:
    """An inference job serves requests: its "sequence" is a prompt plus its output, one per replica slot."""
    if j["request_rate"] is None:
        raise ctx.error(f"{path}.request_rate", "missing required key for an inference job "
                        "(requests per second, a number)")
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
