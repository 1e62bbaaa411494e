"""Link tiers: saturation of NVLink or PCIe, leaf, spine, between pods and buildings: the busiest link now,
each pod's load at a glance (a degraded spine in one pod stands out), the hottest links, the tiers jobs share
(each job's share and slowdown) and the degraded ones."""

from __future__ import annotations

import numpy as np
from clustertop.engine.config.geometry import TIERS
from clustertop.engine.stream.state import ClusterState
from rich.text import Text

from .. import charts, jobinfo
from ..display import DisplayState
from .panel import Panel

# the scale-up tier by the header's scale_up link (catalog fabric names)
SCALE_UP_LABELS = (("nvlink", "NVLink"), ("xgmi", "xGMI"), ("ici", "ICI"), ("neuronlink", "NeuronLink"),
                   ("gaudi3-roce", "RoCE (chip)"))


def tier_label(tier: str, state: ClusterState) -> str:
    cluster = jobinfo.cluster(state)
    if tier == "node":
        up = state.header.get("scale_up")
        link = str(up.get("link", "")) if isinstance(up, dict) else ""
        if cluster.get("node_fabric") == "pcie" or link.startswith("pcie"):
            return "PCIe (host)"
        return next((label for prefix, label in SCALE_UP_LABELS if link.startswith(prefix)), "NVLink")
    if tier == "leaf":
        return "leaf (ToR)"
    if tier == "core":
        over = cluster.get("pod_oversubscription")
        return f"pods 1:{over:g}" if over and over != 1 else "between pods"
    if tier == "campus":
        return "buildings"
    return tier


def load_style(load: float) -> str:
    return "red" if load >= 0.9 else "yellow" if load >= 0.7 else "green"


