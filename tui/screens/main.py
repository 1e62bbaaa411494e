"""The main dashboard: the heatmap with its legend and cursor, job, link and power panels, the event log and
the transport bar.

The side column adapts to the terminal: wide, its panels stack (each can be toggled); narrow or short, it
folds into tabs (one panel at a time); `p` hides it and the heatmap takes the width. The heatmap always keeps
at least half the width. Below 60 x 20 the screen asks to be enlarged.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Header

from ..playback import format_clock
from ..running import running_app
from ..search import Hit, find, place_of
from ..widgets.event_log import EventLog
from ..widgets.footer import Footer
from ..widgets.gpu_table import GpuTable
from ..widgets.heatmap import Heatmap
from ..widgets.inspector import Inspector
from ..widgets.jobs import JobsPanel
from ..widgets.legend import Legend
from ..widgets.links import LinksPanel
from ..widgets.power import PowerPanel
from ..widgets.search_bar import SearchBar
from ..widgets.side_tabs import SideTabs
from ..widgets.too_small import TooSmall
from ..widgets.transport import TransportBar
from .dashboard import DashboardScreen

PANELS = ("jobs", "links", "power", "events")
PANEL_KEYS = ("4", "5", "6", "7")
HIT_TIP = ("after a search: the next / previous hit; else highlight a job on the map (the others dim), the "
           "next on each press, then all")
SORT_TIP = ("sort the jobs table by the next column it shows (▲ ascending, ▼ descending); O, or a click on "
            "the sorted header, reverses it")
PANEL_TIP = "show or hide the jobs, links, power or events panel (folded side column: show that tab)"


def side_width(width: int) -> int:
    """Columns of the side column at a terminal width: never more than half of it."""
    want = 54 if width >= 150 else 46 if width >= 120 else 40
    return min(want, width // 2)


def folded(width: int, height: int) -> bool:
    """Too narrow or short to stack the panels: one at a time, under tabs."""
    return width < 120 or height < 34


class MainScreen(DashboardScreen):
    """One cluster: everything on one screen."""

    MIN_SIZE = (60, 20)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "toggle_side", "Panels",
                tooltip="hide / show the side panels (the heatmap takes the width)"),
        Binding("slash", "search", "Search", key_display="/",
                tooltip="search: a GPU index, node, rack, pod or building number, a host or a job; the map's "
                        "cursor goes there"),
        Binding("n", "next_hit(1)", "Next hit / highlight job", show=False, key_display="n N",
                tooltip=HIT_TIP),
        Binding("N", "next_hit(-1)", "Previous hit", show=False, tooltip=HIT_TIP),
        Binding("w", "toggle_worst", "Worst GPUs", show=False,
                tooltip="the worst GPUs of the view under the map (rack and node zoom: every GPU, always)"),
        Binding("e", "event_filter", "Event filter", show=False,
                tooltip="event log filter: all events, no power swings, faults and restarts ([ ] follow it)"),
        Binding("o", "sort_jobs", "Sort jobs", show=False, key_display="o O",
                tooltip=SORT_TIP),
        Binding("O", "reverse_jobs", "Reverse the jobs' order", show=False, tooltip=SORT_TIP),
        *(Binding(key, f"panel('{name}')", f"{name.title()} panel", show=False, tooltip=PANEL_TIP,
                  key_display="4 5 6 7" if key == "4" else None)
          for key, name in zip(PANEL_KEYS, PANELS)),
    ]

    DEFAULT_CSS = """
    MainScreen #body {
        height: 1fr;
    }
    MainScreen #left {
        width: 1fr;
    }
    MainScreen #side {
        width: 54;
    }
    MainScreen #map {
        height: 1fr;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-subtitle-color: $text-muted;
    }
    MainScreen #map:focus-within {
        border: round $accent;
    }
    MainScreen.-folded #side > Panel {
        height: 1fr;
    }
    MainScreen.-drill #map {
        height: 12;
    }
    MainScreen.-worst #map {
        height: 2fr;
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.hidden: set[str] = set()   # panels the user hid (stacked side column)
        self.tab = PANELS[0]            # the panel shown when the side column is folded
        self.side_shown = True
        self.worst = False              # the worst GPUs under the map at pod and site zoom
        self._drill_mode = ""
        self.hits: list[Hit] = []       # the last search's places, in GPU order
        self.hit = 0

    def compose(self) -> ComposeResult:
        state = running_app(self).states[0]
        yield Header(show_clock=False)
        with Horizontal(id="body"):
            with Vertical(id="left"):
                with Vertical(id="map"):
                    yield Heatmap(state, id="heatmap")
                yield Legend(id="legend")
                yield SearchBar(id="search")
                yield Inspector(id="inspector")
                yield GpuTable(id="gpus")
            with Vertical(id="side"):
                yield SideTabs(PANELS, PANEL_KEYS, id="tabs")
                yield JobsPanel(id="jobs")
                yield LinksPanel(id="links")
                yield PowerPanel(id="power")
                yield EventLog(id="events")
        yield TransportBar(id="transport")
        yield TooSmall()
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#map").border_subtitle = "enter zoom · backspace out · hjkl move · m metric"
        self.query_one(Heatmap).focus()
        self.arrange_side()
        self.update_frame()

    # -- the side column ------------------------------------------------------------------------------------

    def check_size(self) -> None:
        super().check_size()
        if self.is_mounted:
            self.arrange_side()

    def arrange_side(self) -> None:
        """Width of the side column and which panels show, for the terminal's size and the user's toggles."""
        width, height = self.app.size
        side = self.query_one("#side")
        side.display = self.side_shown
        side.styles.width = side_width(width)
        fold = folded(width, height)
        self.set_class(fold, "-folded")
        tabs = self.query_one(SideTabs)
        tabs.display = fold
        tabs.show(self.tab)
        for name in PANELS:
            self.panel(name).display = name == self.tab if fold else name not in self.hidden

    def panel(self, name: str) -> Widget:
        return self.kept(f"#{name}", Widget)

    def action_toggle_side(self) -> None:
        self.side_shown = not self.side_shown
        self.arrange_side()

    def action_panel(self, name: str) -> None:
        """Folded: show that tab. Stacked: toggle that panel (the event log stays when all else is hidden)."""
        self.side_shown = True
        width, height = self.app.size
        if folded(width, height):
            self.tab = name
        elif name in self.hidden:
            self.hidden.discard(name)
        else:
            self.hidden.add(name)
        self.arrange_side()
        self.update_frame()

    def action_toggle_worst(self) -> None:
        self.worst = not self.worst
        self.update_frame()

    def drill(self) -> str:
        """'' (the heatmap alone), 'all' (a row per GPU: rack and node zoom) or 'worst' (pod and site
        zoom)."""
        level = self.query_one(Heatmap).view.level
        if level in ("rack", "node"):
            return "all"
        return "worst" if self.worst else ""

    def action_highlight_job(self) -> None:
        heatmap = self.query_one(Heatmap)
        names = [None, *sorted(heatmap.state.jobs, key=lambda n: heatmap.state.jobs[n].first_gpu)]
        heatmap.highlight = names[(names.index(heatmap.highlight) + 1) % len(names)] \
            if heatmap.highlight in names else None
        if heatmap.highlight is not None:
            job = heatmap.state.jobs[heatmap.highlight]
            heatmap.set_cursor(job.first_gpu)
        self.notify(f"highlight: {heatmap.highlight or 'all jobs'}", timeout=2)
        heatmap.refresh()
        self.update_frame()

    # -- search ---------------------------------------------------------------------------------------------

    def action_search(self) -> None:
        self.query_one(SearchBar).open()

    def on_input_submitted(self, message: SearchBar.Submitted) -> None:
        bar = self.query_one(SearchBar)
        query = message.value.strip()
        bar.action_close()
        heatmap = self.query_one(Heatmap)
        heatmap.focus()
        if not query:
            return
        self.hits, self.hit = find(query, running_app(self).states[0]), 0
        if not self.hits:
            self.notify(f"nothing matches {query!r}: try a GPU index, node 12, rack 3, pod 1, a host or a "
                        "job", severity="warning", timeout=4)
            return
        self._go_to_hit()

    def action_next_hit(self, step: int) -> None:
        """n / N: the next / previous search hit; without a search, n highlights the next job."""
        if not self.hits:
            if step > 0:
                self.action_highlight_job()
            return
        self.hit = (self.hit + step) % len(self.hits)
        self._go_to_hit()

    def _go_to_hit(self) -> None:
        hit = self.hits[self.hit]
        self.query_one(Heatmap).go_to(hit.gpu0)
        more = f" ({self.hit + 1} of {len(self.hits)}: n / N for the others)" if len(self.hits) > 1 else ""
        self.notify(f"{hit.label}{more}", timeout=3)
        self.update_frame()

    @property
    def event_filter(self) -> str:
        return self.query_one(EventLog).mode

    def action_event_filter(self) -> None:
        mode = self.query_one(EventLog).cycle_filter()
        self.notify(f"event log: {mode}", timeout=2)
        self.update_frame()

    def on_event_log_chosen(self, message: EventLog.Chosen) -> None:
        """Seek to the event; one that names a GPU, node, host or job moves the map's cursor there."""
        app = running_app(self)
        app.seek(message.t)
        hit = place_of(message.event, app.states[0]) if message.event is not None else None
        if hit is not None:
            self.query_one(Heatmap).go_to(hit.gpu0)
            self.notify(f"{hit.label} at {format_clock(message.t)}", timeout=2)

    def action_sort_jobs(self) -> None:
        order = self.query_one(JobsPanel).cycle_sort()
        self.notify(f"jobs sorted by {order}", timeout=2)
        self.update_frame()

    def action_reverse_jobs(self) -> None:
        order = self.query_one(JobsPanel).reverse_sort()
        self.notify(f"jobs sorted by {order}", timeout=2)
        self.update_frame()

    def on_side_tabs_chosen(self, message: SideTabs.Chosen) -> None:
        self.tab = message.name
        self.arrange_side()
        self.update_frame()

    # -- drawing --------------------------------------------------------------------------------------------

    def on_heatmap_cursor_moved(self, message: Heatmap.CursorMoved) -> None:
        self.query_one(Inspector).show(running_app(self).states[0], message.gpu0, message.gpu1)

    def update_frame(self) -> None:
        app = running_app(self)
        state = app.states[0]
        playback = app.playback
        heatmap = self.kept("#heatmap", Heatmap)
        frame = self.kept("#map", Widget)
        self.show_map(heatmap, frame, self.kept("#legend", Legend), state)
        c0, c1 = heatmap.cursor_span
        self.kept("#inspector", Inspector).show(state, c0, c1)
        mode = self.drill()
        table = self.kept("#gpus", GpuTable)
        if mode != self._drill_mode:
            self._drill_mode = mode
            self.call_after_refresh(self.update_frame)     # again once the table has its size
        self.set_class(mode == "all", "-drill")
        self.set_class(mode == "worst", "-worst")
        table.display = bool(mode)
        if mode:
            gpu0, gpu1 = heatmap.view.span(heatmap.hierarchy)
            table.show(state, gpu0, gpu1, mode == "worst", app.sources[0].index, playback.t)
        if self.panel("jobs").display:
            self.kept("#jobs", JobsPanel).show(state, playback.t)
        if self.panel("links").display:
            self.kept("#links", LinksPanel).show(state)
        if self.panel("power").display:
            self.kept("#power", PowerPanel).show(state)
        if self.panel("events").display:
            self.kept("#events", EventLog).show(state, app.sources[0].index, playback.t)
        source = app.sources[0]
        self.kept("#transport", TransportBar).show(playback, live=app.live, followable=app.followable,
                                                   events=source.index.event_times(), note=app.status_note)
