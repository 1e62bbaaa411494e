"""Where a real GPU sits in the cluster: its host (the DCGM exporter's `Hostname` label, `hostname` in
dcgm-exporter since May 2026, else Prometheus's whole `instance`, address and port) becomes a node, and its
`gpu` label the slot in that node. An address alone never names a host: exporters behind one address (a
port-forward, NAT, a proxy, several exporters on one machine) are as many hosts as they have ports. Series
with no GPU (node_exporter's NIC ports, on another port of the host) go to the node whose instance has their
address, when exactly one node does.

Nodes follow `cluster.hosts` when the cluster table lists them (node 0 first; a name may be a hostname, an
instance's address and port, or an address alone, which then names the node of every port at it).
Otherwise hosts are numbered in natural order ("node2" before "node10"): the hosts of the import's first
window (every dump covering the earliest time is read before any host is placed, so file order does not
matter), or watching, the exporters' URLs or a
Prometheus server's first answers; hosts that appear later take the next free nodes, or are reported as not
placed when there is none.
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


HOST_LABELS = ("Hostname", "hostname")      # dcgm-exporter's host label, before and after May 2026


def host_names(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The names a series' host goes by, the preferred first: its host label (either spelling), then its
    whole instance (address and port); never the address alone."""
    names: list[str] = []
    for name in (labels.get("Hostname") or labels.get("hostname"), labels.get("instance")):
        if name and name not in names:
            names.append(name)
    return tuple(names)


def some(names: list[str]) -> str:
    return ", ".join(repr(n[:60]) for n in names[:3]) + (f" and {len(names) - 3:,} more" if len(names) > 3
                                                          else "")


def no_match(wanted: list[str], found: list[str], what: str) -> str:
    """The message for cluster.hosts naming none of the hosts found: both sides, and a suggestion when the
    names differ only by their domain (a fully qualified name against a short one)."""
    found = sorted(set(found), key=natural_key)
    hint = ""
    if any("." in w and w.split(".", 1)[0] in {h.split(".", 1)[0] for h in found} for w in wanted):
        hint = "; cluster.hosts names the hosts with a domain and the telemetry without: drop the domain"
    elif any("." in h and h.split(".", 1)[0] in {w.split(".", 1)[0] for w in wanted} for h in found):
        hint = "; the telemetry names the hosts with a domain and cluster.hosts without: add the domain"
    return (f"cluster.hosts ({some(wanted)}) matches none of {what} ({some(found)}){hint}; expected "
            "the exporters' Hostname (or hostname) labels or instances (address:port)")


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
        self.addresses: dict[str, set[int]] = {}  # address -> the nodes whose instances are at it
        self.given: dict[str, int] = {}          # cluster.hosts' addresses given without a port
        self.unplaced_told: set[str] = set()     # hosts answering with no node, already reported
        for name in hosts:
            node = self._add(name)
            if without_port(name) == name:
                self.given[name] = node

    def _add(self, name: str) -> int:
        node = len(self.order)
        self.order.append(name)
        self._learn(name, node)
        return node

    def _learn(self, name: str, node: int) -> None:
        if self.index.setdefault(name, node) == node:
            address = without_port(name)
            if address != name:
                self.addresses.setdefault(address, set()).add(node)

    def node_of(self, names: tuple[str, ...]) -> int | None:
        """The node of a host known by `names` (host_names), aliases learnt on the way;
        None when not placed."""
        index = self.index
        for name in names:
            node = index.get(name)
            if node is not None:
                break
        else:
            node = next((self.given[a] for a in map(without_port, names) if a in self.given), None)
            if node is None:
                return None
        for alias in names:
            if alias not in index:
                self._learn(alias, node)
        return node

    def node_near(self, names: tuple[str, ...]) -> int | None:
        """The node of a series with no GPU (a NIC port of node_exporter, on another port of the host): its
        host's, else the one node whose instance has the same address; None when none or several do."""
        node = self.node_of(names)
        if node is not None:
            return node
        for name in names:
            nodes = self.addresses.get(without_port(name))
            if nodes is not None and len(nodes) == 1:
                return next(iter(nodes))
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
                self._learn(alias, node)
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
