"""The search line (`/`), as in k9s and lazygit: a GPU index, a node, rack, pod or building number, a host or
a job; enter searches (tui/search.py), escape closes."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

PLACEHOLDER = "/ GPU 1000 · node 125 · rack 13 · pod 3 · host or job name   (enter: go · esc: close)"


class SearchBar(Input):
    """One line under the map; hidden until `/`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close search", show=False, tooltip="close the search line"),
    ]

    DEFAULT_CSS = """
    SearchBar {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
    }
    SearchBar.-open {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder=PLACEHOLDER, id=id)

    def open(self) -> None:
        self.value = ""
        self.add_class("-open")
        self.focus()

    def action_close(self) -> None:
        self.remove_class("-open")
        self.screen.focus_next()
