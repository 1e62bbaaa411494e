"""Text widgets that repaint only when what they show changed, and the dashboard's titled panels (jobs, links,
power, events, comparison): the same with a rounded border and the title on it."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static


class QuietStatic(Static):
    """A Static whose `show_if_changed` updates it only when `key` (what it says) differs from last time:
    repainting costs more than building the text, and most frames change nothing."""

    _shown = ""

    def show_if_changed(self, key: str, content: Any) -> bool:
        """Show `content` unless `key` is what is shown already; True when it repainted."""
        if key == self._shown:
            return False
        self._shown = key
        self.update(content)
        return True


class Panel(QuietStatic):
    """A QuietStatic in a rounded border titled `TITLE`."""

    TITLE = ""

    DEFAULT_CSS = """
    Panel {
        height: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        padding: 0 1;
    }
    """

    def on_mount(self) -> None:
        self.border_title = self.TITLE
