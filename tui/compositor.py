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
        for widget, (region, clip) in self.visible_widgets.items():      # front to back
            shown = region.intersection(clip)
            over = [part for part in map(shown.intersection, changed) if part]
            if not over:
                continue
            top, bottom = over[0].y, over[0].bottom
            for part in over:
                top, bottom = min(top, part.y), max(bottom, part.bottom)
            x, width = shown.x, shown.width
            yield region, Region(x, top, width, bottom - top), widget.render_lines(
                Region(x - region.x, top - region.y, width, bottom - top))
            # what this widget covers whole, the widgets behind it do not show
            changed = [part for part in changed if not shown.contains_region(part)]
            if not changed:
                return
