"""Textual's line filters, remembered per segment for widgets whose segments repeat (the heatmap).

Textual passes every line a widget repaints through the app's line filters (ANSI colours to truecolor, and
monochrome, no-colour or dim when asked), each building a new segment for every segment of the line. The
heatmap's lines are runs of cached segments that come back frame after frame, so what a filter made of a
segment is kept: a repainted line then costs a lookup per run, and a line whose runs the filter leaves as they
are (truecolor runs through the ANSI-to-truecolor filter) is shown as it is. Only Textual's own filters are
remembered: each maps a segment on its own (its text, style and the background), so a line's filtered
segments are those of its segments; any other filter runs as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from textual.color import Color
from textual.filter import ANSIToTruecolor, DimFilter, LineFilter, Monochrome, NoColor

PER_SEGMENT = (ANSIToTruecolor, DimFilter, Monochrome, NoColor)
LIMIT = 1 << 16          # segments remembered per filter and background before starting over


class Remembered(LineFilter):
    """`inner` (a per-segment filter), remembering its result for each segment and background. A segment is
    looked up by its identity (a lookup by value would hash its style, a Python call per segment): the runs
    are the same objects frame after frame, and those seen are kept, so that no other segment takes their
    id."""

    def __init__(self, inner: LineFilter) -> None:
        super().__init__(enabled=inner.enabled)
        self.inner = inner
        self._seen: dict[Color, dict[int, Segment]] = {}
        self._kept: dict[Color, list[Segment]] = {}
        self._same: dict[Color, set[int]] = {}        # the segments the filter leaves as they are

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        seen = self._seen.get(background)
        if seen is None or len(seen) > LIMIT:
            seen = self._seen[background] = {}
            self._kept[background] = []
            self._same[background] = set()
        ids = list(map(id, segments))
        try:
            return list(map(seen.__getitem__, ids))
        except KeyError:                      # segments not seen yet: filter those
            new = list({id(segment): segment for segment in segments if id(segment) not in seen}.values())
            made = self.inner.apply(new, background)
            seen.update(zip(map(id, new), made))
            self._same[background].update(id(old) for old, out in zip(new, made) if out == old)
            self._kept[background].extend(new)
            return list(map(seen.__getitem__, ids))

    def keeps(self, segments: list[Segment], background: Color) -> bool:
        """Whether the filter leaves each of `segments` as it is (ANSI colours to truecolor, over runs
        coloured in truecolor): the line needs no filtered copy."""
        same = self._same.get(background)
        if same is not None and same.issuperset(map(id, segments)):
            return True
        seen = self._seen.get(background)
        if seen is not None and seen.keys() >= set(map(id, segments)):     # seen, and some changed
            return False
        self.apply(segments, background)                # filter the segments not seen yet, once
        return self._same[background].issuperset(map(id, segments))


class FilterMemo:
    """The remembered form of each of the app's filters (the same object every time, so that Textual's
    per-strip cache of filtered lines keeps working)."""

    def __init__(self) -> None:
        self._wrapped: dict[LineFilter, LineFilter] = {}

    def __call__(self, filters: Sequence[LineFilter]) -> list[LineFilter]:
        out = []
        for line_filter in filters:
            wrapped = self._wrapped.get(line_filter)
            if wrapped is None:
                wrapped = self._wrapped[line_filter] = (Remembered(line_filter)
                                                        if type(line_filter) in PER_SEGMENT else line_filter)
            out.append(wrapped)
        return out
