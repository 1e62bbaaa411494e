"""Colours of the heatmap: a ramp per continuous metric, one colour per phase, and cached Rich styles.

Colours are small integer indices so a whole frame maps to colours with numpy; each (top, bottom) pair of a
half-block cell gets one precomputed Rich Style.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from clustertop.engine.config.phases import CODE, PHASES
from rich.color import Color
from rich.style import Style

LEVELS = 32   # steps of a continuous ramp

METRICS = ("util", "power", "phase")
METRIC_TITLES = {"util": "utilization", "power": "power", "phase": "phase"}


def _ramp(anchors: list[str], steps: int = LEVELS) -> list[str]:
    """`steps` colours interpolated through the anchor colours."""
    rgb = np.array([Color.parse(a).get_truecolor()[:3] for a in anchors], dtype=float)
    xs = np.linspace(0, 1, len(anchors))
    out = []
    for x in np.linspace(0, 1, steps):
        r, g, b = (np.interp(x, xs, rgb[:, k]) for k in range(3))
        out.append(f"#{round(r):02x}{round(g):02x}{round(b):02x}")
    return out


# Utilization: dark when idle, bright when busy (viridis-like, readable on dark and light backgrounds).
UTIL_RAMP = _ramp(["#1d1f3a", "#3b4c9c", "#21918c", "#5ec962", "#fde725"])
# Power: magma-like, from idle draw to TDP.
POWER_RAMP = _ramp(["#1b1030", "#51127c", "#b73779", "#fc8961", "#fcfdbf"])
PHASE_COLORS = {
    "idle": "#3a3a3a",
    "compute": "#2fb344",
    "tp": "#17becf",
    "pp": "#4f7bff",
    "dp": "#c45ad6",
    "cp": "#8c6bff",
    "ep": "#ff7fbf",
    "bubble": "#ffb000",
    "optimizer": "#a6e22e",
    "checkpoint": "#e8e8ff",
    "failed": "#ff2020",
    "memory": "#8c564b",     # brown: apart from the bubble's orange
}

# Colour index space: continuous ramps use 0..LEVELS-1, phases PHASE_BASE + code; then the specials.
PHASE_BASE = LEVELS
BG = PHASE_BASE + len(PHASES)
CURSOR = BG + 1
LABEL = BG + 2
TITLE = BG + 3
DIM = BG + 4          # GPUs outside the highlighted job
NODATA = BG + 5       # GPUs that reported nothing (real telemetry): missing, not zero
FAILED = BG + 6       # a pixel holding a failed GPU, in every metric (it wins over the pixel's mean)
SLOW = BG + 7         # a pixel holding a degraded GPU (a straggler: the header's `slow_gpus`)
UNALLOCATED = BG + 8  # a pixel of GPUs no job uses
NETWORK = BG + 9      # phase view: GPUs waiting on the network (TP, PP, DP, CP and EP waits together)
COLOURS = NETWORK + 1
NODATA_COLOR = "#8c8c8c"   # a light neutral grey: apart from every ramp and from idle's dark grey
SLOW_COLOR = "#ff7a00"     # deep orange: apart from the ramps' ends, failed's red and the bubble's amber
UNALLOCATED_COLOR = "#5a5a66"   # slate grey: between idle's dark grey and no data's light grey
NETWORK_COLOR = "#1e90ff"       # a strong blue, among the waits' blues and violets, far from compute's green
NETWORK_LABEL = "waiting on the network"
WAITS = ("tp", "pp", "dp", "cp", "ep")
NETWORK_CODE = len(PHASES)      # the phase view's code for it, after the engine's phases
MARK_COLORS = {"failed": PHASE_COLORS["failed"], "degraded": SLOW_COLOR, "unallocated": UNALLOCATED_COLOR}


@dataclass(frozen=True)
class Theme:
    """What the heatmap needs from the app's theme."""

    background: str
    foreground: str
    muted: str
    cursor: str
    dim: str = "#2a2a2a"


class StyleCache:
    """Rich styles per (top, bottom) colour pair of a metric, built once per theme."""

    def __init__(self, metric: str, theme: Theme) -> None:
        self.theme = theme
        table = UTIL_RAMP if metric == "util" else POWER_RAMP
        self.colours: list[str] = list(table) + [PHASE_COLORS[p] for p in PHASES]
        self.colours += [theme.background, theme.cursor, theme.muted, theme.foreground, theme.dim,
                         NODATA_COLOR, PHASE_COLORS["failed"], SLOW_COLOR, UNALLOCATED_COLOR, NETWORK_COLOR]
        self._rich = [Color.parse(c) for c in self.colours]
        self._styles: dict[int, Style] = {}
        self.label = Style(color=Color.parse(theme.muted), bgcolor=Color.parse(theme.background))
        self.title = Style(color=Color.parse(theme.foreground), bgcolor=Color.parse(theme.background),
                           bold=True)
        self.blank = Style(bgcolor=Color.parse(theme.background))

    def job_label(self, highlighted: bool) -> Style:
        """A job's name over the heatmap: dark on light, reversed for the highlighted job."""
        if highlighted:
            return Style(color=Color.parse(self.theme.background), bgcolor=Color.parse(self.theme.cursor),
                         bold=True)
        return Style(color=Color.parse(self.theme.cursor), bgcolor=Color.parse(self.theme.background),
                     bold=True)

    def on(self, colour: int) -> Style:
        """Readable text on a block of colour `colour` (for labels inside big pixels)."""
        style = self._styles.get(-1 - colour)
        if style is None:
            r, g, b = self._rich[colour].get_truecolor()[:3]
            dark = 0.299 * r + 0.587 * g + 0.114 * b > 140
            style = Style(color="#000000" if dark else "#ffffff", bgcolor=self._rich[colour], bold=True)
            self._styles[-1 - colour] = style
        return style

    def pair(self, code: int) -> Style:
        """The style of a half-block cell: code = top * COLOURS + bottom."""
        style = self._styles.get(code)
        if style is None:
            top, bottom = divmod(code, COLOURS)
            style = Style(color=self._rich[top], bgcolor=self._rich[bottom])
            self._styles[code] = style
        return style


