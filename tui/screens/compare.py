"""Compare mode: two clusters on one clock, each side with its map, jobs and links, and a table of their
figures and difference.

Wide, the two sides stand side by side over the table. Narrow or short (down to the main screen's 60 x 20),
one view at a time under tabs: side A, side B or the table (`a` `b` `d`, or tab to the other side's map);
each side shows its map beside one panel (`4` jobs, `5` links), as the main screen's folded side column does.
"""

from __future__ import annotations

from typing import ClassVar

from clustertop.engine.config.errors import escape
from rich.markup import escape as markup_escape
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Header

from .. import jobinfo
from ..display import DisplayState
from ..playback import format_clock
from ..running import running_app
from ..sources import Source
from ..widgets.comparison import Comparison
from ..widgets.footer import Footer
from ..widgets.heatmap import Heatmap
from ..widgets.jobs import JobsPanel
from ..widgets.legend import Legend
from ..widgets.links import LinksPanel
from ..widgets.panel import QuietStatic
from ..widgets.side_tabs import SideTabs
from ..widgets.too_small import TooSmall
from ..widgets.transport import TransportBar
from .dashboard import DashboardScreen
from .main import PANEL_TIP, side_width

VIEWS = ("A", "B", "A vs B")
VIEW_KEYS = ("a", "b", "d")
PANELS = ("jobs", "links")
PANEL_KEYS = ("4", "5")
VIEW_TIP = "compare: side A, side B or the table (narrow terminal: one at a time); tab: the other side"


def ended_note(source: Source, t: float) -> str | None:
    """'ended 00:01:00.0' when a finished stream ended before the clock: its last sample is not the
    present."""
    if source.done and t > source.end_t + 1e-6:
        return f"ended {format_clock(source.end_t)}"
    return None


def folded(width: int, height: int) -> bool:
    """Too narrow or short for two maps with their panels side by side: one view at a time."""
    return width < 160 or height < 40


def side_title(label: str, name: str, state: DisplayState, ended: str | None) -> str:
    """'A: mi300x-vs-h100 · 512 × mi300x · xGMI mesh 7 x 64 GB/s': what the side is, on what hardware."""
    up = jobinfo.scale_up_text(state)
    gpu = jobinfo.gpu_spec(state).get("name", "GPU")
    parts = [f"{label}: {escape(name)}", f"{state.gpus:,} × {escape(str(gpu))[:24]}", up, ended or ""]
    return " · ".join(p for p in parts if p)


