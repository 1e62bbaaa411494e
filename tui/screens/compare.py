"""Compare mode: two clusters side by side on one clock, and a table of their figures and difference."""

from __future__ import annotations

from clustertop.engine.config.errors import escape
from rich.markup import escape as markup_escape
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Header, Static

from ..playback import format_clock
from ..running import running_app
from ..sources import Source
from ..widgets.comparison import Comparison
from ..widgets.footer import Footer
from ..widgets.heatmap import Heatmap
from ..widgets.jobs import JobsPanel
from ..widgets.legend import Legend
from ..widgets.too_small import TooSmall
from ..widgets.transport import TransportBar
from .dashboard import DashboardScreen


def ended_note(source: Source, t: float) -> str | None:
    """'ended 00:01:00.0' when a finished stream ended before the clock: its last sample is not the
    present."""
    if source.done and t > source.end_t + 1e-6:
        return f"ended {format_clock(source.end_t)}"
    return None


class CompareScreen(DashboardScreen):
    """A and B, each with its heatmap and job figures; the difference below."""

    MIN_SIZE = (110, 34)

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
    }
    CompareScreen .map {
        height: 1fr;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
    }
    CompareScreen .map:focus-within {
        border: round $accent;
    }
    """

    def compose(self) -> ComposeResult:
        app = running_app(self)
        yield Header(show_clock=False)
        with Horizontal(id="sides"):
            for i, (source, state) in enumerate(zip(app.sources, app.states)):
                label = "AB"[i]
                with Vertical(classes="side", id=f"side-{label.lower()}"):
                    yield Static(markup_escape(f"{label}: {escape(source.name)}"), classes="side-title")
                    with Vertical(classes="map", id=f"map-{label.lower()}"):
                        yield Heatmap(state, id=f"heatmap-{label.lower()}")
                    yield Legend(id=f"legend-{label.lower()}")
                    yield JobsPanel(id=f"jobs-{label.lower()}")
        yield Comparison(id="comparison")
        yield TransportBar(id="transport")
        yield TooSmall()
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#heatmap-a", Heatmap).focus()
        self.update_frame()

    def update_frame(self) -> None:
        app = running_app(self)
        states = app.states
        playback = app.playback
        ended = [ended_note(source, playback.t) for source in app.sources]
        for i, state in enumerate(states):
            label = "ab"[i]
            self.show_map(self.query_one(f"#heatmap-{label}", Heatmap), self.query_one(f"#map-{label}"),
                          self.query_one(f"#legend-{label}", Legend), state)
            self.query_one(f"#jobs-{label}", JobsPanel).show(state, playback.t, ended=ended[i])
            title = f"{label.upper()}: {app.sources[i].name}" + (f" · {ended[i]}" if ended[i] else "")
            self.query_one(f"#side-{label} .side-title", Static).update(title)
        names = (app.sources[0].name, app.sources[1].name)
        self.query_one(Comparison).show(states[0], states[1], names, (ended[0], ended[1]))
        events = sorted(set(app.sources[0].index.event_times()) | set(app.sources[1].index.event_times()))
        self.query_one(TransportBar).show(playback, live=app.live, followable=app.followable,
                                          events=events, note=app.status_note)
