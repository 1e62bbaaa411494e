"""A compositor whose partial update draws only the lines of the widgets that overlap what changed.

Textual's compositor, asked for a partial update, renders every line of every widget that overlaps the
bounding box of the changed regions, and then keeps the lines that changed: when the heatmap's rows and the
transport bar at the bottom both change, the box is the whole screen, and every panel, container and the
screen itself is drawn again, line by line, to be thrown away. Here, front to back as Textual goes, a
widget draws only the lines between the first and the last it shows of a changed region, and a changed
region that a widget covers whole is no longer looked for behind it (the front widget's cells win there):
a new sample draws the widgets that changed, and those in front of them, no more. What the update shows is
the same, as it only ever shows the changed regions. Full updates and screenshots are Textual's own.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class ChangedCompositor(Compositor):
    """Renders, for a partial update, only the widgets' lines that show a changed region."""

    _changed: list[Region] | None = None      # the changed regions of the partial update being drawn

    def render_partial_update(self) -> ChopsUpdate | None:
        self._changed = list(self._dirty_regions)
        try:
            return super().render_partial_update()
        finally:
            self._changed = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        changed = self._changed
        if changed is None:
            yield from super()._get_renders(crop)
            return
        # the changed regions as (left, top, right, bottom): an overlap is four comparisons, not a Region made
        # and tested for each widget and region
        edges = [(x, y, x + width, y + height) for x, y, width, height in changed if width and height]
        for widget, (region, clip) in self.visible_widgets.items():      # front to back
            x, y, width, height = region.intersection(clip)
            if not width or not height:
                continue
            right, low = x + width, y + height
            over = [e for e in edges if e[0] < right and x < e[2] and e[1] < low and y < e[3]]
            if not over:
                continue
            top, bottom = max(y, min(e[1] for e in over)), min(low, max(e[3] for e in over))
            yield region, Region(x, top, width, bottom - top), widget.render_lines(
                Region(x - region.x, top - region.y, width, bottom - top))
            # what this widget covers whole, the widgets behind it do not show
            edges = [e for e in edges if not (x <= e[0] and e[2] <= right and y <= e[1] and e[3] <= low)]
            if not edges:
                return
