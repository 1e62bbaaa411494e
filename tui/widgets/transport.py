"""The transport bar: play state, simulated time, speed, a timeline with event ticks (click to seek)."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual import events
from textual.message import Message

from ..playback import Playback, format_clock, format_speed
from .panel import QuietStatic


class TransportBar(QuietStatic):
    """Always shows the simulated time and the speed."""

    DEFAULT_CSS = """
    TransportBar {
        height: 2;
        padding: 0 1;
        background: $panel;
        text-wrap: nowrap;
    }
    """

    class Seek(Message):
        """The user clicked the timeline: seek to `fraction` (0..1) of the available time."""

        def __init__(self, fraction: float) -> None:
            super().__init__()
            self.fraction = fraction

    def on_mount(self) -> None:
        self._bar_x = 0
        self._bar_w = 1

    def show(self, playback: Playback, *, live: bool, events: list[float], note: str = "",
             followable: bool = True) -> None:
        """`live`: a source is still being written; `followable`: it has a live edge to follow (an engine, a
        real cluster; not a pipe replayed)."""
        width = max(20, self.size.width) if self.size.width else 100
        if playback.at_end and not live and playback.t > playback.start:
            state, style = "■ END", "bold"
        elif playback.paused:
            state, style = "❚❚ PAUSED", "bold yellow"
        elif playback.follow and live and followable:
            state, style = "● LIVE", "bold red"
        else:
            state, style = "▶ PLAYING", "bold green"
        text = Text(no_wrap=True)
        text.append(f"{state:<10}", style=style)
        text.append(" t ", style="dim")
        text.append(format_clock(playback.t), style="bold")
        text.append(" / " + format_clock(playback.limit), style="dim")
        text.append("   speed ", style="dim")
        text.append(format_speed(playback.speed), style="bold")
        if live and followable and not playback.follow:
            text.append("   f: back to live", style="dim")
        if note:
            text.append(f"   {note}", style="dim")
        text.append("\n")
        span = max(playback.limit - playback.start, 1e-9)
        bar = ["─"] * width
        if events:          # a column per event time (numpy: a long recording has tens of thousands)
            xs = ((np.asarray(events, dtype=np.float64) - playback.start) / span
                  * (width - 1)).astype(np.int64)
            for x in np.unique(xs[(xs >= 0) & (xs < width)]).tolist():
                bar[x] = "┃"
        pos = (int((playback.t - playback.start) / span * (width - 1)) if playback.limit > playback.start
               else 0)
        pos = min(max(pos, 0), width - 1)
        text.append("".join(bar[:pos]), style="green")
        text.append("●", style="bold")
        text.append("".join(bar[pos + 1:]), style="dim")
        self._bar_x, self._bar_w = 1, width
        self.show_if_changed(text.plain, text)

    def on_click(self, event: events.Click) -> None:
        if event.y == 1:
            fraction = (event.x - self._bar_x) / max(1, self._bar_w - 1)
            self.post_message(self.Seek(min(1.0, max(0.0, fraction))))
