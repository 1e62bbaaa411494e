"""What the cursor selects: one GPU (place, ranks, phase, utilization, power, memory) or a group of GPUs."""

from __future__ import annotations

import numpy as np
from clustertop.engine.config import units
from clustertop.engine.config.geometry import DIMS, Geometry
from clustertop.engine.config.phases import PHASE_LABELS, PHASES
from clustertop.engine.stream.state import ClusterState
from rich.text import Text

from .. import jobinfo
from ..palette import PHASE_COLORS
from .panel import QuietStatic


def place_text(h: Geometry, gpu0: int, gpu1: int) -> str:
    if gpu1 - gpu0 == 1:
        p = h.place(gpu0)
        text = f"GPU {gpu0:,} · node {p['node']:,} slot {p['local']} · rack {p['rack']:,} · pod {p['pod']:,}"
        if h.count("building") > 1:
            text += f" · building {p['building']:,}"
        return text
    first, last = h.place(gpu0), h.place(gpu1 - 1)
    parts = [f"GPUs {gpu0:,}–{gpu1 - 1:,} ({gpu1 - gpu0:,})"]
    for level in ("node", "rack", "pod", "building"):
        if level == "building" and h.count("building") <= 1:
            continue
        a, b = first[level], last[level]
        parts.append(f"{level} {a:,}" if a == b else f"{level}s {a:,}–{b:,}")
    return " · ".join(parts)


def phase_shares(state: ClusterState, gpu0: int, gpu1: int) -> list[tuple[str, float]]:
    """The phases of GPUs [gpu0, gpu1) by share of their time over the sample interval, largest first."""
    shares = state.mix.shares(gpu0, gpu1)
    return [(PHASES[i], float(shares[i])) for i in np.argsort(-shares, kind="stable") if shares[i] >= 0.005]


def shares_text(text: Text, shares: list[tuple[str, float]], limit: int = 4,
                measured: bool = True) -> None:
    """The phases by share; real telemetry measures no phase (its "computing" is a GPU at least half busy, the
    rest is not idle but unknown): the share at least half busy, said as such."""
    if not measured:
        busy = dict(shares).get("compute", 0.0)
        text.append(f"{busy * 100:.0f}% at least half busy (phases not measured)", style="dim")
        return
    for name, share in shares[:limit]:
        text.append("■", style=PHASE_COLORS.get(name, ""))
        text.append(f" {PHASE_LABELS.get(name, name)} {share * 100:.0f}% ")


class Inspector(QuietStatic):
    """Three lines about the GPUs under the cursor."""

    DEFAULT_CSS = """
    Inspector {
        height: 3;
        padding: 0 1;
        background: $boost;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def show(self, state: ClusterState, gpu0: int, gpu1: int) -> None:
        h = Geometry.from_summary(state.topology)
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("▶ ", style="bold")
        text.append(place_text(h, gpu0, gpu1), style="bold")
        host = jobinfo.host_of(state, gpu0 // h.gpus_per_node)
        if host is not None and (gpu1 - 1) // h.gpus_per_node == gpu0 // h.gpus_per_node:
            text.append(f" · host {host}", style="bold")
        text.append("\n")
        job = jobinfo.job_of(state, gpu0)
        r0: dict[str, int] | None = None
        if job is None:
            text.append("no job", style="dim")
        else:
            text.append(f"job {job.name} ", style="bold")
            geo = jobinfo.geometry(job)          # once a repaint: each is a table merged and checked
            r0 = geo.ranks(gpu0)
            if gpu1 - gpu0 == 1:
                text.append(" · ".join(f"{d.upper()} {r0[d]}" for d in DIMS))
            else:
                r1 = geo.ranks(min(gpu1, job.first_gpu + job.gpus) - 1)
                spans = []
                for d in DIMS:
                    lo, hi = min(r0[d], r1[d]), max(r0[d], r1[d])
                    size = int(job.info.get(d, 1) or 1)
                    if size == 1:
                        continue
                    if d in ("tp", "cp", "pp") and gpu1 - gpu0 >= size * geo.stride(d):
                        spans.append(f"{d.upper()} all {size}")
                    else:
                        spans.append(f"{d.upper()} {lo}" if lo == hi else f"{d.upper()} {lo}–{hi}")
                text.append(" · ".join(spans))
        text.append("\n")
        util = state.util[gpu0:gpu1]
        power = state.power_w[gpu0:gpu1]
        no_util, no_power = state.missing("util"), state.missing("power_w")
        shares = phase_shares(state, gpu0, gpu1)
        if gpu1 - gpu0 == 1:
            text.append("util " + ("no data" if no_util is not None and no_util[gpu0] else
                                   f"{float(util[0]) * 100:.0f}%"))
            text.append(" · power " + ("no data" if no_power is not None and no_power[gpu0] else
                                       f"{float(power[0]):.0f} W"))
            capacity = jobinfo.capacity_gb(state)
            mem = jobinfo.memory_gb(job, r0["pp"]) if job is not None and r0 is not None else None
            measured = jobinfo.measured_memory_gb(state, gpu0)
            if measured is not None:
                mem = measured
            if mem is not None:
                text.append(f" · memory {units.memory(mem, capacity)}")
            elif capacity is not None:
                text.append(f" · memory — of {units.gb(capacity)}", style="dim")
            text.append(" · ", style="dim")
            if no_util is not None and no_util[gpu0]:
                text.append("phase no data", style="dim")
            else:
                shares_text(text, shares, 3, measured="telemetry" not in state.header)
        else:
            seen = ~no_util[gpu0:gpu1] if no_util is not None else np.ones(util.size, dtype=bool)
            if seen.any():
                text.append(f"util {float(util[seen].mean()) * 100:.0f}% ")
                text.append(f"({float(util[seen].min()) * 100:.0f}–{float(util[seen].max()) * 100:.0f}) ",
                            style="dim")
            else:
                text.append("util no data ")
            if not seen.all():
                text.append(f"({int((~seen).sum()):,} without data) ", style="bold")
            text.append(f"· power {float(power.sum(dtype=np.float64)) / 1e3:,.1f} kW ")
            text.append("· ", style="dim")
            if seen.all() or "telemetry" not in state.header:
                shares_text(text, shares, measured="telemetry" not in state.header)
            elif seen.any():             # the share at least half busy among the GPUs that reported
                busy = dict(shares).get("compute", 0.0) * seen.size / int(seen.sum())
                shares_text(text, [("compute", busy)], measured=False)
        self.show_if_changed(text.plain, text)

