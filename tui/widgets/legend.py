"""The legend of the heatmap: the metric's colour scale (or the phases and their share of the view's GPUs)."""

from __future__ import annotations

import numpy as np
from clustertop.engine.config.phases import PHASE_LABELS, PHASES
from clustertop.engine.stream.state import ClusterState
from rich.text import Text

from .. import jobinfo
from ..marks import marks_of
from ..palette import (
    MARK_COLORS,
    NETWORK_COLOR,
    NETWORK_LABEL,
    NODATA_COLOR,
    PHASE_COLORS,
    POWER_RAMP,
    UTIL_RAMP,
    WAITS,
)
from .panel import QuietStatic

# "network": the wait phases together (the map draws them in one colour: palette.network_phases)
LEGEND_PHASES = ("compute", "network", "bubble", "optimizer", "checkpoint", "memory", "idle", "failed")


class Legend(QuietStatic):
    """One or two lines under the heatmap."""

    DEFAULT_CSS = """
    Legend {
        height: auto;
        max-height: 2;
        padding: 0 1;
    }
    """

    def show(self, state: ClusterState, metric: str, gpu0: int, gpu1: int, per_pixel: int) -> None:
        text = Text(overflow="fold")
        if not state.samples:
            text.append("waiting for the first sample", style="dim italic")
        elif metric == "phase":    # the time shares of the view's GPUs over the sample interval
            shares = state.mix.shares(gpu0, gpu1)
            failed = np.count_nonzero(state.phase[gpu0:gpu1] == PHASES.index("failed")) / max(1, gpu1 - gpu0)
            missing = state.missing("util")
            if missing is not None:      # GPUs that reported nothing are not idle: counted below as no data
                unknown = np.count_nonzero(missing[gpu0:gpu1]) / max(1, gpu1 - gpu0)
                shares = shares.copy()
                shares[PHASES.index("idle")] = max(0.0, float(shares[PHASES.index("idle")]) - unknown)
            for name in LEGEND_PHASES:
                if name == "network":
                    waits = [(w, float(shares[PHASES.index(w)])) for w in WAITS]
                    share = sum(v for _, v in waits)
                    if share < 0.005:
                        continue
                    text.append("█", style=NETWORK_COLOR)
                    text.append(f" {NETWORK_LABEL} {share * 100:.0f}% ")
                    text.append("(" + " · ".join(f"{w.upper()} {v * 100:.0f}" for w, v in waits if v >= 0.005)
                                + ")  ", style="dim")
                    continue
                code = PHASES.index(name)
                share = max(float(shares[code]), failed if name == "failed" else 0.0)
                if share < 0.005 and name not in ("compute", "failed"):
                    continue
                text.append("█", style=PHASE_COLORS[name])
                text.append(f" {PHASE_LABELS[name]} ")
                shown = f"{share * 100:.0f}%" if share == 0 or share >= 0.01 else "<1%"
                text.append(f"{shown}  ", style="bold red" if name == "failed" and share else "dim")
        else:
            ramp = UTIL_RAMP if metric == "util" else POWER_RAMP
            if metric == "util":
                low, high = "0%", "100% utilization"
            else:
                tdp = jobinfo.gpu_spec(state).get("tdp_w")
                low, high = "0 W", f"{float(tdp):.0f} W (TDP) power" if tdp else "max power"
            text.append(f"{low} ")
            for colour in ramp[::2]:
                text.append("█", style=colour)
            text.append(f" {high}")
            mean = state.mean("util" if metric == "util" else "power_w", gpu0, gpu1)
            if mean is not None:
                shown = f"{mean * 100:.0f}%" if metric == "util" else f"{mean:.0f} W"
                text.append(f"   mean {shown}", style="bold")
        if state.samples:            # failed, degraded and unallocated GPUs have their own colours
            for mark, count in marks_of(state.header).counts(state, gpu0, gpu1).items():
                if mark == "failed" and metric == "phase":
                    continue             # the phases above show it, with its share
                if count or mark == "failed":
                    text.append("   ")
                    text.append("█", style=MARK_COLORS[mark])
                    text.append(f" {mark} {count:,}", style="bold red" if mark == "failed" and count else "")
        missing = state.missing("power_w" if metric == "power" else "util") if state.samples else None
        none = int(np.count_nonzero(missing[gpu0:gpu1])) if missing is not None else 0
        if none:                    # real telemetry: GPUs that reported nothing are grey, not zero
            text.append("   ")
            text.append("█", style=NODATA_COLOR)
            text.append(f" no data {none:,} GPU{'s' if none != 1 else ''}", style="bold")
        how = "drawn in proportion" if metric == "phase" else "mean"
        unit = "GPU" if per_pixel == 1 else f"{per_pixel:,} GPUs ({how}; failed wins)"
        if metric == "phase":
            unit += " · each phase's share of the cells is its % of time" if per_pixel > 1 else " · % of time"
        text.append(f"   ▀ = {unit}", style="dim")
        self.show_if_changed(text.plain, text)
