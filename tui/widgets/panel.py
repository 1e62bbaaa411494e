"""Text widgets that repaint only what changed, and the dashboard's titled panels (jobs, links, power, events,
comparison): the same with a rounded border and the title on it."""

from __future__ import annotations

import bisect
from typing import Any

from rich.text import Text
from textual.geometry import Region
from textual.widgets import Static


def line_keys(text: Text) -> list[object]:
    """What each line of `text` draws: its words and the styles over them (a span over several lines counts
    in each, over its part of it)."""
    plain = text.plain
    lines = plain.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    spans: list[list[tuple[int, int, object]]] = [[] for _ in lines]
    for span in text.spans:
        first = bisect.bisect_right(starts, span.start) - 1
        last = bisect.bisect_right(starts, span.end - 1) - 1
        for y in range(max(first, 0), max(last, first, 0) + 1):
            start, end = max(span.start - starts[y], 0), min(span.end - starts[y], len(lines[y]))
            if start < end:
                spans[y].append((start, end, span.style))
    return [(line, tuple(kept)) for line, kept in zip(lines, spans)]


class QuietStatic(Static):
    """A Static whose `show_if_changed` updates it only when `key` (what it says) differs from last time:
    repainting costs more than building the text, and most frames change nothing. When its lines do not
    wrap (`text-wrap: nowrap`) and their number and width stay, only the lines that changed are repainted
    (a line is drawn from its own text alone), and the screen is not laid out again."""

    _shown = ""
    _lines: tuple[object, list[object]] | None = None   # how and which lines were last shown (not wrapped)
    _only: tuple[Region, ...] | None = None           # what `update` repaints (None: all of it)

    def show_if_changed(self, key: str, content: Any) -> bool:
        """Show `content` unless `key` is what is shown already; True when it repainted."""
        if key == self._shown:
            return False
        self._shown = key
        rows = self._changed_rows(content)
        if rows is None:
            self.update(content)
            return True
        self._only = tuple(Region(0, y, self.size.width, 1) for y in rows)
        try:
            self.update(content, layout=False)     # its height stays: the screen keeps its layout
        finally:
            self._only = None
        return True

    def _changed_rows(self, content: Any) -> list[int] | None:
        """The lines of `content` that differ from those shown, or None when it must be drawn whole."""
        before, self._lines = self._lines, None
        if not isinstance(content, Text) or self.styles.text_wrap != "nowrap" or not self.is_mounted:
            return None
        lines = line_keys(content)
        self._lines = ((self.size.width, str(content.style), content.justify, content.overflow), lines)
        if before is None or before[0] != self._lines[0] or len(before[1]) != len(lines):
            return None
        return [y for y, (old, new) in enumerate(zip(before[1], lines)) if old != new]

    def refresh(self, *regions: Region, **kwargs: Any) -> QuietStatic:
        if self._only is not None and not regions:   # `update` repaints the lines that changed, no more
            if not self._only:
                return self
            regions = self._only
        super().refresh(*regions, **kwargs)
        return self


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
