"""Progress bars for long headless commands (record, sweep), drawn with rich.progress on stderr.

Shown only when stderr is a terminal and the command's output is not stdout: never into a pipe, a log file, or
over a dashboard reading the stream (`clustertop record X -o - | clustertop replay -`). Transient: the bar is
erased when the command ends. Wall-clock time is used here and nowhere in a recording.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Self, TextIO

from clustertop.engine.config.units import format_duration
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn


def wanted(output: str | None) -> bool:
    """Whether to draw a bar: stderr is a terminal and the output does not go to stdout."""
    return output != "-" and sys.stderr.isatty()


class Bar:
    """One task's bar; `update(done, note)` as often as wanted (rich redraws at most 10 times a second)."""

    def __init__(self, total: float, enabled: bool, file: TextIO | None = None) -> None:
        self.total = total
        self.started = time.monotonic()
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[note]}"),
                                      TimeRemainingColumn(),
                                      console=Console(file=file or sys.stderr, force_terminal=True),
                                      transient=True)
            self._task = self._progress.add_task("", total=max(total, 1e-9), note="")
            self._progress.start()

    def rate(self, done: float) -> float:
        """Done per wall-clock second so far."""
        wall = time.monotonic() - self.started
        return done / wall if wall > 0 else 0.0

    def update(self, done: float, note: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=min(done, self.total), note=note)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class RunBar(Bar):
    """A recording: simulated time against the target, and how many times faster than real time it runs."""

    def __call__(self, sim_t: float) -> None:
        self.update(sim_t,
                    f"{format_duration(sim_t)} / {format_duration(self.total)}  {self.rate(sim_t):,.0f}x")
