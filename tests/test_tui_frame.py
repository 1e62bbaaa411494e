"""A frame redraws only what changed (issue 26): the heatmap builds and repaints only the rows with a cell
whose colour changed, a panel only its lines whose text changed, the screen only the widgets over a changed
region, and what they draw is what they draw whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from clustertop.engine.stream import schema
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.filters import Remembered
from clustertop.tui.index import EventIndex
from clustertop.tui.sources import Source
from clustertop.tui.widgets.heatmap import Heatmap
from clustertop.tui.widgets.legend import Legend
from clustertop.tui.widgets.panel import line_keys
from clustertop.tui.widgets.power import PowerPanel
from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from rich.text import Text
from textual.app import App, ComposeResult
from textual.color import Color
from textual.filter import ANSIToTruecolor
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static
from tui_pilot import SIZE, sync

GPUS = 6144
Calls = list[tuple[tuple[Region, ...], dict[str, Any]]]    # what a widget asked Textual to repaint
SLOW = (1024, 1040)      # two nodes of the first job: the only GPUs whose utilization changes at 2 s


def _util(t: float) -> np.ndarray:
    util = np.r_[np.full(3072, 80), np.full(3072, 40)]
    if t >= 2.0:
        util[SLOW[0]:SLOW[1]] = 10
    if t >= 3.0:                   # then a stripe over both jobs, every 96th GPU
        util[::96] = 100
    return util


def _source() -> Source:
    """Two jobs (a pod each, so their names are written over the map) and a sample a second."""
    topology = {"gpus": GPUS, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 3072,
                "gpus_per_building": GPUS}
    jobs = [{"name": name, "first_gpu": 3072 * i, "gpus": 3072, "tp": 8, "cp": 1, "pp": 4, "dp": 96, "ep": 1,
             "model": "llama3.1-405b"} for i, name in enumerate(("pretrain", "serving"))]
    header = {"type": "header", "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
              "scenario": {"name": "frame", "cluster": {"gpu": {"name": "h100", "tdp_w": 700.0}}},
              "topology": topology, "jobs": jobs, "sample_interval_s": 1.0, "duration_s": 60.0}
    index = EventIndex(header)
    for t in (1.0, 2.0, 3.0, 4.0):
        util = _util(t)
        index.add({"t": t, "type": "sample", "util": schema.rle_encode(util),
                   "power_w": schema.rle_encode(util * 7),
                   "phase": schema.rle_encode((util > 20).astype(int)),
                   "links": {"node": 0.3, "core": 0.1}, "site_mw": 3.0})
    index.finish()
    return Source("frame.jsonl", index)


def _spy(heatmap: Heatmap) -> list[tuple[Region, ...]]:
    """Record what the heatmap asks Textual to repaint: () is the whole widget."""
    calls: list[tuple[Region, ...]] = []
    refresh = heatmap.refresh

    def spy(*regions: Region, **kwargs: Any) -> Heatmap:
        calls.append(regions)
        return refresh(*regions, **kwargs)

    heatmap.refresh = spy  # type: ignore[method-assign]
    return calls


def _rows(regions: tuple[Region, ...]) -> set[int]:
    return {y for region in regions for y in region.line_range}


def _rows_showing(heatmap: Heatmap, pixels: Any) -> set[int]:
    """The map's rows whose top or bottom half shows one of `pixels`."""
    lay = heatmap.layout_info
    return set(np.nonzero(np.isin(lay.top, pixels) | np.isin(lay.bottom, pixels))[0].tolist())


