"""Site power: megawatts now with a sparkline, the GPUs' share, and the site budget where one is set."""

from __future__ import annotations

import math

from clustertop.engine.config import units
from rich.text import Text

from .. import charts, jobinfo
from ..display import DisplayState, spent, tokens_kept
from .panel import Panel


class PowerPanel(Panel):
    """Site MW now, its recent range as a sparkline, and against the budget."""

    TITLE = "power"

    def show(self, state: DisplayState) -> None:
        text = power_text(state, max(8, self.size.width or 40))
        self.show_if_changed(text.plain, text)


def power_text(state: DisplayState, width: int) -> Text:
    """Site MW, GPU share, sparkline, range and swing; the energy and cost so far, per token; the budget line
    when the cluster sets one."""
    history = list(state.site_mw_history)
    text = Text()
    text.append("site ", style="dim")
    text.append(units.power(state.site_mw) + " ", style="bold")
    gpu_w = float(state.power_w.sum(dtype="float64"))
    text.append(f"  GPUs {units.power(gpu_w / 1e6)}", style="dim")
    # the mean over every GPU is that sum's (numpy's float64 mean is this sum over the count)
    every = state.missing("power_w") is None and state.power_w.size
    per_gpu = gpu_w / state.power_w.size if every else state.mean("power_w")
    text.append(f" · {per_gpu:,.0f} W/GPU\n" if per_gpu is not None else " · no data\n", style="dim")
    low, high = (min(history), max(history)) if history else (0.0, 0.0)
    budget = jobinfo.cluster(state).get("site_power_budget_mw") or state.budget_mw
    top = max(high, float(budget)) if budget else high
    text.append(charts.sparkline(history, width, 0.0, top or 1.0), style="yellow")
    text.append(f"\nrange {units.power(low)} – {units.power(high)} ", style="dim")
    text.append(f"  swing {units.power(high - low)}", style="bold" if high - low >= 10 else "dim")
    if state.energy_mwh > 0:
        mwh, usd = spent(state)
        tokens = tokens_kept(state)
        text.append("\nso far ", style="dim")
        text.append(units.energy(mwh) + (f" · {units.usd(usd)}" if usd is not None else ""))
        if tokens > 0:
            text.append("\nper token ", style="dim")
            text.append(f"{mwh * 3.6e9 / tokens:,.1f} J", style="bold")
            if usd is not None:
                text.append(f" · {units.usd(usd / tokens * 1e6)} per million", style="bold")
    if budget and not math.isfinite(state.site_mw):
        text.append(f"\nbudget {units.power(float(budget))} ", style="dim")
        text.append("· no data", style="dim")          # real telemetry: no GPU reported power
    elif budget:
        share = state.site_mw / float(budget)
        over = state.over_budget or share > 1
        text.append(f"\nbudget {units.power(float(budget))} ", style="dim")
        text.append(charts.bar(share, 10), style="red" if over else "green")
        text.append(f" {share * 100:.1f}%", style="red bold" if over else "")
        if over:
            text.append("  OVER BUDGET", style="bold red")
    return text
