"""Scenario files (TOML, format v1): loading, validation and the typed objects everything downstream uses.

Validation happens here, once: the [cluster] table in engine/config/cluster.py, each [[jobs]] table in
engine/config/job.py, the rest (faults, checkpoints, variability, economics) here. A bad scenario ends in one
UserError line naming the file, the line or key path, what is wrong and what is expected.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import catalog
from .cluster import MAX_GPUS, Cluster, check_cluster
from .errors import UserError, quote
from .fields import (
    Context,
    Field,
    Sections,
    array_of_tables,
    check_table,
    check_table_memo,
    did_you_mean,
    memo_section,
    optional,
)
from .job import Job, check_disjoint, check_job
from .tomlfile import read_toml
from .units import parse_duration

FORMAT_VERSION = 1
MAX_JOBS = 1_000


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
    mode: str                    # "sync": all GPUs wait while writing | "async": snapshot to host,
                                 # write behind
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
    cloud_usd_per_accelerator_hour: float = 0.0   # > 0: rented at this price
                                                  # (power included) instead of owned

    def usd_per_hour(self, gpus: int, facility_w: float) -> float:
        """What `gpus` accelerators drawing `facility_w` cost per hour: rented,
        or owned plus their electricity."""
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
    compare_with: str = ""       # the twin `clustertop compare` shows beside it
                                 # (a built-in name or a .toml path)
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

@cache
def builtin_dir() -> Path:
    """Where the built-in scenarios are: package data of clustertop.engine.config.scenarios (found once)."""
    return Path(str(resources.files("clustertop.engine.config.scenarios")))


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
            raise UserError(f"unknown scenario{hint}; expected a built-in name "
                            f"({', '.join(builtin_names())}) or a path to a .toml file", arg)
    return Path(arg)


def load(arg: str) -> Scenario:
    """Load and validate a scenario given by built-in name or path."""
    path = resolve_path(arg)
    data, text = read_toml(path)
    return parse(data, Context(str(path), text), str(path))


def parse(data: dict[str, Any], ctx: Context, path: str = "", sections: Sections | None = None) -> Scenario:
    """Validate a scenario's raw table. `sections`: a sweep's memo of the tables its points share
    (see fields.memo_section)."""
    top = check_table_memo(sections, ctx, "", data, TOP_SPEC)
    cluster = memo_section(sections, "cluster", (top["cluster"],), lambda: check_cluster(ctx, top["cluster"]))
    raw_jobs = top["jobs"]
    if isinstance(raw_jobs, dict):
        raw_jobs = [raw_jobs]
    if not isinstance(raw_jobs, list) or not raw_jobs:
        raise ctx.error("jobs", "expected at least one [[jobs]] table")
    if len(raw_jobs) > MAX_JOBS:
        raise ctx.error("jobs", f"{len(raw_jobs):,} jobs; expected at most {MAX_JOBS:,} (each job is "
                        "estimated and simulated on its own, and every sample carries each job's status)")
    jobs: list[Job] = []
    next_gpu = 0
    for i, raw in enumerate(raw_jobs):
        job = check_job(ctx, f"jobs[{i}]", raw, cluster, next_gpu, sections)
        jobs.append(job)
        next_gpu = job.first_gpu + job.gpus
    check_disjoint(ctx, jobs)
    seen: dict[str, int] = {}
    for i, job in enumerate(jobs):
        if seen.setdefault(job.name, i) != i:
            raise ctx.error(f"jobs[{i}].name",
                            f"job name {quote(job.name)} is also jobs[{seen[job.name]}]'s; "
                            "expected unique job names")
    faults = memo_section(sections, "faults", (top["faults"], top["cluster"]),
                      lambda: _faults(ctx, top["faults"], cluster))
    checkpoint = memo_section(sections, "checkpoint", (top["checkpoint"],),
                              lambda: _checkpoint(ctx, top["checkpoint"]))
    variability = memo_section(sections, "variability", (top["variability"],),
                           lambda: Variability(**check_table(ctx, "variability", top["variability"] or {},
                                                             VARIABILITY_SPEC)))
    economics = memo_section(sections, "economics", (top["economics"],),
                             lambda: _economics(ctx, top["economics"]))
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


def _injections(ctx: Context, raw: Any, cluster: Cluster) -> tuple[Injection, ...]:
    """[[faults.inject]]: faults at given times and GPUs, with a Table 5 cause."""
    from .catalog import causes

    raw = array_of_tables(ctx, "faults.inject", raw,
                          "expected an array of [[faults.inject]] tables (at, gpu, cause)")
    if not raw:
        return ()
    names = [c.name for c in causes()]
    out = []
    for i, entry in enumerate(raw):
        path = f"faults.inject[{i}]"
        e = check_table(ctx, path, entry, INJECT_SPEC)
        if e["gpu"] >= cluster.gpus:
            raise ctx.error(f"{path}.gpu", f"GPU {e['gpu']:,} is not in the cluster; expected 0 to "
                            f"{cluster.gpus - 1:,}")
        if e["cause"] not in names:
            raise ctx.error(f"{path}.cause",
                            f"unknown cause {e['cause']!r}{did_you_mean(e['cause'], names)}; "
                            f"expected a Llama 3 Table 5 cause such as \"Faulty GPU\" or \"Software bug\"")
        out.append(Injection(at_s=e["at"], gpu=e["gpu"], cause=e["cause"]))
    return tuple(sorted(out, key=lambda x: (x.at_s, x.gpu)))


def load_cluster(arg: str) -> tuple[str, Cluster, tuple[Job, ...]]:
    """(name, cluster, jobs) of a scenario file, or of a file with only a [cluster] table (and an optional
    name): where real telemetry is placed. Jobs, when the file has them, say which GPUs run what."""
    path = resolve_path(arg)
    data, text = read_toml(path)
    ctx = Context(str(path), text)
    if isinstance(data, dict) and "jobs" in data:
        s = parse(data, ctx, str(path))
        return s.name, s.cluster, s.jobs
    spec = {**TOP_SPEC, "name": optional("str", path.stem), "jobs": optional("any", None)}
    top = check_table(ctx, "", data, spec)
    return top["name"], check_cluster(ctx, top["cluster"]), ()
