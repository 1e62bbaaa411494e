"""The drill-down under the heatmap: at rack and node zoom a row per GPU (utilization, power, memory, phase
shares over the sample interval, a utilization sparkline), at pod and site zoom the worst GPUs of the view
(failed first, then the least utilized). Sortable: a click on a header."""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any

import numpy as np
from clustertop.engine.config import units
from clustertop.engine.config.phases import PHASE_SHORT, PHASES
from clustertop.engine.stream.state import ClusterState
from rich.text import Text
from textual import events

from .. import charts, jobinfo
from ..index import EventIndex
from ..palette import PHASE_COLORS
from ..running import running_app
from .jobs import ASCENDING, DESCENDING, header_cell
from .jobs import abbreviate as jobs_abbr
from .panel import Panel

# (header, width, sort key)
COLUMNS = (("GPU", 9, "gpu"), ("job", 12, "job"), ("util", 5, "util"), ("power", 6, "power"),
           ("mem GB", 11, "memory"), ("time in phases", 20, "phase"), ("util history", 0, "util"))
PHASES_W = 20
HISTORY = 24


def lowest(score: np.ndarray, n: int) -> np.ndarray:
    """Indices of the `n` lowest scores, lowest first, ties by index: the same order on every CPU.

    np.partition finds the n-th lowest value whatever code path it takes (AVX-512 or not), but which of
    several equal values it moves in front is not defined (nor argpartition's indices): so every score below
    that value is taken, then the first of the equal ones by index, and the pick is sorted by (score,
    index)."""
    score = np.nan_to_num(np.asarray(score, dtype=np.float64), nan=np.inf)
    n = max(0, min(n, score.size))
    if n < score.size:
        kth = np.partition(score, n - 1)[n - 1] if n else -np.inf
        below = np.flatnonzero(score < kth)
        pick = np.concatenate([below, np.flatnonzero(score == kth)[: n - below.size]])
    else:
        pick = np.arange(score.size)
    return pick[np.lexsort((pick, score[pick]))]


