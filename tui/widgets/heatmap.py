"""The cluster heatmap: one Line-API widget drawing every GPU, two per cell (half blocks), by physical place.

Per frame: aggregate the state's per-GPU array per pixel with numpy, map to colour indices, look the two
pixels of every cell up through the layout's index maps, and merge equal neighbouring cells into one Segment
whose Style is cached per colour pair. The frame is cached until the state's version, the view, the metric,
the cursor, the size or the theme changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

import numpy as np
from clustertop.engine.config.geometry import Geometry
from clustertop.engine.config.phases import PHASE_LABELS, PHASES
from clustertop.engine.stream.state import ClusterState
from rich.segment import Segment
from textual import events
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from .. import palette
from ..filters import FilterMemo, Remembered
from ..grid import Layout, View, layout
from ..grid import levels as zoom_levels
from ..marks import marks_of

HALF = "▀"
BLOCK_LABELS = 5     # cells per pixel side from which each pixel names its phase (no job names over the map)
JOB_LABEL = palette.COLOURS * palette.COLOURS    # cell codes from here: the cells of the k-th job's name
MOVE_TIP = "move the cursor (shift: 8 at a time); click selects"    # one help row for the eight cursor keys


class Heatmap(Widget, can_focus=True):
    """Every GPU of the cluster, coloured by a metric, with a cursor and zoom."""

    DEFAULT_CSS = """
    Heatmap {
        width: 1fr;
        height: 1fr;
        background: $surface;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("k,up", "move(0, -1)", "Cursor up", show=False, key_display="h j k l  ↑ ↓", tooltip=MOVE_TIP),
        Binding("j,down", "move(0, 1)", "Cursor down", show=False, tooltip=MOVE_TIP),
        Binding("h", "move(-1, 0)", "Cursor left", show=False, tooltip=MOVE_TIP),
        Binding("l", "move(1, 0)", "Cursor right", show=False, tooltip=MOVE_TIP),
        Binding("K", "move(0, -8)", "Cursor up x8", show=False, tooltip=MOVE_TIP),
        Binding("J", "move(0, 8)", "Cursor down x8", show=False, tooltip=MOVE_TIP),
        Binding("H", "move(-8, 0)", "Cursor left x8", show=False, tooltip=MOVE_TIP),
        Binding("L", "move(8, 0)", "Cursor right x8", show=False, tooltip=MOVE_TIP),
        Binding("enter,z", "zoom_in", "Zoom in",
                tooltip="zoom in on the cursor: site, building, pod, rack, node"),
        Binding("backspace,Z", "zoom_out", "Zoom out", tooltip="zoom out"),
    ]

    metric: reactive[str] = reactive("util")

    class CursorMoved(Message):
        """The cursor selects other GPUs: [gpu0, gpu1) under the cursor."""

        def __init__(self, heatmap: Heatmap, gpu0: int, gpu1: int) -> None:
            super().__init__()
            self.heatmap = heatmap
            self.gpu0 = gpu0
            self.gpu1 = gpu1

        @property
        def control(self) -> Heatmap:
            return self.heatmap

    class ViewChanged(Message):
        """Zoomed in or out, or switched metric."""

        def __init__(self, heatmap: Heatmap) -> None:
            super().__init__()
            self.heatmap = heatmap

        @property
        def control(self) -> Heatmap:
            return self.heatmap

    def __init__(self, state: ClusterState, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.state = state
        self.hierarchy = Geometry.from_summary(state.topology)
        self.view = View("site")
        self.cursor_gpu = 0
        self.highlight: str | None = None     # a job's name: the other GPUs are dimmed
        self._labels_key: object = None
        self._labels: list[tuple[int, int, str, str]] = []
        none = np.zeros(0, dtype=np.int64)
        self._label_cells: tuple[np.ndarray, np.ndarray, np.ndarray] = (none, none, none)
        self._layout: Layout | None = None
        self._frame: list[Strip] = []                  # every line of the frame last drawn...
        self._frame_key: tuple[object, ...] | None = None  # ...of this state and cursor
        self._frame_context: tuple[object, ...] | None = None    # ...in this view, metric, size, theme
        self._codes: np.ndarray | None = None          # ...whose cells are these colour pairs
        self._segments: dict[int, Segment | None] = {-1: None}   # a run of equal cells by (pair, length);
                                                                # -1: a text's run (made each time)
        self._segments_styles: palette.StyleCache | None = None
        self._line_key: tuple[object, ...] | None = None    # what render_line last checked the frame for
        self._filters = FilterMemo()
        self._styles: palette.StyleCache | None = None
        self._styles_key: tuple[str, str] | None = None

    # -- public -------------------------------------------------------------------------------------------

    def show(self, state: ClusterState) -> None:
        """Draw `state` (a new object after a seek, or the same one with a new version)."""
        if state is not self.state or self._frame_key is None or self._frame_key[0] != state.version:
            if state.topology != self.state.topology:
                self.hierarchy = Geometry.from_summary(state.topology)
                self._layout = None
            self.state = state
            self.redraw()

    @property
    def layout_info(self) -> Layout:
        """The current layout (computed for the widget's size)."""
        return self._get_layout()

    @property
    def cursor_span(self) -> tuple[int, int]:
        """GPUs [start, end) under the cursor."""
        lay = self._get_layout()
        return lay.gpus_of(lay.pixel_of(self.cursor_gpu))

    def set_view(self, view: View) -> None:
        self.view = view
        start, end = view.span(self.hierarchy)
        if not start <= self.cursor_gpu < end:
            self.cursor_gpu = start
        self._layout = None
        self.refresh()
        self.post_message(self.ViewChanged(self))
        self.announce_cursor()

    def go_to(self, gpu: int) -> None:
        """Move the cursor to `gpu`, at the same zoom: the view moves to the container that holds it."""
        gpu = min(max(int(gpu), 0), self.hierarchy.gpus - 1)
        start, end = self.view.span(self.hierarchy)
        if not start <= gpu < end:
            level = self.view.level
            self.cursor_gpu = gpu
            self.set_view(View(level, 0 if level == "site" else gpu // self.hierarchy.size(level)))
        self.set_cursor(gpu)

    def set_cursor(self, gpu: int) -> None:
        start, end = self.view.span(self.hierarchy)
        gpu = min(max(int(gpu), start), end - 1)
        if gpu != self.cursor_gpu:
            self.cursor_gpu = gpu
            self.redraw()
        self.announce_cursor()

    # -- actions ------------------------------------------------------------------------------------------

    def action_move(self, dx: int, dy: int) -> None:
        lay = self._get_layout()
        pixel = lay.pixel_of(self.cursor_gpu)
        step_x, step_y = (1 if dx > 0 else -1 if dx < 0 else 0), (1 if dy > 0 else -1 if dy < 0 else 0)
        for _ in range(max(abs(dx), abs(dy))):
            pixel = lay.neighbour(pixel, step_x, step_y)
        self.set_cursor(lay.gpus_of(pixel)[0])

    def action_zoom_in(self) -> None:
        levels = zoom_levels(self.hierarchy)
        i = levels.index(self.view.level)
        if i + 1 >= len(levels):
            self.notify("Already at one node: the finest zoom", timeout=2)
            return
        level = levels[i + 1]
        self.set_view(View(level, self.cursor_gpu // self.hierarchy.size(level)))

    def action_zoom_out(self) -> None:
        levels = zoom_levels(self.hierarchy)
        i = levels.index(self.view.level)
        if i == 0:
            return
        level = levels[i - 1]
        index = 0 if level == "site" else self.cursor_gpu // self.hierarchy.size(level)
        self.set_view(View(level, index))

    def watch_metric(self) -> None:
        self.refresh()
        self.post_message(self.ViewChanged(self))

    # -- mouse ------------------------------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        lay = self._get_layout()
        top, bottom = lay.at(offset.x, offset.y), lay.at(offset.x, offset.y, lower=True)
        current = lay.pixel_of(self.cursor_gpu)
        pixel = bottom if top == current and bottom >= 0 else top if top >= 0 else bottom
        if pixel >= 0:
            self.set_cursor(lay.gpus_of(pixel)[0])
            if event.chain >= 2:
                self.action_zoom_in()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        lay = self._get_layout()
        offset = event.get_content_offset(self)
        pixel = lay.at(offset.x, offset.y) if offset is not None else -1
        if pixel >= 0:
            self.set_cursor(lay.gpus_of(pixel)[0])
        self.action_zoom_in()
        event.stop()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_zoom_out()
        event.stop()

    def on_resize(self, event: events.Resize) -> None:
        self._layout = None

    # -- rendering ----------------------------------------------------------------------------------------

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return container.height

    def announce_cursor(self) -> None:
        gpu0, gpu1 = self.cursor_span
        self.post_message(self.CursorMoved(self, gpu0, gpu1))

    def _get_layout(self) -> Layout:
        width, height = self.size.width or 1, self.size.height or 1
        lay = self._layout
        if lay is None or lay.width != width or lay.height != height or lay.view != self.view:
            lay = self._layout = layout(self.hierarchy, self.view, width, height)
        return lay

    def _theme(self) -> palette.StyleCache:
        variables = self.app.theme_variables
        background = variables.get("surface", "#1e1e1e")
        key = (self.metric, f"{self.app.theme}:{background}")
        if self._styles is None or self._styles_key != key:
            fg = Color.parse(variables.get("foreground", "#e0e0e0"))
            bg = Color.parse(background)
            muted = fg.blend(bg, 0.45)
            dim = bg.blend(fg, 0.12)
            cursor = "#ffffff" if self.app.current_theme.dark else "#000000"
            self._styles = palette.StyleCache(self.metric,
                                              palette.Theme(bg.hex, fg.hex, muted.hex, cursor, dim.hex))
            self._styles_key = key
        return self._styles

    def pixel_colours(self, lay: Layout) -> np.ndarray:
        """Colour index of every pixel of the layout for the current metric (numpy, no loop over GPUs), with
        failed, degraded and unallocated GPUs marked (tui/marks.py): a failed GPU shows at every zoom."""
        colours = self.metric_colours(lay)
        marks_of(self.state.header).paint(colours, lay, self.state)
        return colours

    def metric_colours(self, lay: Layout) -> np.ndarray:
        """Colour index of every pixel for the current metric alone."""
        state = self.state
        if not state.samples:        # nothing measured yet: blank, not a cluster of zeros
            return np.full(lay.pixels, palette.BG, dtype=np.int16)
        missing = state.missing("power_w" if self.metric == "power" else "util")
        if self.metric == "phase":
            rows, table = state.mix.get()
            phase = palette.known_phases(state.phase[lay.gpu0:lay.gpu1])
            labelled = lay.scale >= BLOCK_LABELS     # as render_frame: blocks that name their own phase
            codes = palette.network_phases(rows[lay.gpu0:lay.gpu1], table, phase, lay.gpu0,
                                           0 if labelled else lay.g)
            colours = palette.phase_colour(lay.phase(codes, lay.gpu0))
            if missing is not None:        # the phase of real telemetry comes from its utilization
                colours[lay.count(~missing) == 0] = palette.NODATA
            return colours
        if self.metric == "power":
            gpu = state.header.get("scenario", {}).get("cluster", {}).get("gpu", {})
            values, top = state.power_w, float(gpu.get("tdp_w") or 0) or float(state.power_w.max() or 1.0)
        else:
            values, top = state.util, 1.0
        if missing is None:
            return palette.level_of(lay.mean(values), top)
        means, empty = lay.mean_where(values, ~missing)     # missing, not zero: a pixel of GPUs without data
        colours = palette.level_of(means, top)
        colours[empty] = palette.NODATA
        return colours

    def cell_codes(self, lay: Layout) -> tuple[np.ndarray, np.ndarray]:
        """The colour pair (top * COLOURS + bottom) of every cell, and the colour of every pixel followed by
        the title's, the labels' and the background's (what negative cell codes select)."""
        colours = self.pixel_colours(lay).astype(np.int32)
        job = self.state.jobs.get(self.highlight or "")
        if job is not None and lay.pixels:     # like a k9s namespace: only this job's GPUs keep their colour
            first = np.arange(lay.pixels, dtype=np.int64) * lay.g + lay.gpu0
            inside = (first + lay.g > job.first_gpu) & (first < job.first_gpu + job.gpus)
            colours[~inside] = palette.DIM
        if lay.pixels:
            colours[lay.pixel_of(self.cursor_gpu)] = palette.CURSOR
        table = np.concatenate([colours,
                                np.array([palette.TITLE, palette.LABEL, palette.BG], dtype=np.int32)])
        return table[lay.top] * palette.COLOURS + table[lay.bottom], table

    def render_frame(self) -> list[Strip]:
        """Every line of the heatmap for the current state."""
        self._update_frame(diff=False)
        return list(self._frame)

    def redraw(self) -> None:
        """Repaint what changed since the last frame: the rows with a cell whose colour changed (every row
        after a change of view, metric, size, theme, highlight or jobs)."""
        rows = self._update_frame(diff=True)
        if rows is None:
            self.refresh()
            return
        if not rows.size:
            return
        width = self._get_layout().width                          # the frame's (cached per size)
        first = rows[np.diff(rows, prepend=-2) != 1].tolist()        # runs of consecutive rows
        last = rows[np.diff(rows, append=rows[-1] + 2) != 1].tolist()
        self.refresh(*(Region(0, a, width, b - a + 1) for a, b in zip(first, last)))

    def _update_frame(self, diff: bool) -> np.ndarray | None:
        """Bring the frame up to date with the state and the cursor (the work a frame costs): only its rows
        with a changed cell are built again when `diff` and nothing but the state and the cursor changed.
        Returns those rows, or None when every row was built."""
        lay = self._get_layout()
        styles = self._theme()
        key = (self.state.version, id(self.state), self.cursor_gpu)
        context = (self.hierarchy, self.view, lay.width, lay.height, self.metric, self.app.theme, styles,
                   self.highlight, tuple((j.name, j.first_gpu) for j in self.state.jobs.values()))
        same = self._frame_context == context and self._codes is not None
        if same and self._frame_key == key:
            return np.zeros(0, dtype=np.int64)
        codes, table = self.cell_codes(lay)
        labelled = lay.scale < BLOCK_LABELS and len(self.state.jobs) > 1
        if labelled:                              # each job's name over its cells: a run of its own
            ys, xs, ids = self._job_label_cells(lay)
            codes[ys, xs] = JOB_LABEL + ids
        if styles is not self._segments_styles:
            self._segments, self._segments_styles = {-1: None}, styles
        if diff and same and lay.scale < BLOCK_LABELS and self._codes is not None \
                and self._codes.shape == codes.shape:
            rows: np.ndarray | None = np.flatnonzero((codes != self._codes).any(axis=1))
        else:
            rows = None
        built = np.arange(lay.height) if rows is None else rows
        if rows is None:
            self._frame = [Strip.blank(lay.width, styles.blank)] * lay.height
        for y, strip in zip(built.tolist(), self._strips(lay, codes, built, styles)):
            self._frame[y] = strip
        if lay.scale >= BLOCK_LABELS:
            self._label_blocks(lay, self._frame, table, styles)
        self._codes, self._frame_key, self._frame_context = codes, key, context
        return rows

    def _strips(self, lay: Layout, codes: np.ndarray, rows: np.ndarray,
                styles: palette.StyleCache) -> list[Strip]:
        """The lines `rows` of the frame: each run of equal cells one Segment, found for all rows at once;
        a run of pixels or background is cached by colour pair and length, a title's or a label's is its
        text."""
        width = lay.width
        if not rows.size or not width:
            return [Strip.blank(width, styles.blank) for _ in rows.tolist()]
        cells = codes[rows]
        starts = np.ones(cells.shape, dtype=bool)
        starts[:, 1:] = cells[:, 1:] != cells[:, :-1]
        flat = np.flatnonzero(starts)
        x0 = flat % width
        x1 = np.append(x0[1:], 0)
        x1[x1 == 0] = width                      # a run ends where the next begins, or with its row
        runs = cells.ravel()[flat]
        title = palette.TITLE * palette.COLOURS + palette.TITLE
        label = palette.LABEL * palette.COLOURS + palette.LABEL
        texts = np.flatnonzero((runs == title) | (runs == label) | (runs >= JOB_LABEL))
        keys = runs * (width + 1) + (x1 - x0)
        keys[texts] = -1                         # not cached: set below
        cache = self._segments
        keys_list = keys.tolist()
        try:
            segments: list[Segment | None] = list(map(cache.__getitem__, keys_list))
        except KeyError:                         # runs not seen yet
            blank = palette.BG * palette.COLOURS + palette.BG
            for key in set(keys_list).difference(cache):
                code, length = divmod(key, width + 1)
                cache[key] = (Segment(" " * length, styles.blank) if code == blank else
                              Segment(HALF * length, styles.pair(code)))
            segments = list(map(cache.__getitem__, keys_list))
        for j, y, start, end, code in zip(texts.tolist(), rows[flat[texts] // width].tolist(),
                                          x0[texts].tolist(), x1[texts].tolist(), runs[texts].tolist()):
            if code >= JOB_LABEL:
                _, _, text, name = self._labels[code - JOB_LABEL]
                segments[j] = Segment(text, styles.job_label(name == self.highlight))
            else:
                segments[j] = Segment(lay.text[y][start:end], styles.title if code == title else styles.label)
        bounds = np.cumsum(starts.sum(axis=1)).tolist()
        filled = cast(list[Segment], segments)
        return [Strip(filled[a:b], width) for a, b in zip([0, *bounds], bounds)]

    def job_labels(self, lay: Layout) -> list[tuple[int, int, str, str]]:
        """(x, y, text, job) of each job's name where its GPUs begin in each panel of the view, so that at any
        zoom a reader can tell which block is which job; labels that would overlap an earlier one are left
        out."""
        out: list[tuple[int, int, str, str]] = []
        taken: dict[int, list[tuple[int, int]]] = {}
        for job in sorted(self.state.jobs.values(), key=lambda j: j.first_gpu):
            for panel in lay.panels:
                lo, hi = max(job.first_gpu, panel.gpu0), min(job.first_gpu + job.gpus, panel.gpu1)
                if lo >= hi:
                    continue
                pixel = lay.pixel_of(lo)
                x, y = int(lay.pixel_x[pixel]), int(lay.pixel_yh[pixel]) // 2
                room = min(panel.x + panel.width, lay.width) - x
                text = f"▸{job.name}"[:max(0, room)]
                if len(text) < 3 or any(a < x + len(text) and x < b for a, b in taken.get(y, [])):
                    continue
                taken.setdefault(y, []).append((x, x + len(text)))
                out.append((x, y, text, job.name))
        return out

    def _job_label_cells(self, lay: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cells (rows, columns) each job's name covers (`job_labels`), and which label covers each."""
        key = (id(lay), tuple((j.name, j.first_gpu) for j in self.state.jobs.values()))
        if self._labels_key != key:
            self._labels = self.job_labels(lay)
            shown = [(k, x, y, len(text)) for k, (x, y, text, _) in enumerate(self._labels) if y < lay.height]
            self._labels_key, self._label_cells = key, (
                np.array([y for _, _, y, n in shown for _ in range(n)], dtype=np.int64),
                np.array([x + i for _, x, _, n in shown for i in range(n)], dtype=np.int64),
                np.array([k for k, _, _, n in shown for _ in range(n)], dtype=np.int64))
        return self._label_cells

    def _label_blocks(self, lay: Layout, strips: list[Strip], table: np.ndarray,
                      styles: palette.StyleCache) -> None:
        """Write each GPU's number and value inside its block when blocks are big (rack and node views)."""
        state = self.state
        marks = marks_of(state.header)
        inner = lay.scale - 1
        for pixel in range(lay.pixels):
            gpu = lay.gpu0 + pixel * lay.g
            missing = state.missing("power_w" if self.metric == "power" else "util")
            mark = marks.of(state, gpu)
            if mark in ("failed", "unallocated"):
                value = mark
            elif missing is not None and missing[gpu]:
                value = "no data"
            elif self.metric == "phase":
                shares = state.mix.per_gpu(gpu, gpu + 1)[0]
                waiting = float(sum(shares[PHASES.index(w)] for w in palette.WAITS))
                code = int(shares.argmax())
                others = [float(v) for name, v in zip(PHASES, shares) if name not in palette.WAITS]
                if waiting > max(others):
                    value = f"network {waiting * 100:.0f}%"
                else:
                    value = f"{PHASE_LABELS.get(PHASES[code], '?')} {shares[code] * 100:.0f}%"
            elif self.metric == "power":
                value = f"{float(state.power_w[gpu]):.0f} W"
            else:
                value = f"{float(state.util[gpu]) * 100:.0f}%"
            x = int(lay.pixel_x[pixel]) + 1
            y = (int(lay.pixel_yh[pixel]) + 1) // 2 + (1 if lay.scale >= 7 else 0)
            style = styles.on(int(table[pixel]))
            title = f"GPU {gpu:,}" + (" slow" if mark == "degraded" else "")
            for row, text in ((y, title), (y + 1, value)):
                bottom = (int(lay.pixel_yh[pixel]) + lay.scale) // 2
                if row >= bottom or row >= len(strips):
                    continue
                text = text[:inner]
                if x + len(text) > lay.width:
                    continue
                left, _, right = strips[row].divide([x, x + len(text), lay.width])
                strips[row] = Strip.join([left, Strip([Segment(text, style)], len(text)), right])

    def get_line_filters(self) -> Sequence[LineFilter]:
        """The app's line filters, remembering what they made of each segment (runs repeat every frame)."""
        return self._filters(super().get_line_filters())

    def _current_frame(self) -> list[Strip]:
        """The frame, built again whole when something but show() and the cursor changed it (the view, the
        metric, the size, the theme, the highlight)."""
        key = (self.state.version, id(self.state), self.cursor_gpu, self.view, self.metric, self.size,
               self.app.theme, self.highlight)
        if key != self._line_key:
            self._update_frame(diff=False)
            self._line_key = key
        return self._frame

    def render_line(self, y: int) -> Strip:
        frame = self._current_frame()
        if y < len(frame):
            return frame[y]
        return Strip.blank(self.size.width, self._theme().blank)

    def render_lines(self, crop: Region) -> list[Strip]:
        """The rows Textual shows, through the app's line filters. Without a border, padding, outline, tint,
        hatch or opacity of its own (the map's frame is its container's border), Textual's styles would only
        copy each row: the frame's rows are passed on as they are, so a row that did not change is the same
        Strip as before, filtered already, and a changed one costs its filters alone; a row whose runs the
        filters leave as they are (truecolor through ANSI-to-truecolor) is shown itself, no copy made."""
        frame = self._current_frame()
        styles = self.styles
        if (any(styles.gutter) or any(edge for edge, _ in styles.outline) or styles.tint.a
                or styles.text_opacity != 1.0 or self.opacity != 1.0
                or (styles.has_rule("hatch") and styles.hatch != "none")):
            return super().render_lines(crop)
        background = self.background_colors[1]
        filters = self.get_line_filters()
        blank = Strip.blank(self.size.width, self._theme().blank)
        strips = []
        for y in crop.line_range:
            strip = frame[y] if y < len(frame) else blank
            for line_filter in filters:
                if not (isinstance(line_filter, Remembered) and line_filter.keeps(list(strip), background)):
                    strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, self.size.width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips
