"""The footer: the keys of what has the focus, with help (`?`) and quit (`q`) first, so that however narrow
the terminal they are never the ones cut off; a key that does not fit whole before the palette's key is left
out rather than shown cut (`←→` without `Seek`)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

FIRST = ("help", "quit")       # actions whose keys lead the footer


class Footer(TextualFooter):
    """Textual's footer, `?` and `q` first."""

    def compose(self) -> ComposeResult:
        items = list(super().compose())
        rank = {action: i for i, action in enumerate(FIRST)}
        first = sorted((w for w in items if isinstance(w, FooterKey) and w.action in rank),
                       key=lambda w: rank[w.action])
        yield from first
        yield from (w for w in items if w not in first)
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        for key in self.query_children(FooterKey):
            key.display = True            # measured again at the new width
        self.call_after_refresh(self._fit)

    def _fit(self, tries: int = 5) -> None:
        """Hide the keys whose text ends past the palette's key (or the right edge), from the first such one
        on: none shows cut."""
        keys = list(self.query_children(FooterKey))
        if not self.region.width:
            return
        if any(k.display and not k.region.width for k in keys):
            if tries:                     # not laid out yet
                self.call_after_refresh(self._fit, tries - 1)
            return
        palette = [k for k in keys if k.has_class("-command-palette")]
        edge = palette[0].region.x if palette and palette[0].display else self.region.right
        over = False
        for key in keys:
            if key in palette or not key.display:
                continue
            over = over or key.region.right - 1 > edge          # its last cell is padding: it may go under
            if over:
                key.display = False
