"""The [cluster] table of a scenario: the typed Cluster everything downstream uses, and its checks.

Which GPU and fabrics (catalog entries), how GPUs are grouped (scale-up domain, rack, pod, building), the
fabric's oversubscription and degraded links, the site's PUE and power budget (`gpus = "auto"` sizes the site
from it) and the host names real telemetry is placed by. Checked once, at load time: a mistake is one line
naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import catalog, facility
from .catalog import GPU, Fabric
from .errors import quote
from .fields import Context, Field, array_of_tables, catalog_entry, check_table, optional
from .frozen import hash_once, state_without_hash
from .optics import SiteOptics, site_optics

MAX_GPUS = 10_000_000


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
    __hash__ = hash_once              # (hashed again at every cache lookup otherwise)
    __getstate__ = state_without_hash

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
    torus: tuple[int, ...] = ()                   # a torus scale-up: the domain's extent per dimension,
                                                  # x first
    optics: str = "pluggable"                     # OPTICS: the transceivers of the optical links
    building_distance_km: float = 0.0             # fibre between buildings:
                                                  # 4.9 us per km on collectives crossing
    hosts: tuple[str, ...] = ()   # node i's host name (real telemetry: docs/telemetry.md); empty:
                                  # hostname order

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @cached_property
    def transceivers(self) -> SiteOptics:
        """The optical transceivers of its fabric and their power (engine/config/optics.py), counted once."""
        return site_optics(self)

    def oversubscription(self) -> dict[str, float]:
        """Each tier above the leaf, by the oversubscription of the uplinks that cross it
        (Geometry.block_sizes): a rack's (spine), a pod's (core), a building's (campus)."""
        return {"spine": self.rack_oversubscription, "core": self.pod_oversubscription,
                "campus": self.building_oversubscription}

    @property
    def node_link(self) -> Fabric:
        """The fabric GPUs of one scale-up domain talk over: the GPU's scale-up links,
        or PCIe through the host."""
        return self.pcie if self.scale_up == "pcie" else self.scale_up_link


CLUSTER_SPEC: dict[str, Field] = {
    "gpu": Field("str"),
    "gpus": Field("int", positive=True, high=MAX_GPUS, auto=True),   # "auto": as many as the power
                                                                     # budget holds
    "gpus_per_node": optional("int", None, positive=True, high=100_000),   # default: by scale_up
    "scale_up": optional("str", None, choices=SCALE_UPS),                  # default: the GPU's, as built
    "node_fabric": optional("str", None, choices=("nvswitch", "pcie")),    # the older name of scale_up
    "torus": optional("any", None, doc="an array of 2 (torus-2d) or 3 (torus-3d) positive integers"),
    "pcie": optional("str", "pcie-gen5", choices=("pcie-gen4", "pcie-gen5")),
    "scale_out": optional("str", "ib-ndr-400g"),
    "nics_per_node": optional("int", None, positive=True, high=1024),   # default: one per GPU
    "gpus_per_rack": optional("int", None, positive=True, high=100_000),   # default 16,
                                                                           # or one scale-up domain
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

def check_cluster(ctx: Context, table: dict[str, Any]) -> Cluster:
    """The [cluster] table checked: catalog entries resolved, defaults by scale-up,
    the size from the budget."""
    c = check_table(ctx, "cluster", table, CLUSTER_SPEC)
    gpu = catalog_entry(ctx, "cluster.gpu", c.pop("gpu"), catalog.gpus())
    fabrics = catalog.fabrics()
    link = fabrics[gpu.scale_up_link]
    _scale_up(ctx, c, gpu, link)
    scale_out = catalog_entry(ctx, "cluster.scale_out", c.pop("scale_out"), catalog.scale_out_fabrics())
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
    """gpus = "auto": the most GPUs, in whole racks, the site's budget powers at full load,
    optics included."""
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
            raise ctx.error("cluster.node_fabric",
                            "node_fabric is the older name of scale_up; expected one of them")
        c["scale_up"] = c["node_fabric"]
    allowed = scale_ups(gpu, link)
    scale_up = c["scale_up"] or gpu.scale_up
    if scale_up not in allowed:
        raise ctx.error("cluster.scale_up", f"{gpu.name} cannot have a {scale_up!r} scale-up domain "
                        f"(its links are {link.name}); expected " + " or ".join(f'"{a}"' for a in allowed))
    c["scale_up"] = scale_up
    dims = TORUS_DIMS.get(scale_up)
    if c["torus"] is not None and dims is None:
        raise ctx.error("cluster.torus",
                        f'a torus shape needs scale_up = "torus-2d" or "torus-3d", not {scale_up!r}')
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
    """The torus shape: as given, else the most balanced one of gpus_per_node (default: the cluster, at most
    the GPU's domain) chips."""
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
    """The factorisation of n in `dims` factors closest to a cube (smallest largest/smallest ratio),
    ascending."""
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
    per_pod: int = c["gpus_per_rack"] * c["racks_per_pod"]
    gpus: int = c["gpus"]
    return -(-gpus // per_pod)


def _hosts(ctx: Context, raw: Any, nodes: int) -> tuple[str, ...]:
    """cluster.hosts: which host is node 0, 1, ... when real telemetry is placed on the cluster (names as the
    DCGM exporter's Hostname label or Prometheus's instance, with or without its port)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(h, str) and h.strip() and len(h) <= 256 for h in raw):
        raise ctx.error("cluster.hosts", "expected an array of host names (non-empty strings of at most 256 "
                        "characters), node 0 first")
    if len(raw) > nodes:
        raise ctx.error("cluster.hosts",
                        f"{len(raw):,} hosts for {nodes:,} nodes; expected at most one per node")
    seen: set[str] = set()
    for i, host in enumerate(raw):
        if host in seen:
            raise ctx.error("cluster.hosts",
                            f"{quote(host)} is listed twice (hosts[{i}]); expected each host once")
        seen.add(host)
    return tuple(raw)


def _degraded(ctx: Context, raw: Any, pods: int) -> tuple[DegradedLinks, ...]:
    raw = array_of_tables(ctx, "cluster.degraded", raw, "expected an array of [[cluster.degraded]] tables")
    out = []
    for i, entry in enumerate(raw):
        d = check_table(ctx, f"cluster.degraded[{i}]", entry, DEGRADED_SPEC)
        if d["pod"] is not None and d["pod"] >= pods:
            raise ctx.error(f"cluster.degraded[{i}].pod", f"pod {d['pod']} does not exist; the cluster has "
                            f"{pods} pod(s), numbered from 0")
        out.append(DegradedLinks(**d))
    return tuple(out)


def parse_cluster(table: dict[str, Any], where: str) -> Cluster:
    """A [cluster] table built by the program (a watched cluster's), checked as a file's would be."""
    return check_cluster(Context(where), table)