class GpuTable(Panel):
    """A row per GPU of the view (or its worst GPUs)."""

    TITLE = "GPUs"

    DEFAULT_CSS = """
    GpuTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort = "gpu"
        self.descending = False       # a click on the sorted header reverses the order
        self._headers: list[tuple[int, int, str]] = []
        self._history: dict[int, deque[float]] = {}
        # (the index's samples at or before t, GPUs) of the histories kept (not state.samples: after a seek
        # that counts only those folded since the keyframe)
        self._history_at: tuple[int, tuple[int, ...]] | None = None

    def rows_for(self, state: ClusterState, gpu0: int, gpu1: int, worst: bool, count: int) -> list[int]:
        """The GPUs to list: all of a small view, or the worst `count` of a large one (no loop over GPUs)."""
        if not worst:
            return list(range(gpu0, gpu1))
        util = state.util[gpu0:gpu1].astype(np.float32)
        failed = state.phase[gpu0:gpu1] == PHASES.index("failed")
        return [gpu0 + i for i in lowest(np.where(failed, -1.0, util), count).tolist()]

    def _histories(self, index: EventIndex, gpus: list[int], t: float, state: ClusterState) -> None:
        """Each listed GPU's utilization over the latest samples: rebuilt from the index when the rows or the
        time jump, extended by one when one more sample arrived."""
        with index.lock:
            k = bisect.bisect_right(index.sample_t, t)
            times = index.sample_t[max(0, k - HISTORY):k]
        key = tuple(gpus)
        if self._history_at is not None and self._history_at[1] == key and self._history_at[0] == k - 1:
            for gpu in gpus:
                self._history[gpu].append(float(state.util[gpu]))
        elif self._history_at is None or self._history_at != (k, key):
            self._history = {gpu: deque(maxlen=HISTORY) for gpu in gpus}
            back = times if state.gpus <= 200_000 else times[-6:]
            for values in index.utilization(back, gpus):
                for gpu, value in zip(gpus, values):
                    self._history[gpu].append(value)
        self._history_at = (k, key)

    def show(self, state: ClusterState, gpu0: int, gpu1: int, worst: bool, index: EventIndex | None,
             t: float) -> None:
        rows = max(1, self.size.height - 1) if self.size.height else 8
        width = self.size.width or 80
        gpus = self.rows_for(state, gpu0, gpu1, worst, rows)
        self.border_title = f"worst {len(gpus)} GPUs of the view" if worst else f"GPUs {gpu0:,}–{gpu1 - 1:,}"
        if index is not None:
            self._histories(index, gpus, t, state)
        shares = (np.stack([state.mix.per_gpu(g, g + 1)[0] for g in gpus]) if gpus
                  else np.zeros((0, len(PHASES))))
        capacity = jobinfo.capacity_gb(state)
        no_util, no_power = state.missing("util"), state.missing("power_w")
        records: list[dict[str, Any]] = []
        for k, gpu in enumerate(gpus):
            job = jobinfo.job_of(state, gpu)
            mem = jobinfo.measured_memory_gb(state, gpu)
            if mem is None and job is not None:
                mem = jobinfo.memory_gb(job, jobinfo.ranks(job, gpu)["pp"])
            order = np.argsort(-shares[k], kind="stable")[:3]
            records.append({
                "gpu": gpu, "job": job.name if job else "",
                "util": -1.0 if no_util is not None and no_util[gpu] else float(state.util[gpu]),
                "power": -1.0 if no_power is not None and no_power[gpu] else float(state.power_w[gpu]),
                "memory": mem if mem is not None else -1.0,
                "phase": -float(shares[k][PHASES.index("compute")]),
                "mix": [(PHASES[i], float(shares[k][i])) for i in order if shares[k][i] >= 0.005]})
        if self.sort != "gpu":
            records.sort(key=lambda r: r[self.sort], reverse=self.descending)     # ties: in GPU order
        elif self.descending and not worst:
            records.reverse()
        history_w = max(4, width - sum(w + 1 for _, w, _ in COLUMNS))
        text = Text(no_wrap=True, overflow="ellipsis")
        self._headers, x = [], 0
        for header, w, key in COLUMNS:
            w = w or history_w
            last = header == COLUMNS[-1][0]
            # the worst GPUs, unsorted, come worst first: no column is the order then
            marked = key == self.sort and not last and not (worst and key == "gpu")
            mark = (DESCENDING if self.descending else ASCENDING) if marked else ""
            text.append(header_cell(header, w, key in ("gpu", "job", "phase") or last, mark) + " ",
                        style="bold underline" if marked else "dim")
            self._headers.append((x, x + w, key))
            x += w + 1
        for r in records:
            text.append("\n")
            failed = any(name == "failed" and share > 0.5 for name, share in r["mix"])
            text.append(f"{r['gpu']:<9,} ", style="bold red" if failed else "bold")
            text.append(f"{jobs_abbr(r['job'], 12):<12} ")
            text.append(f"{r['util'] * 100:>4.0f}% " if r["util"] >= 0 else f"{'—':>5} ")
            text.append(f"{r['power']:>5.0f}W " if r["power"] >= 0 else f"{'—':>6} ")
            memory = units.memory_cell(r["memory"] if r["memory"] >= 0 else None, capacity)
            text.append(f"{memory:>11} ")
            used = 0
            for name, share in r["mix"]:
                cell = f"{PHASE_SHORT.get(name, name)} {share * 100:.0f}% "
                if used + len(cell) + 1 > PHASES_W:
                    break
                text.append("■", style=PHASE_COLORS.get(name, ""))
                text.append(cell)
                used += len(cell) + 1
            text.append(" " * max(0, PHASES_W + 1 - used))
            text.append(charts.sparkline(self._history.get(r["gpu"], ()), history_w, 0.0, 1.0), style="cyan")
        self.show_if_changed(repr((text.plain, self.sort, self.descending)), text)

    def on_resize(self, event: events.Resize) -> None:
        """How many rows fit changed: list as many GPUs as now fit."""
        self._shown = ""
        self.call_after_refresh(running_app(self).redraw)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y != 0:
            return
        for x0, x1, key in self._headers:
            if x0 <= offset.x < x1:
                self.descending = not self.descending if key == self.sort else False
                self.sort = key
                self._shown = ""
                running_app(self).redraw()
