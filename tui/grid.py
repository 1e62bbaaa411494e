"""Where every GPU is drawn: the physical hierarchy laid out on a grid of half-block cells, and aggregation.

A view shows one container (the site, a building, a pod, a rack or a node). It is split into panels (its
buildings or pods, with a title row each); inside a panel, pixels of `g` consecutive GPUs run down columns (a
column is a rack when racks are small enough to draw whole) and columns wrap into bands. Each cell of the
terminal holds two pixels, one above the other (the half block). When a view is small (a rack, a node), pixels
grow into blocks so the GPUs stay big on screen.

The layout is computed once per (view, size) into two index maps (top and bottom pixel of every cell); a frame
is then numpy: aggregate the state's arrays per pixel, map to colours, index through the maps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from clustertop.engine.config.geometry import LEVELS, Geometry
from clustertop.engine.config.phases import CODE, PHASES

# Map codes for cells that are not pixels (negative, so they index the specials at the end of a colour table).
TITLE_CELL, LABEL_CELL, BLANK_CELL = -3, -2, -1
MARGIN = 6        # columns for band labels ("r1234") when racks are drawn whole
PANEL_GAP = 2     # columns between panels
MAX_SCALE = 16    # largest block (cells a side) one GPU grows to in small views


def levels(h: Geometry) -> tuple[str, ...]:
    """Zoom levels worth showing: each holds less than the one above it."""
    out: list[str] = []
    last = None
    for level in LEVELS:
        size = min(h.size(level), h.gpus)
        if size != last:
            out.append(level)
            last = size
    return tuple(out)


@dataclass(frozen=True)
class View:
    """One container of the hierarchy: what the heatmap shows."""

    level: str
    index: int = 0

    def span(self, h: Geometry) -> tuple[int, int]:
        size = h.size(self.level)
        start = self.index * size if self.level != "site" else 0
        return start, min(start + size, h.gpus)

    def title(self, h: Geometry) -> str:
        if self.level == "site":
            return "site" if h.count("building") > 1 else "cluster"
        return f"{self.level} {self.index:,}"


@dataclass
class Panel:
    """A rectangle of pixels: the GPUs [gpu0, gpu1) drawn from (x, y) in cells."""

    gpu0: int
    gpu1: int
    x: int
    y: int
    width: int
    height: int
    title: str
    margin: int = 0


@dataclass
class Layout:
    """The index maps of one view at one size. `top`/`bottom` give the pixel of each cell (or a cell code)."""

    view: View
    hierarchy: Geometry
    width: int
    height: int
    g: int                      # GPUs per pixel
    scale: int                  # cells (columns and half-rows) per pixel side
    column: int                 # pixels per column
    gpu0: int
    gpu1: int
    top: np.ndarray = field(repr=False)
    bottom: np.ndarray = field(repr=False)
    text: list[str] = field(repr=False)
    pixel_x: np.ndarray = field(repr=False)      # the cell column of each pixel
    pixel_yh: np.ndarray = field(repr=False)     # the half-row of each pixel
    panels: list[Panel] = field(default_factory=list)

    @property
    def pixels(self) -> int:
        return -(-(self.gpu1 - self.gpu0) // self.g)

    def pixel_of(self, gpu: int) -> int:
        return (min(max(gpu, self.gpu0), self.gpu1 - 1) - self.gpu0) // self.g

    def gpus_of(self, pixel: int) -> tuple[int, int]:
        start = self.gpu0 + pixel * self.g
        return start, min(start + self.g, self.gpu1)

    def at(self, x: int, y: int, lower: bool = False) -> int:
        """The pixel drawn at cell (x, y), top or bottom half; negative when none."""
        if not (0 <= y < self.height and 0 <= x < self.width):
            return BLANK_CELL
        grid = self.bottom if lower else self.top
        return int(grid[y, x])

    def neighbour(self, pixel: int, dx: int, dy: int) -> int:
        """The pixel next to `pixel` on screen in direction (dx, dy), skipping gaps; itself at an edge."""
        x = int(self.pixel_x[pixel]) + (self.scale // 2 if dx == 0 else 0)
        yh = int(self.pixel_yh[pixel]) + (self.scale // 2 if dy == 0 else 0)
        half = np.empty((self.height * 2, self.width), dtype=np.int32)
        half[0::2] = self.top
        half[1::2] = self.bottom
        for step in range(1, 4 * max(self.width, self.height * 2)):
            nx, ny = x + dx * step, yh + dy * step
            if not (0 <= nx < self.width and 0 <= ny < self.height * 2):
                break
            found = int(half[ny, nx])
            if found >= 0 and found != pixel:
                return found
        # Nothing straight ahead (end of a band): continue in reading order.
        if dy:
            nxt = pixel + dy
            return nxt if 0 <= nxt < self.pixels else pixel
        return pixel

    # -- aggregation --------------------------------------------------------------------------------------

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Mean of each pixel's GPUs (float32)."""
        seg = values[self.gpu0:self.gpu1]
        if self.g == 1:
            return seg.astype(np.float32, copy=False)
        if seg.size % self.g == 0:
            rows = seg.reshape(-1, self.g)
            if self.g < 8:
                # numpy's float32 mean of rows this short adds each row's values in order, as float32, at a
                # cost per row: the same sums a column at a time (from 8 values on numpy sums pairwise)
                rows = rows.astype(np.float32, copy=False)
                sums = rows[:, 0] + np.float32(0)        # (-0.0 + 0 is 0.0, as numpy's mean gives)
                for k in range(1, self.g):
                    sums += rows[:, k]
                sums /= np.float32(self.g)
                return sums
            means: np.ndarray = rows.mean(axis=1, dtype=np.float32)
            return means
        starts = np.arange(0, seg.size, self.g)
        counts = np.diff(np.append(starts, seg.size))
        return (np.add.reduceat(seg.astype(np.float64), starts) / counts).astype(np.float32)

    def mean_where(self, values: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean of each pixel's GPUs that have a reading (`present`), and the pixels where none has."""
        seg = np.where(present[self.gpu0:self.gpu1], values[self.gpu0:self.gpu1], 0.0)
        counts = self.count(present)
        if self.g == 1:
            return seg.astype(np.float32), counts == 0
        starts = np.arange(0, seg.size, self.g)
        sums = np.add.reduceat(seg.astype(np.float64), starts)
        return (sums / np.maximum(counts, 1)).astype(np.float32), counts == 0

    def count(self, flags: np.ndarray) -> np.ndarray:
        """How many of each pixel's GPUs are flagged."""
        seg = flags[self.gpu0:self.gpu1].astype(np.int32)
        if self.g == 1:
            return seg
        return np.add.reduceat(seg, np.arange(0, seg.size, self.g))

    def maximum(self, values: np.ndarray) -> np.ndarray:
        seg = values[self.gpu0:self.gpu1]
        if self.g == 1:
            return seg
        if seg.size % self.g == 0:
            peaks: np.ndarray = seg.reshape(-1, self.g).max(axis=1)
            return peaks
        return np.maximum.reduceat(seg, np.arange(0, seg.size, self.g))

    def phase(self, phases: np.ndarray, offset: int = 0) -> np.ndarray:
        """The commonest phase of each pixel's GPUs; a failed GPU wins (it must show at every zoom).
        `phases` holds GPUs from `offset` on (the whole cluster by default); codes up to len(PHASES) (the
        phase view's "waiting on the network")."""
        seg = phases[self.gpu0 - offset:self.gpu1 - offset]
        if self.g == 1:
            return seg
        n = len(PHASES) + 1
        ids = np.arange(seg.size, dtype=np.int64) // self.g
        counts = np.bincount(ids * n + seg, minlength=self.pixels * n).reshape(self.pixels, n)
        mode: np.ndarray = counts.argmax(axis=1).astype(np.uint8)
        mode[counts[:, CODE["failed"]] > 0] = CODE["failed"]
        return mode


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _pixel_sizes(h: Geometry, panel_gpus: int) -> list[int]:
    """GPUs per pixel worth trying, finest first: they divide the panel and respect node and rack borders."""
    out = []
    for g in _divisors(panel_gpus):
        if (h.gpus_per_node % g == 0
                or (g % h.gpus_per_node == 0 and (h.gpus_per_rack % g == 0 or g % h.gpus_per_rack == 0))):
            out.append(g)
    return out or [1]


def _panel_title(h: Geometry, level: str, index: int, gpu0: int, gpu1: int) -> str:
    if level == "building":
        return f"building {index} · pods {gpu0 // h.gpus_per_pod}–{(gpu1 - 1) // h.gpus_per_pod}"
    if level == "pod":
        return f"pod {index} · racks {gpu0 // h.gpus_per_rack}–{(gpu1 - 1) // h.gpus_per_rack}"
    if level == "rack":
        return f"rack {index} · nodes {gpu0 // h.gpus_per_node}–{(gpu1 - 1) // h.gpus_per_node}"
    return f"node {index} · GPUs {gpu0:,}–{gpu1 - 1:,}"


@dataclass
class _Fit:
    g: int
    scale: int
    column: int
    pitch: int
    pitch_y: int
    margin: int
    band_gap: int
    cols_per_band: int
    bands: int
    panel_w: int
    panel_h: int
    panels_across: int


def _try(n_panels: int, panel_pixels: int, column: int | None, scale: int, margin: int, width: int,
         height: int, gap_x: int = 0) -> _Fit | None:
    """The most compact arrangement of the panels in width x height, or None when it does not fit."""
    pitch = scale + gap_x                            # a gap between big pixels' columns keeps racks apart
    pitch_y = scale + (1 if scale >= 3 else 0)       # and between rows once GPUs are blocks
    best: _Fit | None = None
    best_waste = 0
    for across in range(1, min(n_panels, 24) + 1):
        panel_w = (width - (across - 1) * PANEL_GAP) // across
        usable = (panel_w - margin) // pitch
        if usable < 1:
            break
        rows_of_panels = -(-n_panels // across)
        if column is None:   # free column height: one band, as tall as needed
            col = -(-panel_pixels // usable)
            col += col % 2 if scale == 1 else 0
            cols = -(-panel_pixels // col)
            band_half = col * pitch_y
            bands, gap = 1, 0
        else:
            col = column
            cols = -(-panel_pixels // col)
            bands = -(-cols // usable)
            band_half = col * pitch_y
            gap = 1 if bands > 1 else 0
        band_rows = -(-band_half // 2)
        panel_h = 1 + bands * band_rows + (bands - 1) * gap
        total = rows_of_panels * panel_h + (rows_of_panels - 1)
        if total > height and column is not None and bands > 1:
            gap = 0
            panel_h = 1 + bands * band_rows
            total = rows_of_panels * panel_h + (rows_of_panels - 1)
        if total > height:
            continue
        used_w = min(cols, usable) * pitch + margin
        fit = _Fit(g=0, scale=scale, column=col, pitch=pitch, pitch_y=pitch_y, margin=margin, band_gap=gap,
                   cols_per_band=min(cols, usable), bands=bands, panel_w=used_w, panel_h=panel_h,
                   panels_across=across)
        # Prefer the arrangement that leaves the least empty area (squarest use of the box).
        waste = width * height - (used_w * across) * total
        if best is None or waste < best_waste:
            best, best_waste = fit, waste
    return best


def layout(h: Geometry, view: View, width: int, height: int) -> Layout:
    """Lay out `view` in width x height cells."""
    width, height = max(1, width), max(1, height)
    gpu0, gpu1 = view.span(h)
    zooms = levels(h)
    # Panels: the view's children when they are buildings or pods; otherwise the view itself.
    child = None
    if view.level in zooms and zooms.index(view.level) + 1 < len(zooms):
        nxt = zooms[zooms.index(view.level) + 1]
        if nxt in ("building", "pod"):
            child = nxt
    panel_gpus = h.size(child) if child else gpu1 - gpu0
    starts = list(range(gpu0, gpu1, panel_gpus))
    n_panels = len(starts)
    fit: _Fit | None = None
    for g in _pixel_sizes(h, panel_gpus):
        panel_pixels = -(-panel_gpus // g)
        # Natural columns: a rack per column (a node per column inside a rack, the node itself inside a node).
        natural_unit = h.gpus_per_node if view.level == "rack" else h.gpus_per_rack
        column = natural_unit // g if g < natural_unit and natural_unit % g == 0 else None
        if view.level == "node" or gpu1 - gpu0 <= h.gpus_per_node:
            column = None   # a node's GPUs side by side, as on the board
        margin = MARGIN if column is not None and view.level not in ("rack", "node") else 0
        scales = range(MAX_SCALE, 0, -1) if g == 1 else (1,)
        for scale in scales:
            for gap_x in ((1, 0) if scale >= 2 else (0,)):
                fit = _try(n_panels, panel_pixels, column, scale, margin, width, height, gap_x)
                if fit is not None:
                    break
            if fit is None and column is not None and scale == 1:
                fit = _try(n_panels, panel_pixels, None, scale, 0, width, height)
            if fit is not None:
                fit.g = g
                break
        if fit is not None:
            break
    if fit is None:   # even one pixel per panel does not fit: draw what fits of the coarsest layout
        g = panel_gpus
        fit = _Fit(g=g, scale=1, column=2, pitch=1, pitch_y=1, margin=0, band_gap=0, cols_per_band=1, bands=1,
                   panel_w=1, panel_h=2, panels_across=max(1, width // (1 + PANEL_GAP)))
    return _paint(h, view, width, height, gpu0, gpu1, child, starts, fit)


def _paint(h: Geometry, view: View, width: int, height: int, gpu0: int, gpu1: int, child: str | None,
           starts: list[int], fit: _Fit) -> Layout:
    g, pitch, scale, col = fit.g, fit.pitch, fit.scale, fit.column
    half = np.full((height * 2 + 2, width), BLANK_CELL, dtype=np.int32)
    text = [[" "] * width for _ in range(height)]
    n_pixels = -(-(gpu1 - gpu0) // g)
    pixel_x = np.zeros(n_pixels, dtype=np.int32)
    pixel_yh = np.zeros(n_pixels, dtype=np.int32)
    panels: list[Panel] = []
    band_rows = -(-(col * fit.pitch_y) // 2)
    panel_gpus = h.size(child) if child else gpu1 - gpu0
    rows = -(-height // (fit.panel_h + 1))           # panels go row by row: the later ones are below the box
    for k, start in enumerate(starts[: rows * fit.panels_across]):
        end = min(start + panel_gpus, gpu1)
        across, down = k % fit.panels_across, k // fit.panels_across
        px = across * (fit.panel_w + PANEL_GAP)
        py = down * (fit.panel_h + 1)
        if py >= height or px >= width:
            continue
        if child:
            title = _panel_title(h, child, start // h.size(child), start, end)
        elif view.level == "site":
            title = f"{gpu1 - gpu0:,} GPUs"
        else:
            title = _panel_title(h, view.level, view.index, start, end)
        panels.append(Panel(start, end, px, py, fit.panel_w, fit.panel_h, title, fit.margin))
        room = max(0, min(fit.panel_w, width - px))
        if len(title) > room:
            title = title.split(" · ")[0]        # "pod 3", not "pod 3 · ra"
        if len(title) > room and (across == fit.panels_across - 1 or k == len(starts) - 1):
            room = width - px                    # nothing to its right: "rack 13" past a narrow panel
        _write(text, half, py, px, title[:room], TITLE_CELL)
        # Pixels of this panel, vectorized.
        p0 = (start - gpu0) // g
        count = -(-(end - start) // g)
        k_local = np.arange(count)
        column_no = k_local // col
        row_in_col = k_local % col
        band = column_no // fit.cols_per_band
        cx = px + fit.margin + (column_no % fit.cols_per_band) * pitch
        y_half = 2 * (py + 1) + band * 2 * (band_rows + fit.band_gap) + row_in_col * fit.pitch_y
        pixel_x[p0:p0 + count] = cx
        pixel_yh[p0:p0 + count] = y_half
        ids = np.arange(p0, p0 + count, dtype=np.int32)
        for dx in range(scale):
            for dy in range(scale):
                xs, ys = cx + dx, y_half + dy
                ok = (xs < width) & (ys < height * 2)
                half[ys[ok], xs[ok]] = ids[ok]
        if fit.margin:
            units = h.gpus_per_rack
            for b in range(fit.bands):
                first_pixel = b * fit.cols_per_band * col
                if first_pixel >= count:
                    break
                label = f"r{(start + first_pixel * g) // units}"
                _write(text, half, py + 1 + b * (band_rows + fit.band_gap), px, label[: fit.margin - 1],
                       LABEL_CELL)
    top = half[0:height * 2:2].copy()
    bottom = half[1:height * 2:2].copy()
    return Layout(view=view, hierarchy=h, width=width, height=height, g=g, scale=scale, column=col, gpu0=gpu0,
                  gpu1=gpu1, top=top, bottom=bottom, text=["".join(row) for row in text], panels=panels,
                  pixel_x=pixel_x, pixel_yh=pixel_yh)


def _write(text: list[list[str]], half: np.ndarray, y: int, x: int, label: str, code: int) -> None:
    if not (0 <= y < len(text)):
        return
    row = text[y]
    for i, ch in enumerate(label):
        if x + i >= len(row):
            break
        row[x + i] = ch
        half[2 * y, x + i] = code
        half[2 * y + 1, x + i] = code