def level_of(values: np.ndarray, top: float) -> np.ndarray:
    """Continuous values (0..top) to ramp indices; NaN (no GPU) becomes the background."""
    scaled = np.nan_to_num(values / top, nan=-1.0) if top > 0 else np.zeros_like(values)
    idx: np.ndarray = np.clip(np.rint(scaled * (LEVELS - 1)), 0, LEVELS - 1).astype(np.int16)
    idx[scaled < 0] = BG
    return idx


def known_phases(codes: np.ndarray) -> np.ndarray:
    """Phase codes this version knows; codes a newer engine appended show as idle rather than break the
    view."""
    if codes.size and int(codes.max()) >= len(PHASES):
        return np.where(codes < len(PHASES), codes, CODE["idle"]).astype(np.uint8)
    return codes


def phase_colour(codes: np.ndarray) -> np.ndarray:
    """Colour indices of phase-view codes (NETWORK_CODE: waiting on the network)."""
    colours = codes.astype(np.int16) + PHASE_BASE
    colours[codes == NETWORK_CODE] = NETWORK
    return colours


_WAIT_CODES = [PHASES.index(w) for w in WAITS]
DITHER_LEVELS = 1024      # thresholds of the phase view's proportional drawing (shares to within 0.1%)


@lru_cache(maxsize=8)
def dither_levels(gpu0: int, n: int, per_pixel: int) -> np.ndarray:
    """A threshold level (0..DITHER_LEVELS-1) for each of the GPUs [gpu0, gpu0 + n), one per pixel of
    `per_pixel` GPUs: a hash of the pixel's index, so the same GPUs get the same levels on every machine and
    every frame, and the levels of any few hundred pixels spread evenly."""
    key = (np.arange(n, dtype=np.uint64) // np.uint64(per_pixel)) + np.uint64(gpu0 // per_pixel)
    x = (key + np.uint64(0x632BE59BD9B4E019)) * np.uint64(0x9E3779B97F4A7C15)      # splitmix64's finalizer
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    levels: np.ndarray = (x >> np.uint64(64 - DITHER_LEVELS.bit_length() + 1)).astype(np.int32)
    return levels


def network_phases(rows: np.ndarray, table: np.ndarray, phase: np.ndarray, gpu0: int = 0,
                   per_pixel: int = 1) -> np.ndarray:
    """The phase-view code of each GPU, its network waits counted together (NETWORK_CODE: whichever
    dimension waits, a slow tier stalls it), drawn in proportion to the time shares: a GPU shows the phase
    whose slice of its cumulative shares holds its pixel's threshold (dither_levels), so GPUs that wait on the
    network 20% of the time show that colour on about 20% of their cells, however much longer they compute.
    `rows` and `table` are the state's phase mix (rows per GPU into rows of shares) of the GPUs from `gpu0`
    on, `phase` the engine's dominant phase (failed wins); the GPUs of one pixel of `per_pixel` share a
    threshold, so the pixel shows their drawn phase. `per_pixel` 0: each GPU its phase of most time (GPUs
    drawn big enough to carry their own label, which names that phase)."""
    merged = np.concatenate([table, table[:, _WAIT_CODES].sum(axis=1, keepdims=True)], axis=1)
    merged[:, _WAIT_CODES] = 0.0
    if per_pixel <= 0:
        codes: np.ndarray = merged.argmax(axis=1).astype(np.uint8)[rows]
        codes[phase == CODE["failed"]] = CODE["failed"]
        return codes
    total = merged.sum(axis=1, keepdims=True)
    cum = np.cumsum(merged, axis=1) / np.where(total > 0, total, 1.0)
    cum[:, -1] = np.inf                       # rounding never leaves a threshold past the last share
    threshold = (np.arange(DITHER_LEVELS) + 0.5) / DITHER_LEVELS
    lut = np.zeros((table.shape[0], DITHER_LEVELS), dtype=np.uint8)   # (row, level) -> code
    for k in range(merged.shape[1] - 1):      # a phase column at a time, not a GPU
        lut += cum[:, k, None] <= threshold[None, :]
    lut[total[:, 0] <= 0] = CODE["idle"]
    levels = dither_levels(gpu0, rows.size, per_pixel)
    at = rows.astype(np.int32) * np.int32(DITHER_LEVELS)     # int32: far fewer than 2M distinct rows
    at += levels
    codes = lut.reshape(-1)[at]
    codes[phase == CODE["failed"]] = CODE["failed"]
    return codes


__all__ = [
    "MARK_COLORS",
    "METRICS",
    "NODATA",
    "NODATA_COLOR",
    "PHASE_COLORS",
    "StyleCache",
    "Theme",
    "known_phases",
    "level_of",
    "phase_colour",
]