class CompareScreen(DashboardScreen):
    """A and B, each with its heatmap, jobs and links; the difference below (folded: one at a time)."""

    MIN_SIZE = (60, 20)

    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, f"view('{name}')", f"Show {name}" if name != "A vs B" else "Show the table",
                  show=False, tooltip=VIEW_TIP, key_display="a b d" if key == "a" else None)
          for key, name in zip(VIEW_KEYS, VIEWS)),
        Binding("tab", "other_side", "Other side", show=False, tooltip=VIEW_TIP),
        *(Binding(key, f"panel('{name}')", f"{name.title()} panel", show=False, tooltip=PANEL_TIP)
          for key, name in zip(PANEL_KEYS, PANELS)),
    ]

    DEFAULT_CSS = """
    CompareScreen #sides {
        height: 1fr;
    }
    CompareScreen .side {
        width: 1fr;
    }
    CompareScreen .side-title {
        height: 1;
        padding: 0 1;
        background: $boost;
        text-style: bold;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    CompareScreen .side-map {
        width: 1fr;
    }
    CompareScreen .side-panels {
        width: 46;
    }
    CompareScreen .map {
        height: 1fr;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
    }
    CompareScreen .map:focus-within {
        border: round $accent;
    }
    CompareScreen.-folded .side-panels > Panel {
        height: 1fr;
    }
    CompareScreen.-folded.-table #sides {
        display: none;
    }
    CompareScreen.-folded.-table #comparison {
        height: 1fr;
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view = VIEWS[0]        # folded: the side (or the table) shown
        self.tab = PANELS[0]        # folded: the panel beside each map

    def compose(self) -> ComposeResult:
        app = running_app(self)
        yield Header(show_clock=False)
        yield SideTabs(VIEWS, VIEW_KEYS, id="views")
        with Horizontal(id="sides"):
            for i, (source, state) in enumerate(zip(app.sources, app.states)):
                label = "AB"[i]
                side = label.lower()
                with Vertical(classes="side", id=f"side-{side}"):
                    yield QuietStatic(markup_escape(f"{label}: {escape(source.name)}"), classes="side-title")
                    with Horizontal(classes="side-body"):
                        with Vertical(classes="side-map"):
                            with Vertical(classes="map", id=f"map-{side}"):
                                yield Heatmap(state, id=f"heatmap-{side}")
                            yield Legend(id=f"legend-{side}")
                        with Vertical(classes="side-panels", id=f"panels-{side}"):
                            yield SideTabs(PANELS, PANEL_KEYS, id=f"tabs-{side}")
                            yield JobsPanel(id=f"jobs-{side}")
                            links = LinksPanel(id=f"links-{side}")
                            links.switch_links = True    # both halves of a mesh / switch story
                            yield links
        yield Comparison(id="comparison")
        yield TransportBar(id="transport")
        yield TooSmall()
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#heatmap-a", Heatmap).focus()
        self.arrange_views()
        self.update_frame()

    # -- the layout -----------------------------------------------------------------------------------------

    def check_size(self) -> None:
        super().check_size()
        if self.is_mounted:
            self.arrange_views()

    def arrange_views(self) -> None:
        """Side by side when wide; else the chosen view (a side or the table) and, beside each map, one
        panel."""
        width, height = self.app.size
        fold = folded(width, height)
        self.set_class(fold, "-folded")
        self.set_class(fold and self.view == "A vs B", "-table")
        views = self.query_one("#views", SideTabs)
        views.display = fold
        views.show(self.view)
        for side in "ab":
            self.query_one(f"#side-{side}").display = not fold or self.view == f"{side.upper()}"
            self.query_one(f"#panels-{side}").styles.width = side_width(width) if fold else 46
            tabs = self.query_one(f"#tabs-{side}", SideTabs)
            tabs.display = fold
            tabs.show(self.tab)
            for name in PANELS:
                self.query_one(f"#{name}-{side}").display = not fold or name == self.tab
        self.query_one(Comparison).display = not fold or self.view == "A vs B"

    def action_view(self, name: str) -> None:
        self.view = name
        if name != "A vs B":
            self.query_one(f"#heatmap-{name.lower()}", Heatmap).focus()
        self.arrange_views()
        self.update_frame()

    def action_panel(self, name: str) -> None:
        self.tab = name
        self.arrange_views()
        self.update_frame()

    def on_side_tabs_chosen(self, message: SideTabs.Chosen) -> None:
        if message.name in VIEWS:
            self.action_view(message.name)
        else:
            self.action_panel(message.name)

    def action_other_side(self) -> None:
        """Tab: the other side's map (folded: that side shows; from the table, side A)."""
        if self.has_class("-folded"):
            self.action_view("B" if self.view == "A" else "A")
        else:
            focused = self.focused
            self.action_view("B" if focused is None or focused.id != "heatmap-b" else "A")

    # -- drawing --------------------------------------------------------------------------------------------

    def update_frame(self) -> None:
        app = running_app(self)
        states = app.states
        playback = app.playback
        ended = [ended_note(source, playback.t) for source in app.sources]
        for i, state in enumerate(states):
            label = "ab"[i]
            title = side_title(label.upper(), app.sources[i].name, state, ended[i])
            heading = self.kept(f"#side-{label} .side-title", QuietStatic)
            heading.show_if_changed(title, markup_escape(title))
            if not self.kept(f"#side-{label}", Widget).display:
                continue
            self.show_map(self.kept(f"#heatmap-{label}", Heatmap), self.kept(f"#map-{label}", Widget),
                          self.kept(f"#legend-{label}", Legend), state)
            jobs = self.kept(f"#jobs-{label}", JobsPanel)
            if jobs.display:
                jobs.show(state, playback.t, ended=ended[i])
            links = self.kept(f"#links-{label}", LinksPanel)
            if links.display:
                links.show(state)
        comparison = self.kept("Comparison", Comparison)
        if comparison.display:
            names = (app.sources[0].name, app.sources[1].name)
            comparison.show(states[0], states[1], names, (ended[0], ended[1]))
        events_t = sorted(set(app.sources[0].index.event_times()) | set(app.sources[1].index.event_times()))
        self.kept("TransportBar", TransportBar).show(playback, live=app.live, followable=app.followable,
                                                     events=events_t, note=app.status_note)