@asynccontextmanager
async def _paused() -> AsyncIterator[tuple[ClusterTopApp, Any, Heatmap]]:
    """The two jobs' source at 1 s, paused: the app, its pilot and its heatmap."""
    app = ClusterTopApp([_source()], start_t=1.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        yield app, pilot, app.screen.query_one(Heatmap)


def _lines(heatmap: Heatmap) -> list[list[Any]]:
    return [list(strip) for strip in heatmap.render_frame()]


def _shown(heatmap: Heatmap) -> list[list[Any]]:
    """The lines Textual shows of the heatmap (the rows not repainted come from its cache)."""
    return [list(strip) for strip in heatmap.render_lines(heatmap.size.region)]


def _whole(heatmap: Heatmap) -> list[list[Any]]:
    """The frame built from nothing, as after a change of view."""
    heatmap._frame_context = None
    return _lines(heatmap)


@sync
async def test_a_new_sample_repaints_only_the_rows_whose_cells_changed() -> None:
    async with _paused() as (app, pilot, heatmap):
        calls = _spy(heatmap)
        lay = heatmap.layout_info
        app.seek(2.0)
        await pilot.pause()
        rows = _rows_showing(heatmap, np.unique([lay.pixel_of(g) for g in range(*SLOW)]))
        assert calls and all(regions for regions in calls)           # never the whole map
        assert set().union(*map(_rows, calls)) == rows and len(rows) < lay.height // 4
        heatmap.set_cursor(1100)
        await pilot.pause()
        calls.clear()
        heatmap.set_cursor(2000)                                     # the cursor: its old and new rows
        await pilot.pause()
        moved = _rows_showing(heatmap, [lay.pixel_of(1100), lay.pixel_of(2000)])
        assert calls and set().union(*map(_rows, calls)) == moved
        calls.clear()
        app.seek(2.0)                                               # the same picture: nothing to repaint
        await pilot.pause()
        assert not set().union(*map(_rows, calls)) and all(regions for regions in calls)


@sync
async def test_the_frame_built_row_by_row_is_the_frame_built_whole() -> None:
    async with _paused() as (app, pilot, heatmap):
        steps = [lambda: app.seek(2.0), lambda: heatmap.set_cursor(1030), lambda: app.seek(3.0),
                 lambda: app.seek(4.0), lambda: pilot.press("n"), lambda: app.seek(1.0),
                 lambda: heatmap.set_cursor(5000), lambda: pilot.press("2"), lambda: app.seek(3.0),
                 lambda: pilot.press("3"), lambda: app.seek(2.0), lambda: pilot.press("n", "n")]
        for step in steps:
            done = step()
            if done is not None:
                await done
            await pilot.pause()
            drawn, shown = _lines(heatmap), _shown(heatmap)
            assert drawn == _whole(heatmap)
            heatmap.refresh()                                       # all of it again: the same screen
            await pilot.pause()
            assert _shown(heatmap) == shown
            assert any(seg.text.startswith("▸") for line in drawn for seg in line)   # the jobs' names


@sync
async def test_the_heatmap_shows_its_rows_through_the_filters_alone() -> None:
    """What Textual shows of the map is its frame's rows through the app's line filters: the row a new sample
    changed is not copied (a row the filters leave as it is is shown itself), and it is what Textual's own
    styling of the rows shows; with a style of its own (padding here) the map is drawn Textual's way."""
    async with _paused() as (app, pilot, heatmap):
        background = heatmap.background_colors[1]
        for t in (2.0, 3.0):
            app.seek(t)
            await pilot.pause()
            region = heatmap.size.region
            shown = heatmap.render_lines(region)
            frame = heatmap.render_frame()
            for row, strip in zip(frame, shown):
                filtered = row
                for line_filter in heatmap.get_line_filters():
                    filtered = filtered.apply_filter(line_filter, background)
                assert list(strip) == list(filtered)
                assert strip is row            # truecolor runs, through ANSI-to-truecolor: the row itself
            heatmap.refresh()
            assert [list(s) for s in Widget.render_lines(heatmap, region)] == [list(s) for s in shown]
            right = Region(region.width // 2, 1, region.width - region.width // 2, region.height - 2)
            assert [list(s) for s in heatmap.render_lines(right)] == \
                [list(s) for s in Widget.render_lines(heatmap, right)]
        heatmap.styles.padding = (0, 1)
        await pilot.pause()
        region = heatmap.size.region
        assert [list(s) for s in heatmap.render_lines(region)] == \
            [list(s) for s in Widget.render_lines(heatmap, region)]
        assert all(strip.text.startswith(" ") for strip in heatmap.render_lines(region))


class _CountedStyle(Style):
    """A style that counts how often it is hashed."""

    hashed = 0

    def __hash__(self) -> int:
        _CountedStyle.hashed += 1
        return super().__hash__()


def test_a_remembered_filter_finds_a_run_without_hashing_its_style() -> None:
    """The heatmap's runs come back frame after frame as the same segments: what a filter made of one is found
    by the segment itself (a lookup by value hashes its style, a Python call per run); an equal segment that
    is another object is filtered as the filter does."""
    inner = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
    memo = Remembered(inner)
    background = Color(30, 30, 30)
    runs = [Segment("▀" * k, _CountedStyle(color="red", bgcolor=f"#0000{k:02x}")) for k in range(1, 9)]
    first = memo.apply(runs, background)
    assert first == inner.apply(runs, background)
    _CountedStyle.hashed = 0
    again = memo.apply(runs[::-1], background)
    assert again == first[::-1] and all(a is b for a, b in zip(again, first[::-1]))
    assert _CountedStyle.hashed == 0
    copies = [Segment(run.text, run.style) for run in runs]
    assert memo.apply(copies, background) == first
    assert not memo.keeps(runs, background)                 # ANSI red: made truecolor
    truecolor = [Segment("▀" * k, Style(color="#ff0000", bgcolor=f"#0000{k:02x}")) for k in range(1, 9)]
    assert memo.keeps(truecolor, background) and memo.keeps(truecolor[::2], background)
    assert memo.apply(truecolor, background) == truecolor
    assert not memo.keeps([*truecolor, runs[0]], background)


class _Figures(App[None]):
    """A panel alone, as the side column stacks it."""

    def compose(self) -> ComposeResult:
        yield PowerPanel(id="panel")


def _figures(site: str, swing: str, style: str = "bold") -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("site ", style="dim")
    text.append(site, style=style)
    text.append("\nsparkline ▁▂▃▄", style="yellow")
    text.append(f"\nrange 1 MW – 2 MW  swing {swing}", style="dim")
    return text


@sync
async def test_a_panel_repaints_only_its_lines_that_changed() -> None:
    app = _Figures()
    async with app.run_test(size=(60, 12)) as pilot:
        panel = app.query_one(PowerPanel)
        panel.show_if_changed("a", _figures("20.1 MW", "1 MW"))
        await pilot.pause()
        calls: Calls = []
        refresh = Widget.refresh

        def spy(widget: Widget, *regions: Region, **kwargs: Any) -> Widget:
            if widget is panel:           # what reaches Textual
                calls.append((regions, kwargs))
            return refresh(widget, *regions, **kwargs)

        Widget.refresh = spy  # type: ignore[method-assign]
        try:
            await _steps(pilot, panel, calls)
        finally:
            Widget.refresh = refresh  # type: ignore[method-assign]


class _Wrapped(App[None]):
    """A legend: its text wraps."""

    def compose(self) -> ComposeResult:
        yield Legend(id="legend")


@sync
async def test_a_wrapped_text_lays_the_screen_out_again_only_when_its_height_changes() -> None:
    """The legend's text wraps, so its lines are not drawn one by one: it is repainted whole, but the screen
    is laid out again (every widget arranged, a frame's worth of work) only when it takes more or fewer
    lines."""
    app = _Wrapped()
    async with app.run_test(size=(40, 10)) as pilot:
        legend = app.query_one(Legend)
        legend.show_if_changed("a", Text("mean 40%"))
        await pilot.pause()
        calls: Calls = []
        refresh = Widget.refresh

        def spy(widget: Widget, *regions: Region, **kwargs: Any) -> Widget:
            if widget is legend:
                calls.append((regions, kwargs))
            return refresh(widget, *regions, **kwargs)

        Widget.refresh = spy  # type: ignore[method-assign]
        try:
            legend.show_if_changed("b", Text("mean 41%"))
            await pilot.pause()
            assert calls and not any(kwargs.get("layout") for _, kwargs in calls)
            assert "mean 41%" in "".join(strip.text for strip in legend.render_lines(legend.size.region))
            calls.clear()
            legend.show_if_changed("c", Text("mean 41% " + "and more words " * 4))
            await pilot.pause()
            assert any(kwargs.get("layout") for _, kwargs in calls)
        finally:
            Widget.refresh = refresh  # type: ignore[method-assign]
        assert legend.size.height == 2


@sync
async def test_a_panel_looks_for_no_links_to_highlight() -> None:
    """A panel's text has no links: its lines are drawn without Textual's link styling, which restyles every
    line drawn, word by word, to find none (and the screen looks the same: the snapshot tests)."""
    app = _Figures()
    async with app.run_test(size=(60, 12)) as pilot:
        panel = app.query_one(PowerPanel)
        styled: list[Strip] = []
        link_style = Strip._apply_link_style

        def spy(strip: Strip, style: Any) -> Strip:
            styled.append(strip)
            return link_style(strip, style)

        Strip._apply_link_style = spy  # type: ignore[method-assign]
        try:
            for k, site in enumerate(("20.1 MW", "20.2 MW")):
                panel.show_if_changed(str(k), _figures(site, "1 MW"))
                await pilot.pause()
                assert "".join(strip.text for strip in panel.render_lines(panel.size.region)).count(site) == 1
        finally:
            Strip._apply_link_style = link_style  # type: ignore[method-assign]
        assert not styled


async def _steps(pilot: Any, panel: PowerPanel, calls: Calls) -> None:
    """New figures, a line or two changed at a time: only those lines are drawn again and reach Textual, and
    the screen then shows what a repaint of the whole panel shows."""
    steps = [(_figures("20.2 MW", "1 MW"), {0}), (_figures("20.2 MW", "2 MW"), {2}),
             (_figures("20.2 MW", "2 MW", style="red"), {0}),           # the same words in another style
             (_figures("20.3 MW", "3 MW"), {0, 2})]
    for k, (text, rows) in enumerate(steps):
        calls.clear()
        drawn = [panel.render_line(y) for y in range(panel.size.height)]
        assert panel.show_if_changed(f"step {k}", text)
        await pilot.pause()
        assert calls and all(regions for regions, _ in calls)              # never the whole panel...
        assert not any(kwargs.get("layout") for _, kwargs in calls)        # ...nor the screen's layout
        assert set().union(*(_rows(regions) for regions, _ in calls)) == rows
        again = [y for y in range(panel.size.height) if panel.render_line(y) is not drawn[y]]
        assert again == sorted(rows)                                       # ...nor draws the others again
        shown = [list(strip) for strip in panel.render_lines(panel.size.region)]
        panel.refresh()                                                   # all of it again: the same
        await pilot.pause()
        assert [list(strip) for strip in panel.render_lines(panel.size.region)] == shown
    calls.clear()
    panel.show_if_changed("more", _figures("20.3 MW", "3 MW") + Text("\nso far 1 MWh"))
    await pilot.pause()
    assert any(not regions and kwargs.get("layout") for regions, kwargs in calls)       # taller: laid out


def test_a_style_over_several_lines_counts_in_each() -> None:
    one, two = Text("ab\ncd\nef"), Text("ab\ncd\nef")
    one.stylize("bold", 1, 4)          # "b", the newline and "c"
    two.stylize("bold", 1, 2)
    keys = line_keys(one), line_keys(two)
    assert [a == b for a, b in zip(*keys)] == [True, False, True]
    assert [plain for plain, _ in keys[0]] == ["ab", "cd", "ef"]


def _cells(strips: list[Strip]) -> list[list[tuple[str, Any]]]:
    """Each line of a screen as its cells: (character, style)."""
    return [[(char, segment.style) for segment in strip for char in segment.text] for strip in strips]


def _apply(screen: list[list[tuple[str, Any]]], update: Any) -> None:
    """Write a partial update (Textual's ChopsUpdate) on `screen`, as a terminal shows it: each changed span
    of each line gets the cells of the chops under it."""
    for y, x1, x2 in update.spans:
        for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items()):
            if strip is None:
                continue
            cells = _cells([strip])[0]
            assert len(cells) == end - x                   # one cell a character on this screen
            for at in range(max(x, x1), min(end, x2)):
                screen[y][at] = cells[at - x]


def _changed_frame(app: ClusterTopApp, t: float) -> tuple[Any, set[Widget], list[Widget]]:
    """Go to `t` and draw the frame as the screen's update timer does: the partial update, the widgets that
    asked to be repainted, and the widgets whose lines the compositor drew for it (in its order)."""
    drawn: list[Widget] = []
    screen = app.screen
    for widget in screen._compositor.visible_widgets:
        render_lines = widget.render_lines

        def spy(crop: Region, widget: Widget = widget, render_lines: Any = render_lines) -> list[Strip]:
            drawn.append(widget)
            return render_lines(crop)

        widget.render_lines = spy  # type: ignore[method-assign]
    app.seek(t)
    screen.update_frame()
    dirty = {w for w in screen.walk_children() if w._repaint_required}
    screen._compositor.update_widgets(dirty)
    update = screen._compositor.render_update()
    for widget in screen._compositor.visible_widgets:
        del widget.render_lines
    return update, dirty, drawn


@sync
async def test_a_frame_draws_only_the_widgets_over_what_changed() -> None:
    """A new sample changes a few rows of the map and the clock at the bottom: Textual's compositor would draw
    every widget between them (their bounding box is the whole screen), this one draws the widgets that show
    a changed region, once each, front to back, and no other: not the panels beside the map, nor the
    containers and the screen behind it."""
    async with _paused() as (app, _pilot, _heatmap):
        update, dirty, drawn = _changed_frame(app, 2.0)
        compositor = app.screen._compositor
        changed = [Region(x, y, x2 - x, 1) for y, x, x2 in update.spans]
        over = [widget for widget, (region, clip) in compositor.visible_widgets.items()
                if any(region.intersection(clip).overlaps(part) for part in changed)]
        assert drawn == [widget for widget in over if widget in drawn] and len(set(drawn)) == len(drawn)
        assert dirty == set(drawn) and {"Heatmap", "TransportBar"} <= {type(w).__name__ for w in drawn}
        behind = {type(widget).__name__ for widget in over if widget not in drawn}
        assert {"MainScreen", "Horizontal", "Vertical"} <= behind
        beside = {type(widget).__name__ for widget in compositor.visible_widgets if widget not in over}
        assert {"EventLog", "JobsPanel", "Footer", "Header"} <= beside


@sync
async def test_a_partial_update_shows_what_the_whole_screen_draws() -> None:
    """Drawing only the widgets over what changed leaves out nothing the screen shows, also where a widget
    lies in front of one that changed (its cells win there)."""
    async with _paused() as (app, pilot, _heatmap):
        compositor = app.screen._compositor
        for front in (None, Static("in front of the map", id="front")):
            if front is not None:
                front.styles.overlay = "screen"
                front.styles.position = "absolute"
                front.styles.offset = (20, 4)
                front.styles.width, front.styles.height = 40, 5
                await app.screen.mount(front)
                await pilot.pause()
            screen = _cells(compositor.render_strips())
            fronts = 0
            for t in (2.0, 3.0, 4.0, 1.0):
                update, _, drawn = _changed_frame(app, t)
                _apply(screen, update)
                assert screen == _cells(compositor.render_strips())
                fronts += front in drawn
                await pilot.pause()
                screen = _cells(compositor.render_strips())
            assert fronts >= (front is not None)