def strip_group(n: int, width: int, pods_per_building: int) -> tuple[int, int, int]:
    """(pods per character, pods per building, gaps between buildings) of a strip of n pods in `width`."""
    per_building = pods_per_building if 1 < pods_per_building < n else n
    gaps = n // per_building - 1 if per_building < n else 0
    group = max(1, -(-n // max(1, width - gaps)))
    return group, per_building, 0 if group > 1 else gaps


def pod_strip(loads: np.ndarray, width: int, pods_per_building: int) -> tuple[str, list[float]]:
    """One character per pod (or per group of pods, their maximum, when they do not fit), as high as its load
    (a quarter or the tier's busiest is full height, so a low load stays low and one pod apart stands out); a
    space between buildings when they fit."""
    n = loads.size
    group, per_building, gaps = strip_group(n, width, pods_per_building)
    cells: list[float] = [float(loads[i:i + group].max()) for i in range(0, n, group)]
    top = max(max(cells), 0.25)
    out = []
    for k, load in enumerate(cells):
        if gaps and k and (k * group) % per_building == 0:
            out.append(" ")
        out.append(charts.spark(load / top))
    return "".join(out), cells


def scope(state: ClusterState, tier: str) -> str:
    """What a tier's list of loads is per: "pod" or "building"."""
    return "building" if state.link_scope.get(tier) == "building" else "pod"


def hottest(state: ClusterState, count: int = 3) -> list[tuple[str, str, float]]:
    """The most loaded links: (tier, where: "pod 3", "building 1" or "site", load), highest first."""
    found: list[tuple[str, str, float]] = []
    for tier, loads in state.links.items():
        if loads.size > 1:
            for block in np.argsort(-loads, kind="stable")[:count]:
                found.append((tier, f"{scope(state, tier)} {int(block)}", float(loads[block])))
        elif loads.size:
            found.append((tier, "site", float(loads[0])))
    return sorted(found, key=lambda item: -item[2])[:count]


DEGRADED_STYLE = "bold black on yellow"      # a degraded link's pod in the strip, and the line naming it


def degraded_pods(state: ClusterState, tier: str, n: int) -> np.ndarray:
    """Which of a tier's n blocks the scenario degrades (every one for a degradation of every pod)."""
    out = np.zeros(n, dtype=bool)
    for d in jobinfo.cluster(state).get("degraded") or []:
        if isinstance(d, dict) and d.get("tier") == tier and float(d.get("capacity", 1.0) or 1.0) < 1.0:
            pod = d.get("pod")
            if pod is None:
                out[:] = True
            elif isinstance(pod, int) and 0 <= pod < n:
                out[pod] = True
    return out


def degraded(state: ClusterState) -> list[str]:
    """The scenario's degraded links, as '<tier> pod 2 at 50%'."""
    out = []
    for d in jobinfo.cluster(state).get("degraded") or []:
        if isinstance(d, dict) and "tier" in d:
            where = f"pod {d['pod']}" if d.get("pod") is not None else "every pod"
            out.append(f"{d['tier']} {where} at {float(d.get('capacity', 1.0)) * 100:.0f}%")
    return out


def sharing(state: ClusterState) -> list[tuple[str, list[tuple[str, float, float]]]]:
    """Per shared tier: each job that meets others there, its share of the busiest shared block and its
    slowdown (the engine's contention figures: header, then "contention" events), largest share first."""
    tiers: dict[str, list[tuple[str, float, float]]] = {}
    for name, job in state.jobs.items():
        shares = job.contention.get("contention_shares")
        if not isinstance(shares, dict):
            continue
        slowdown = job.contention.get("contention_slowdown")
        slow = float(slowdown) if isinstance(slowdown, (int, float)) else 1.0
        for tier, share in shares.items():
            if isinstance(share, (int, float)):
                tiers.setdefault(str(tier), []).append((name, float(share), slow))
    order = {t: i for i, t in enumerate(TIERS)}
    return [(t, sorted(jobs, key=lambda j: -j[1])) for t, jobs in sorted(tiers.items(),
                                                                        key=lambda kv: order.get(kv[0], 99))]


class LinksPanel(Panel):
    """One line per link tier: the busiest link now, then each pod's load (a character per pod, buildings
    apart) or, for a site-wide tier, its recent history; the hottest links and the degraded ones below."""

    TITLE = "links · saturation (max)"
    switch_links = False     # say what a TP group gets through a switch too (compare: beside a mesh's line)

    def show(self, state: DisplayState) -> None:
        tiers = [t for t in TIERS if t in state.links] + sorted(set(state.links) - set(TIERS))
        content = self.size.width or 40    # inside border and padding
        room = max(4, content - 12 - 1 - 8 - 6)
        topo = state.topology
        per_building = max(1, int(topo.get("gpus_per_building", 0) or 0)
                           // max(1, int(topo.get("gpus_per_pod", 1))))
        text = Text(no_wrap=True, overflow="ellipsis")
        if not tiers:
            text.append("no link samples yet", style="dim")
        for i, tier in enumerate(tiers):
            loads = state.links[tier]
            load = float(loads.max()) if loads.size else 0.0
            text.append(f"{tier_label(tier, state):<12.12} ", style="bold" if load >= 0.9 else "")
            text.append(charts.bar(load, 8), style=load_style(load))
            text.append(f" {load * 100:3.0f}% ", style=load_style(load))
            if loads.size > 1:
                pods = per_building if scope(state, tier) == "pod" else 1
                strip, cells = pod_strip(loads, room, pods)
                group = strip_group(loads.size, room, pods)[0]
                slow = degraded_pods(state, tier, loads.size) if scope(state, tier) == "pod" else None
                usual = float(np.median(loads))
                k = 0
                for ch in strip:
                    if ch == " ":
                        text.append(" ")
                        continue
                    # a pod apart from the others; a pod whose link the scenario degrades, highlighted
                    apart = cells[k] >= 1.5 * usual and cells[k] - usual >= 0.02
                    if slow is not None and slow[k * group:(k + 1) * group].any():
                        style = DEGRADED_STYLE
                    else:
                        style = "bold yellow" if apart and cells[k] < 0.9 else load_style(cells[k])
                    text.append(ch, style=style)
                    k += 1
            else:
                text.append(charts.sparkline(state.link_history.get(tier, ()), room, 0.0, 1.0), style="cyan")
            if i < len(tiers) - 1:
                text.append("\n")
        if tiers:
            hot = [f"{tier_label(t, state).split(' ')[0]} {where} {v * 100:.0f}%"
                   for t, where, v in hottest(state) if v > 0]
            if hot:
                text.append("\nhottest ", style="dim")
                text.append(" · ".join(hot))
            for tier, jobs in sharing(state):
                text.append(f"\nshared {tier_label(tier, state).split(' ')[0]} ", style="dim")
                text.append(" · ".join(f"{name} {share * 100:.0f}%"
                                       + (f" x{slow:.3f}" if slow > 1.0005 else "")
                                       for name, share, slow in jobs))
            for line in jobinfo.scale_up_links(state, self.switch_links):
                text.append(f"\n{tier_label('node', state)} ", style="dim")
                text.append(line)
            bad = degraded(state)
            if bad:
                text.append("\ndegraded ", style="dim")
                text.append(" · ".join(bad), style=DEGRADED_STYLE)
        self.show_if_changed(text.plain, text)
