"""A one-line progress bar on stderr for long headless runs: simulated time against the target, rate, ETA.

Shown only when the stream is a terminal; redrawn at most ten times a second. Wall-clock time is used here
and nowhere in the recording.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .units import format_duration

WIDTH = 24
REDRAW_S = 0.1


class Progress:
    def __init__(self, target_s: float, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.target_s = target_s
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, sim_t: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < REDRAW_S and sim_t < self.target_s:
            return
        self.last = now
        self.stream.write("\r" + self.line(sim_t, now - self.start))
        self.stream.flush()
        self.shown = True

    def line(self, sim_t: float, wall_s: float) -> str:
        frac = min(max(sim_t / self.target_s, 0.0), 1.0) if self.target_s > 0 else 1.0
        filled = int(frac * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        rate = sim_t / wall_s if wall_s > 0 else 0.0
        eta = (self.target_s - sim_t) / rate if rate > 0 else 0.0
        return (f"[{bar}] {frac:4.0%}  {format_duration(sim_t)} / {format_duration(self.target_s)}  "
                f"{rate:,.0f}x  ETA {format_duration(eta) if rate > 0 else '?'}  ")

    def close(self) -> None:
        if self.enabled and self.shown:
            self.stream.write("\n")
            self.stream.flush()
