"""Where a real GPU sits in the cluster: its host (the DCGM exporter's `Hostname` label, or Prometheus's
`instance`) becomes a node, and its `gpu` label the slot in that node.

Nodes follow `cluster.hosts` when the cluster table lists them (node 0 first; a name may be a hostname, an
instance's address, or that address with its port). Otherwise hosts are numbered in natural order ("node2"
before "node10") as they are first seen: every host of the first window (import: the dumps covering the
earliest time; watch: the exporters' URLs, or a Prometheus server's first answers) in that order, and hosts
that appear later in the next free nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..config.errors import UserError

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders embedded numbers by value: node2 < node10 (and 10.0.0.9 < 10.0.0.10)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in _DIGITS.split(name) if part)


def without_port(instance: str) -> str:
    """'10.0.0.7:9400' -> '10.0.0.7'; '[fe80::1]:9400' -> 'fe80::1'; a name without a port is itself."""
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance


def host_names(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The names a series' host goes by, the preferred first: Hostname, instance without port, instance."""
    names: list[str] = []
    for name in (labels.get("Hostname"), without_port(labels.get("instance", "")), labels.get("instance")):
        if name and name not in names:
            names.append(name)
    return tuple(names)


class Placement:
    """Host name -> node index, for a cluster of `nodes` nodes of `per_node` GPUs."""

    def __init__(self, nodes: int, per_node: int, hosts: Iterable[str] = ()) -> None:
        self.nodes = nodes
        self.per_node = per_node
        self.fixed = bool(tuple(hosts))          # cluster.hosts given: no other host is placed
        self.order: list[str] = []               # node i's host name
        self.index: dict[str, int] = {}          # every name a placed host goes by -> its node
        self.unplaced: dict[str, int] = {}       # host -> series seen from it but not placed
        #                                          (for one warning)
        for name in hosts:
            self._add(name)

    def _add(self, name: str) -> int:
        node = len(self.order)
        self.order.append(name)
        self.index[name] = node
        return node

    def node_of(self, names: tuple[str, ...]) -> int | None:
        """The node of a host known by `names` (host_names), aliases learnt on the way;
        None when not placed."""
        index = self.index
        for name in names:
            node = index.get(name)
            if node is not None:
                for alias in names:
                    index.setdefault(alias, node)
                return node
        return None

    def place(self, hosts: Iterable[tuple[str, ...]]) -> list[str]:
        """Give nodes to the hosts not placed yet, in natural order of their preferred name; returns those
        placed. Hosts beyond the cluster's nodes (or not in cluster.hosts) are counted in `unplaced`."""
        new: dict[str, tuple[str, ...]] = {}
        for names in hosts:
            if names and self.node_of(names) is None:
                new.setdefault(names[0], names)
        placed = []
        for first in sorted(new, key=natural_key):
            if self.fixed or len(self.order) >= self.nodes:
                self.unplaced[first] = self.unplaced.get(first, 0) + 1
                continue
            node = self._add(first)
            for alias in new[first]:
                self.index.setdefault(alias, node)
            placed.append(first)
        return placed

    def gpu_of(self, names: tuple[str, ...], slot: str) -> int | None:
        """The cluster GPU of slot `slot` (the gpu label) on the host, or None (not placed, bad slot)."""
        node = self.node_of(names)
        if node is None or not slot.isdigit():
            return None
        local = int(slot)
        return node * self.per_node + local if local < self.per_node else None

    def check_slot(self, slot: str | None, where: str) -> None:
        """UserError unless a gpu label is a slot of a node of this cluster."""
        if slot is None:
            raise UserError('a DCGM series has no "gpu" label; expected the dcgm-exporter\'s gpu and '
                            "Hostname (or instance) labels", where)
        if not slot.isdigit() or int(slot) >= self.per_node:
            raise UserError(f'gpu label {slot[:20]!r} is not a slot of a node of {self.per_node} GPUs; '
                            f"expected 0 to {self.per_node - 1} (cluster.gpus_per_node)", where)
