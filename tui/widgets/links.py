"""Link tiers: saturation of NVLink or PCIe, leaf, spine, between pods and buildings, now and as a sparkline."""

from __future__ import annotations

from clustertop.engine.stream.state import ClusterState
from rich.text import Text

from .. import format as fmt
from .. import jobinfo
from .panel import Panel

TIER_ORDER = ("node", "leaf", "spine", "core", "campus")


def tier_label(tier: str, state: ClusterState) -> str:
    cluster = jobinfo.cluster(state)
    if tier == "node":
        return "PCIe (host)" if cluster.get("node_fabric") == "pcie" else "NVLink"
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


class LinksPanel(Panel):
    """One line per link tier: a bar of the busiest link now, its percentage and its recent history."""

    TITLE = "links · saturation (max)"

    def show(self, state: ClusterState) -> None:
        tiers = [t for t in TIER_ORDER if t in state.links] + sorted(set(state.links) - set(TIER_ORDER))
        width = max(8, self.size.width - 2 - 12 - 1 - 8 - 5 - 1) if self.size.width else 16
        bar_w = 8
        text = Text()
        if not tiers:
            text.append("no link samples yet", style="dim")
        for i, tier in enumerate(tiers):
            load = float(state.links[tier].max()) if state.links[tier].size else 0.0
            label = tier_label(tier, state)
            text.append(f"{label:<12.12} ", style="bold" if load >= 0.9 else "")
            text.append(fmt.bar(load, bar_w), style=load_style(load))
            text.append(f" {load * 100:3.0f}% ", style=load_style(load))
            history = state.link_history.get(tier, ())
            text.append(fmt.sparkline(history, width, 0.0, 1.0), style="cyan")
            if i < len(tiers) - 1:
                text.append("\n")
        self.show_if_changed(text.plain, text)
