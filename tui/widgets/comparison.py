"""Compare mode's table: the figures of two clusters at the same simulated time, and their difference."""

from __future__ import annotations

import math
from collections.abc import Callable

from clustertop.engine.config import units
from rich.table import Table
from rich.text import Text

from ..display import DisplayState, spent, tokens_kept
from .panel import Panel

Figure = tuple[str, Callable[[DisplayState], float | None], Callable[[float], str], bool]


def _job(state: DisplayState, attr: str) -> float | None:
    jobs = list(state.jobs.values())
    if not jobs:
        return None
    if attr in ("tokens_per_s",):
        return sum(getattr(j, attr) for j in jobs) or None
    value = getattr(jobs[0], attr)
    return float(value) or None


def _per_mw(tokens_per_s: float | None, site_mw: float) -> float | None:
    """Tokens/s per MW of the site; None (shown "—") when no job reports tokens (a real cluster's telemetry)
    or no power is known."""
    if tokens_per_s is None or not site_mw or math.isnan(site_mw):
        return None
    return tokens_per_s / site_mw


def _per_token(state: DisplayState, dollars: bool) -> float | None:
    """The site's energy (J) or cost (USD per million) per token kept, from the start to now."""
    mwh, usd = spent(state)
    tokens = tokens_kept(state)
    if tokens <= 0 or mwh <= 0:
        return None
    if dollars:
        return usd / tokens * 1e6 if usd is not None else None
    return mwh * 3.6e9 / tokens


FIGURES: tuple[Figure, ...] = (
    ("GPUs", lambda s: float(s.gpus), lambda v: f"{v:,.0f}", True),
    ("step time", lambda s: _job(s, "step_time_s"), lambda v: f"{v:.2f} s", False),
    ("tokens/s", lambda s: _job(s, "tokens_per_s"), units.si, True),
    ("TFLOP/s per GPU", lambda s: _job(s, "tflops_per_gpu"), lambda v: f"{v:.0f}", True),
    ("MFU", lambda s: _job(s, "mfu"), lambda v: f"{v * 100:.1f}%", True),
    ("mean utilization", lambda s: s.mean("util") if s.samples else None, lambda v: f"{v * 100:.0f}%", True),
    ("site power", lambda s: s.site_mw if s.samples else None, units.power, False),
    ("tokens/s per MW", lambda s: _per_mw(_job(s, "tokens_per_s"), s.site_mw), units.si, True),
    ("energy per token so far", lambda s: _per_token(s, False), lambda v: f"{v:,.2f} J", False),
    ("cost per M tokens so far", lambda s: _per_token(s, True), units.usd, False),
)


class Comparison(Panel):
    """figure | A | B | B − A | B / A, with the better side of each difference in green."""

    TITLE = "A against B at the same simulated time"

    def show(self, a: DisplayState, b: DisplayState, names: tuple[str, str],
             ended: tuple[str | None, str | None] = (None, None)) -> None:
        """`ended[i]`: when side i's recording ended before the clock ('ended 00:01:00.0'); its last sample is
        not the present, so its figures are not compared."""
        table = Table(box=None, expand=True, padding=(0, 2), show_edge=False)
        table.add_column("figure", style="dim", no_wrap=True)
        table.add_column(f"A: {names[0]}", justify="right")
        table.add_column(f"B: {names[1]}", justify="right")
        table.add_column("B − A", justify="right")
        table.add_column("B / A", justify="right")
        key = []
        for label, get, show, higher_better in FIGURES:
            va, vb = get(a), get(b)
            if label != "GPUs":
                va = None if ended[0] else va
                vb = None if ended[1] else vb
            cells = [show(va) if va is not None else ended[0] or "—",
                     show(vb) if vb is not None else ended[1] or "—"]
            if va is not None and vb is not None and (va == 0 or vb == 0):
                diff_text, ratio = Text("—"), Text("—")      # nothing yet on one side: no ratio to speak of
            elif va is not None and vb is not None and cells[0] == cells[1]:
                diff_text, ratio = Text("="), Text("1.00x")
            elif va is not None and vb is not None:
                diff = vb - va
                sign = "+" if diff > 0 else "−" if diff < 0 else "±"
                better = (diff > 0) == higher_better
                style = "" if abs(diff) < 1e-12 else ("green" if better else "red")
                diff_text = Text(f"{sign}{show(abs(diff))}", style=style)
                ratio = Text(f"{vb / va:.2f}x" if va else "—", style=style)
            else:
                diff_text, ratio = Text("—"), Text("—")
            for cell in (diff_text, ratio):
                cell.justify = "right"
            table.add_row(label, *(Text(c, justify="right") for c in cells), diff_text, ratio)
            key.append((label, *cells, diff_text.plain, ratio.plain))
        self.show_if_changed(repr(key), table)
