"""What every dashboard screen shares: the frame update hook, drawing a heatmap with its frame title and
legend, the metric keys, seeking from the transport bar and the too-small guard."""

from __future__ import annotations

from typing import ClassVar, TypeVar, cast

from clustertop.engine.stream.state import ClusterState
from textual import events
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widget import Widget

from ..compositor import ChangedCompositor
from ..palette import METRIC_TITLES, METRICS
from ..running import running_app
from ..widgets.heatmap import Heatmap
from ..widgets.legend import Legend
from ..widgets.too_small import TooSmall
from ..widgets.transport import TransportBar

METRIC_TIP = "colour by utilization, power or phase"
W = TypeVar("W", bound=Widget)


class DashboardScreen(Screen[None]):
    """A screen that draws the app's states; below MIN_SIZE it shows only 'enlarge to W x H'."""

    MIN_SIZE = (100, 30)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "cycle_metric", "Metric", tooltip="colour by utilization, power or phase"),
        Binding("1", "metric('util')", "Colour by utilization", show=False, key_display="1 2 3",
                tooltip="colour by utilization, power or phase"),
        Binding("2", "metric('power')", "Colour by power", show=False, tooltip=METRIC_TIP),
        Binding("3", "metric('phase')", "Colour by phase", show=False, tooltip=METRIC_TIP),
    ]

    DEFAULT_CSS = """
    DashboardScreen.-too-small > * {
        display: none;
    }
    DashboardScreen.-too-small > TooSmall {
        display: block;
    }
    """

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = ChangedCompositor()     # a frame draws only the lines that changed
        self._kept: dict[tuple[str, type[Widget]], Widget] = {}

    def kept(self, selector: str, kind: type[W]) -> W:
        """The one widget matching `selector` (of `kind`), looked up once: a screen keeps the widgets it
        composed, and a frame draws a dozen of them (a query walks the screen's widgets each time)."""
        key = (selector, kind)
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = self.query_one(selector, kind)
        return cast(W, found)

    def update_frame(self) -> None:
        """Redraw from the app's current states (called once per frame when something changed)."""

    def show_map(self, heatmap: Heatmap, frame: Widget, legend: Legend, state: ClusterState) -> None:
        """Draw `state` on a heatmap, title its frame with what it shows and fill its legend."""
        heatmap.show(state)
        gpu0, gpu1 = heatmap.view.span(heatmap.hierarchy)
        title = (f"{heatmap.view.title(heatmap.hierarchy)} · {gpu1 - gpu0:,} GPUs · "
                 f"{METRIC_TITLES[heatmap.metric]}")
        if heatmap.highlight:
            title += f" · job {heatmap.highlight}"
        if frame.border_title != title:   # setting it repaints the frame: only when it changes
            frame.border_title = title
        legend.show(state, heatmap.metric, gpu0, gpu1, heatmap.layout_info.g)

    def on_heatmap_view_changed(self, message: Heatmap.ViewChanged) -> None:
        self.update_frame()

    def on_transport_bar_seek(self, message: TransportBar.Seek) -> None:
        running_app(self).seek_fraction(message.fraction)

    @property
    def heatmaps(self) -> list[Heatmap]:
        return list(self.query(Heatmap))

    def action_cycle_metric(self) -> None:
        maps = self.heatmaps
        if maps:
            current = maps[0].metric
            metric = METRICS[(METRICS.index(current) + 1) % len(METRICS)]
            self.action_metric(metric)

    def action_metric(self, metric: str) -> None:
        for heatmap in self.heatmaps:
            heatmap.metric = metric
        self.update_frame()

    def on_resize(self, event: events.Resize) -> None:
        self.check_size()
        self.call_after_refresh(self._after_resize)

    def _after_resize(self) -> None:
        """The heatmap's layout (GPUs per pixel, the cursor's span) changed with the size: the legend, the
        inspector and the titles follow even while paused."""
        if self.has_class("-too-small"):
            return
        self.update_frame()
        for heatmap in self.heatmaps:
            heatmap.announce_cursor()

    def on_mount(self) -> None:
        for heatmap in self.heatmaps:
            heatmap.metric = getattr(self.app, "initial_metric", heatmap.metric)
        self.check_size()

    def check_size(self) -> None:
        width, height = self.app.size
        small = width < self.MIN_SIZE[0] or height < self.MIN_SIZE[1]
        was_small = self.has_class("-too-small")
        self.set_class(small, "-too-small")
        for widget in self.query(TooSmall):
            widget.show(self.MIN_SIZE, (width, height))
        maps = self.heatmaps
        if was_small and not small and maps and self.focused is None:
            maps[0].focus()          # hidden, the heatmap lost the focus: the cursor keys work again at once
