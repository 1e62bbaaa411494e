"""Random interruptions: every cause of Llama 3 Table 5 as its own Poisson process, per component.

Rates come from the 54-day, 16K-GPU counts (engine/catalogs/faults.toml) divided by the number of components of
the kind that causes them (GPUs, hosts, network links), so a cluster of any size gets proportionally more or fewer.
Each fault names a concrete GPU, node or link. Planned interruptions (maintenance) are a per-job process.
"""

from __future__ import annotations

import tomllib
import zlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

DAY = 86400.0


@dataclass(frozen=True)
class Cause:
    name: str
    count: int            # interruptions in the reference snapshot
    component: str        # "gpu" | "host" | "link": what the rate scales with
    category: str
    scope: str            # "node": the node is out until replaced; "link": a network link; "job": software only
    rate_per_s: float     # per component


@dataclass(frozen=True)
class Fault:
    t: float
    cause: str
    component: str        # "gpu" | "node" | "link"
    index: int            # GPU index, node index or link index (link i = the NIC link of GPU i)
    gpu: int              # a GPU the fault concerns (for a link: the GPU behind its NIC)
    scope: str


@cache
def causes() -> tuple[Cause, ...]:
    with resources.files("engine.catalogs").joinpath("faults.toml").open("rb") as f:
        data = tomllib.load(f)
    days = data["reference_days"]
    counts = {"gpu": data["reference_gpus"], "host": data["reference_hosts"], "link": data["reference_links"]}
    return tuple(Cause(name=name, count=c["count"], component=c["component"], category=c["category"],
                       scope=c["scope"], rate_per_s=c["count"] / (counts[c["component"]] * days * DAY))
                 for name, c in data["causes"].items())


def expected_count(gpus: int, gpus_per_node: int, seconds: float, rate_scale: float = 1.0) -> float:
    """Mean number of unexpected interruptions for a job on `gpus` GPUs over `seconds`."""
    n = {"gpu": gpus, "host": -(-gpus // gpus_per_node), "link": gpus}
    return rate_scale * seconds * sum(c.rate_per_s * n[c.component] for c in causes())


def _rng(seed: int, name: str) -> np.random.Generator:
    """An independent, reproducible stream per cause: the same seed gives the same faults in any order."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def schedule(first_gpu: int, gpus: int, gpus_per_node: int, start_s: float, end_s: float, seed: int,
             rate_scale: float = 1.0) -> list[Fault]:
    """Every unexpected fault hitting GPUs [first_gpu, first_gpu + gpus) during [start_s, end_s), sorted by time.

    Each cause is a Poisson process of rate n * lambda; arrival times are uniform given the count, which is the
    same process drawn in one vectorized step. The run still reacts to them one by one.
    """
    span = end_s - start_s
    if span <= 0 or gpus <= 0 or rate_scale <= 0:
        return []
    first_node = first_gpu // gpus_per_node
    nodes = -(-gpus // gpus_per_node)
    out: list[Fault] = []
    for cause in causes():
        n = gpus if cause.component in ("gpu", "link") else nodes
        rng = _rng(seed, cause.name)
        k = int(rng.poisson(cause.rate_per_s * n * span * rate_scale))
        if not k:
            continue
        times = start_s + rng.random(k) * span
        picks = rng.integers(0, n, k)
        for t, i in zip(times.tolist(), picks.tolist()):
            if cause.component == "host":
                node = first_node + i
                gpu = node * gpus_per_node
                out.append(Fault(t, cause.name, "node", node, gpu, cause.scope))
            elif cause.component == "link":
                gpu = first_gpu + i
                out.append(Fault(t, cause.name, "link", gpu, gpu, cause.scope))
            else:
                gpu = first_gpu + i
                out.append(Fault(t, cause.name, "gpu", gpu, gpu, cause.scope))
    out.sort(key=lambda f: (f.t, f.cause))
    return out


def planned(start_s: float, end_s: float, per_day: float, seed: int, job: str) -> list[float]:
    """Times of planned interruptions (maintenance windows) for one job: a Poisson process of `per_day`."""
    span = end_s - start_s
    if span <= 0 or per_day <= 0:
        return []
    rng = _rng(seed, f"planned:{job}")
    k = int(rng.poisson(per_day * span / DAY))
    return sorted((start_s + rng.random(k) * span).tolist())


def young_daly_interval(checkpoint_s: float, interruptions_per_s: float) -> float:
    """The checkpoint interval that minimises expected lost time: sqrt(2 C / rate) (Young 1974, Daly 2006)."""
    if interruptions_per_s <= 0:
        return float("inf")
    return float(np.sqrt(2.0 * checkpoint_s / interruptions_per_s))
