"""The main dashboard: the heatmap with its legend and cursor, job, link and power panels, the event log and the
transport bar."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header

from ..widgets.event_log import EventLog
from ..widgets.heatmap import Heatmap
from ..widgets.inspector import Inspector
from ..widgets.jobs import JobsPanel
from ..widgets.legend import Legend
from ..widgets.links import LinksPanel
from ..widgets.power import PowerPanel
from ..widgets.too_small import TooSmall
from ..widgets.transport import TransportBar
from .dashboard import DashboardScreen


class MainScreen(DashboardScreen):
    """One cluster: everything on one screen."""

    DEFAULT_CSS = """
    MainScreen #body {
        height: 1fr;
    }
    MainScreen #left {
        width: 1fr;
    }
    MainScreen #right {
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
    """

    def compose(self) -> ComposeResult:
        state = self.app.states[0]   # type: ignore[attr-defined]
        yield Header(show_clock=False)
        with Horizontal(id="body"):
            with Vertical(id="left"):
                with Vertical(id="map"):
                    yield Heatmap(state, id="heatmap")
                yield Legend(id="legend")
                yield Inspector(id="inspector")
            with Vertical(id="right"):
                yield JobsPanel(id="jobs")
                yield LinksPanel(id="links")
                yield PowerPanel(id="power")
                yield EventLog(id="events")
        yield TransportBar(id="transport")
        yield TooSmall()
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#map").border_subtitle = "enter zoom in · backspace out · hjkl move · m metric"
        self.query_one(Heatmap).focus()
        self.update_frame()

    def on_heatmap_cursor_moved(self, message: Heatmap.CursorMoved) -> None:
        self.query_one(Inspector).show(self.app.states[0], message.gpu0, message.gpu1)   # type: ignore[attr-defined]

    def update_frame(self) -> None:
        app = self.app
        state = app.states[0]   # type: ignore[attr-defined]
        playback = app.playback   # type: ignore[attr-defined]
        heatmap = self.query_one(Heatmap)
        frame = self.query_one("#map")
        self.show_map(heatmap, frame, self.query_one(Legend), state)
        c0, c1 = heatmap.cursor_span
        self.query_one(Inspector).show(state, c0, c1)
        self.query_one(JobsPanel).show(state, playback.t)
        self.query_one(LinksPanel).show(state)
        self.query_one(PowerPanel).show(state)
        self.query_one(EventLog).show(state)
        source = app.sources[0]   # type: ignore[attr-defined]
        self.query_one(TransportBar).show(playback, live=app.live, events=source.index.event_times(),
                                          note=app.status_note)   # type: ignore[attr-defined]
