"""Shown instead of the dashboard when the terminal is too small for it: never a broken layout."""

from __future__ import annotations

from textual.widgets import Static


class TooSmall(Static):
    """'enlarge to W x H' in the middle of the screen."""

    DEFAULT_CSS = """
    TooSmall {
        display: none;
        width: 1fr;
        height: 1fr;
        content-align: center middle;
        text-align: center;
        color: $warning;
    }
    """

    def show(self, need: tuple[int, int], have: tuple[int, int]) -> None:
        self.update(f"enlarge to {need[0]} x {need[1]}\n(now {have[0]} x {have[1]})")
