"""The footer: the keys of what has the focus, with help (`?`) and quit (`q`) first, so that however narrow
the terminal they are never the ones cut off."""

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
