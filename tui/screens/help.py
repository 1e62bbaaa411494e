"""The help screen: every key (from the bindings: tui/keys.py), what the colours mean, what a cell holds."""

from __future__ import annotations

from typing import ClassVar

from clustertop.engine.config.phases import PHASE_LABELS
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..keys import dashboard_rows
from ..palette import MARK_COLORS, NETWORK_COLOR, NETWORK_LABEL, PHASE_COLORS


def help_text() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold")
    table.add_column(ratio=1)
    for section, rows in dashboard_rows():
        table.add_row(Text(section, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
        table.add_row("", "")
    table.add_row(Text("Phases", style="bold underline"), "")
    for name, label in PHASE_LABELS.items():
        swatch = Text("██ ", style=PHASE_COLORS[name])
        swatch.append(label)
        table.add_row("", swatch)
        if name == "ep":        # the map draws the waits as one: where a slow tier stalls GPUs
            swatch = Text("██ ", style=NETWORK_COLOR)
            swatch.append(f"{NETWORK_LABEL}: on the map, the waits above together (the legend gives "
                          "each wait's share)")
            table.add_row("", swatch)
    table.add_row("", "")
    table.add_row(Text("Marks", style="bold underline"), "")
    for name, what in (("failed", "a failed GPU, in every metric: it wins over the mean of its cell"),
                       ("degraded", "a degraded GPU (a straggler, slower than its peers)"),
                       ("unallocated", "GPUs no job uses")):
        swatch = Text("██ ", style=MARK_COLORS[name])
        swatch.append(f"{name}: {what}")
        table.add_row("", swatch)
    table.add_row("", "")
    table.add_row(Text("Cells", style="bold underline"), "")
    table.add_row("", "Each character cell holds two GPUs (or groups of GPUs), one above the other (▀). "
                      "Where many GPUs share a pixel it shows their mean utilization or power; a failed GPU "
                      "always shows. The phase view draws each phase on the share of the cells that it takes "
                      "of the GPUs' time over the sample interval (GPUs that wait on the network a fifth of "
                      "the time show that colour on a fifth of their cells, scattered); GPUs drawn big "
                      "enough to carry a label show their phase of most time, which the label names. Columns "
                      "are racks when they fit; titles name the pods and buildings.")
    return table


class HelpScreen(ModalScreen[None]):
    """Keys and colours."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss_help", "Close")]

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 104;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $text-accent;
        background: $surface;
        padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "clustertop · help"
            scroll.border_subtitle = "escape to close"
            yield Static(help_text())

    def action_dismiss_help(self) -> None:
        self.dismiss()
