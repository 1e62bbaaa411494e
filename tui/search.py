"""Finding places of the cluster by what people call them: a GPU by its index, a node, rack, pod or building
by its number, a host by its name (real telemetry), a job by its name; and the place an event names.

A query is `1000` or `gpu 1000` (a GPU), `node 125` (or `n125`), `rack 13`, `pod 3`, `building 2`, or text:
the jobs and hosts whose names contain it. Hits are sorted by their first GPU (ties by label): `n`/`N` step
through them in that order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clustertop.engine.stream.state import ClusterState

from . import jobinfo

LEVELS = {"gpu": "gpu", "g": "gpu", "node": "node", "n": "node", "rack": "rack", "r": "rack", "pod": "pod",
          "p": "pod", "building": "building", "b": "building"}
SIZE_KEYS = {"node": "gpus_per_node", "rack": "gpus_per_rack", "pod": "gpus_per_pod",
             "building": "gpus_per_building"}
_NUMBERED = re.compile(r"^(?:(gpu|g|node|n|rack|r|pod|p|building|b)\s*#?\s*)?(\d[\d,_]*)$")


@dataclass(frozen=True)
class Hit:
    """A place found: GPUs [gpu0, gpu1) and how to say it ('node 125', 'job pretrain')."""

    label: str
    gpu0: int
    gpu1: int


def _size(state: ClusterState, level: str) -> int:
    if level == "gpu":
        return 1
    value = state.topology.get(SIZE_KEYS[level])
    return int(value) if isinstance(value, int) and value > 0 else state.gpus


def hosts(state: ClusterState) -> list[str]:
    """The host name of each node of real telemetry, as shown (jobinfo.host_of); [] without."""
    return [jobinfo.host_of(state, node) or "" for node in range(len(jobinfo.hosts(state)))]


def find(query: str, state: ClusterState) -> list[Hit]:
    """Every place `query` names, in GPU order; [] when none."""
    text = query.strip().lower()
    if not text:
        return []
    numbered = _NUMBERED.match(text)
    if numbered:
        level = LEVELS[numbered.group(1) or "gpu"]
        number = int(numbered.group(2).replace(",", "").replace("_", ""))
        size = _size(state, level)
        if number * size >= state.gpus:
            return []
        return [Hit(f"{level} {number:,}", number * size, min(state.gpus, (number + 1) * size))]
    hits = [Hit(f"job {job.name}", job.first_gpu, job.first_gpu + job.gpus)
            for job in state.jobs.values() if text in job.name.lower()]
    per_node = _size(state, "node")
    hits += [Hit(f"host {name}", node * per_node, min(state.gpus, (node + 1) * per_node))
             for node, name in enumerate(hosts(state))
             if text in name.lower() and node * per_node < state.gpus]
    return sorted(hits, key=lambda h: (h.gpu0, h.label))


def place_of(event: dict[str, Any], state: ClusterState) -> Hit | None:
    """The place an event names, most precise first: its GPU, node, host, rack, or job."""
    for key in ("gpu", "node", "rack"):
        value = event.get(key)
        if type(value) is int and value >= 0:
            found = find(f"{key} {value}", state)
            if found:
                return found[0]
    host = event.get("host")
    if isinstance(host, str):
        names = hosts(state)
        if host in names:
            per_node = _size(state, "node")
            node = names.index(host)
            return Hit(f"host {host}", node * per_node, min(state.gpus, (node + 1) * per_node))
    job = state.jobs.get(str(event.get("job") or ""))
    if job is not None:
        return Hit(f"job {job.name}", job.first_gpu, job.first_gpu + job.gpus)
    return None
