"""Unexpected faults: when they strike, what they hit (a GPU, a node or a NIC link),
and how an event names them.

Every cause of Llama 3 Table 5 is its own Poisson process, per component. Rates come from the 54-day, 16K-GPU
counts (engine/config/catalogs/faults.toml) divided by the number of components of the kind that causes them
(GPUs, hosts, network links), so a cluster of any size gets proportionally more or fewer. Each fault names a
concrete GPU, node or link. Planned interruptions (maintenance) are a per-job Poisson process. What a job does
about them is engine/sim/lifecycle.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.catalog import DAY, cause, causes
from .hooks import rng


@dataclass(frozen=True)
class Fault:
    t: float
    cause: str
    component: str        # "gpu" | "node" | "link"
    index: int            # GPU index, node index or link index (link i = the NIC link of GPU i)
    gpu: int              # a GPU the fault concerns (for a link: the GPU behind its NIC)
    scope: str
    injected: bool = False   # scheduled by the scenario or the user, not drawn


def schedule(first_gpu: int, gpus: int, gpus_per_node: int, start_s: float, end_s: float, seed: int,
             rate_scale: float = 1.0, stream: str = "") -> list[Fault]:
    """Every unexpected fault hitting GPUs [first_gpu, first_gpu + gpus) during [start_s, end_s),
    sorted by time.

    Each cause is a Poisson process of rate n * lambda; arrival times are uniform given the count, which is
    the same process drawn in one vectorized step. The run still reacts to them one by one. `stream` names the
    random streams (the run passes the job's name, so two jobs of the same size do not fail alike).
    """
    span = end_s - start_s
    if span <= 0 or gpus <= 0 or rate_scale <= 0:
        return []
    first_node = first_gpu // gpus_per_node
    nodes = -(-gpus // gpus_per_node)
    out: list[Fault] = []
    for c in causes():
        n = gpus if c.component in ("gpu", "link") else nodes
        draw = rng(seed, stream + c.name)       # a stream per cause: the same faults in any order
        k = int(draw.poisson(c.rate_per_s * n * span * rate_scale))
        if not k:
            continue
        times = start_s + draw.random(k) * span
        picks = draw.integers(0, n, k)
        for t, i in zip(times.tolist(), picks.tolist()):
            if c.component == "host":
                node = first_node + i
                out.append(Fault(t, c.name, "node", node, max(node * gpus_per_node, first_gpu), c.scope))
            else:
                out.append(fault_at(t, first_gpu + i, c.name, gpus_per_node, injected=False))
    out.sort(key=lambda f: (f.t, f.cause))
    return out


def expected(gpus: int, gpus_per_node: int, span_s: float, rate_scale: float,
             planned_per_day: float) -> float:
    """How many interruptions (random faults and planned ones) a job of `gpus` expects over `span_s`."""
    nodes = -(-gpus // gpus_per_node)
    rate = sum(c.rate_per_s * (gpus if c.component in ("gpu", "link") else nodes) for c in causes())
    return rate * rate_scale * span_s + planned_per_day * span_s / DAY


def fault_at(t: float, gpu: int, name: str, gpus_per_node: int, injected: bool = True) -> Fault:
    """A fault of a given cause at one GPU: its GPU, its node (host causes)
    or its NIC link (network causes)."""
    c = cause(name)
    if c.component == "host":
        return Fault(t, c.name, "node", gpu // gpus_per_node, gpu, c.scope, injected)
    return Fault(t, c.name, "link" if c.component == "link" else "gpu", gpu, gpu, c.scope, injected)


def planned(start_s: float, end_s: float, per_day: float, seed: int, job: str) -> list[float]:
    """Times of planned interruptions (maintenance windows) for one job: a Poisson process of `per_day`."""
    span = end_s - start_s
    if span <= 0 or per_day <= 0:
        return []
    draw = rng(seed, f"planned:{job}")
    k = int(draw.poisson(per_day * span / DAY))
    return sorted((start_s + draw.random(k) * span).tolist())


def fault_fields(fault: Fault, gpus_per_node: int) -> dict[str, Any]:
    """The keys of a `fault` event that say what failed and where."""
    c = cause(fault.cause)
    out: dict[str, Any] = {"cause": fault.cause, "category": c.category, "component": fault.component,
                           "gpu": fault.gpu, "node": fault.gpu // gpus_per_node, "scope": fault.scope}
    if fault.component == "link":
        out["link"] = fault.index
    if fault.injected:
        out["injected"] = True
    return out
