"""Text widgets that repaint only what changed, and the dashboard's titled panels (jobs, links, power, events,
comparison): the same with a rounded border and the title on it."""

from __future__ import annotations

import bisect
from typing import Any

from rich.text import Span, Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, VisualType, visualize
from textual.widget import Widget
from textual.widgets import Static

LineKey = tuple[str, tuple[tuple[int, int, Any], ...]]     # a line's words, and the styles over them


def line_keys(text: Text) -> list[LineKey]:
    """What each line of `text` draws: its words and the styles over them (a span over several lines counts
    in each, over its part of it)."""
    plain = text.plain
    lines = plain.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    spans: list[list[tuple[int, int, Any]]] = [[] for _ in lines]
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
    wrap (`text-wrap: nowrap`) and their number and width stay, only the lines that changed are drawn again
    and repainted (a line is drawn from its own text alone: the others keep their strips), and the screen is
    not laid out again; a text that wraps is repainted whole, and the screen laid out again only when its
    height changes."""

    _shown = ""
    _lines: tuple[object, list[LineKey]] | None = None   # how and which lines were last shown (not wrapped)
    _text: Text | None = None                         # ...and their text
    _only: tuple[Region, ...] | None = None           # what `update` repaints (None: all of it)
    _strips: list[Strip] | None = None                # the lines drawn (not wrapped), None: none yet...
    _strips_key: tuple[Size, object] | None = None    # ...at this size and style
    _stale: frozenset[int] = frozenset()              # ...of which these changed since

    def __init__(self, content: VisualType = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        # no links to highlight in what it says (Textual would restyle every line drawn, unpickling the
        # place of every word on it, to find none)
        self.set_reactive(Widget.auto_links, False)
        self._content = content
        self._visual: Visual | None = None

    # What Textual draws of the content (a Visual) is made when it is drawn whole, not on every update:
    # changed lines drawn one by one need only theirs.

    @property
    def content(self) -> VisualType:
        return self._content

    @content.setter
    def content(self, content: VisualType) -> None:
        self.update(content)

    @property
    def visual(self) -> Visual:
        if self._visual is None:
            self._visual = visualize(self, self._content, markup=self._render_markup)
        return self._visual

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        self._content, self._visual = content, None
        self.refresh(layout=layout)

    def show_if_changed(self, key: str, content: Any) -> bool:
        """Show `content` unless `key` is what is shown already; True when it repainted."""
        if key == self._shown:
            return False
        self._shown = key
        rows = self._changed_rows(content)
        if rows is None:
            visual = self._same_height(content)
            if visual is None:
                self.update(content)
            else:                                      # its height stays: the screen keeps its layout
                self.update(content, layout=False)
                self._visual = visual
            return True
        self._only = tuple(Region(0, y, self.size.width, 1) for y in rows)
        try:
            self.update(content, layout=False)     # its height stays: the screen keeps its layout
        finally:
            self._only = None
        self._stale |= frozenset(rows)
        return True

    def _same_height(self, content: Any) -> Visual | None:
        """What Textual draws of `content` when it takes as many lines as the widget has now (and the widget's
        width does not follow its content), else None."""
        width = self.styles.width
        if not self.is_mounted or not self.size or (width is not None and width.is_auto):
            return None
        visual = visualize(self, content, markup=self._render_markup)
        # the widget's styles, as Textual's Widget passes them (its stubs ask for the RulesMap they read)
        height = visual.get_height(self.styles, self.size.width)  # type: ignore[arg-type]
        return visual if height == self.size.height else None

    def _changed_rows(self, content: Any) -> list[int] | None:
        """The lines of `content` that differ from those shown, or None when it must be drawn whole."""
        before, self._lines, self._text = self._lines, None, None
        if (not isinstance(content, Text) or self.styles.text_wrap != "nowrap" or not self.is_mounted
                or self.styles.content_align != ("left", "top")):
            return None
        lines = line_keys(content)
        self._lines = ((self.size.width, str(content.style), content.justify, content.overflow), lines)
        self._text = content
        if before is None or before[0] != self._lines[0] or len(before[1]) != len(lines):
            return None
        return [y for y, (old, new) in enumerate(zip(before[1], lines)) if old != new]

    def refresh(self, *regions: Region, **kwargs: Any) -> QuietStatic:
        if self._only is None:         # anything but new lines (a new size, style or text): all drawn again
            self._strips = None
        elif not regions:              # `update` repaints the lines that changed, no more
            if not self._only:
                return self
            regions = self._only
        super().refresh(*regions, **kwargs)
        return self

    def render_line(self, y: int) -> Strip:
        strips = self._line_strips()
        if strips is None:
            return super().render_line(y)
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _line_strips(self) -> list[Strip] | None:
        """Every line drawn (those that changed drawn again), or None when its lines are not known apart
        (wrapped, or not a Text): Textual draws it whole."""
        if self._lines is None or self._text is None:
            return None
        width, height = self.size
        key = (self.size, self.visual_style)
        if self._strips is None or self._strips_key != key:
            self._strips = Visual.to_strips(self, self.visual, width, height, self.visual_style)
            self._strips_key, self._stale = key, frozenset()
        elif self._stale:
            stale, self._stale = sorted(self._stale), frozenset()
            drawn = Visual.to_strips(self, visualize(self, self._only_lines(stale)),
                                     width, height, self.visual_style)
            for y in stale:
                if y < len(drawn) and y < len(self._strips):
                    self._strips[y] = drawn[y]
        return self._strips

    def _only_lines(self, rows: list[int]) -> Text:
        """The text shown with every line but `rows` left empty: drawn, those lines are what the whole text
        draws (each where it is: a line's place is in what it draws)."""
        assert self._lines is not None and self._text is not None
        lines = self._lines[1][:rows[-1] + 1]
        wanted = set(rows)
        plain: list[str] = []
        spans: list[Span] = []
        start = 0
        for y, (line, line_spans) in enumerate(lines):
            if y in wanted:
                plain.append(line)
                spans.extend(Span(start + a, start + b, style) for a, b, style in line_spans)
                start += len(line)
            else:
                plain.append("")
            start += 1
        text = self._text
        return Text("\n".join(plain), style=text.style, justify=text.justify, overflow=text.overflow,
                    no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size, spans=spans)


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
