"""Where the dashboard's events come from: a recording file, a pipe (stdin), or a live engine child process.

Every source fills an EventIndex (tui/index.py) and the app reads states from it: `state_at(t)` to seek
and `advance(state, cursor, t)` to play. Live and replay differ only in who fills the index and whether
commands (speed, pause, inject a fault) can be sent back.
"""

from __future__ import annotations

from typing import Any

from ..display import DisplayState
from ..index import EventIndex


class Source:
    """An event stream behind an index. Subclasses start readers and accept commands."""

    live = False          # a running engine: the end of the stream moves
    controllable = False  # commands reach the engine
    kind = "replay"       # what the title bar calls it: replay, live (an engine), watch (a real cluster)

    def __init__(self, name: str, index: EventIndex) -> None:
        self.name = name
        self.index = index

    @property
    def header(self) -> dict[str, Any]:
        return self.index.header

    @property
    def start_t(self) -> float:
        return self.index.start_t

    @property
    def end_t(self) -> float:
        """Latest simulated time available (moves while a pipe or engine is still writing)."""
        return self.index.end_t

    @property
    def done(self) -> bool:
        return self.index.done

    def start(self) -> None:
        """Begin reading in the background (no-op for a file read up front)."""

    def close(self) -> None:
        """Stop reading and release the process or stream."""

    def send(self, command: dict[str, Any]) -> bool:
        """Send a control command; False when this source cannot take commands."""
        return False

    def state_at(self, t: float) -> DisplayState:
        return self.index.state_at(t)

    def cursor_at(self, t: float) -> int:
        return self.index.cursor_at(t)

    def advance(self, state: DisplayState, cursor: int, t1: float) -> tuple[DisplayState, int]:
        return self.index.advance(state, cursor, t1)


__all__ = ["Source"]
