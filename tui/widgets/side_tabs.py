"""The tab strip of the side column when it is folded (a narrow or short terminal): one panel at a time."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.message import Message

from .panel import QuietStatic


class SideTabs(QuietStatic):
    """'4 jobs  5 links  6 power  7 events' with the shown panel highlighted; a click shows another."""

    DEFAULT_CSS = """
    SideTabs {
        height: 1;
        padding: 0 1;
        background: $boost;
    }
    """

    class Chosen(Message):
        """The user clicked a tab."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, names: tuple[str, ...], keys: tuple[str, ...], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.names = names
        self.keys = keys
        self._spans: list[tuple[int, int, str]] = []

    def show(self, current: str) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        self._spans = []
        for key, name in zip(self.keys, self.names):
            start = text.cell_len
            text.append(f"{key} ", style="dim")
            text.append(name, style="bold reverse" if name == current else "")
            self._spans.append((start, text.cell_len, name))
            text.append("  ")
        self.show_if_changed(f"{current}", text)

    def on_click(self, event: events.Click) -> None:
        x = event.x - 1       # the padding
        for start, end, name in self._spans:
            if start <= x < end:
                self.post_message(self.Chosen(name))
