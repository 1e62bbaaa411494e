"""Live control, the engine's side: commands read from stdin (engine/stream/protocol.py)
and a run paced to them.

With --control, `record` paces its output to the speed (1 simulated second per second until told otherwise)
and flushes what it wrote every tick; at the end of stdin it keeps running (unpaused) to the end. Without
--control a recording is neither paced nor changed.

From the first `run_to` on, the dashboard's clock drives the run: the engine simulates up to the time it was
given and waits there, so it is never ahead of the screen, a pause stops it exactly, and a fault injected at
the time on screen lands at that time. Time spent paused never counts as simulated time. The pacer drives a
run through the `Paced` interface only (engine/sim/run.py's Run provides it).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from ..stream.protocol import INJECT_FAULT, PAUSE, RESUME, RUN_TO, SPEED, decode
from ..stream.recorder import Sink
from .summary import RunStats

DEFAULT_SPEED = 1.0           # simulated seconds per wall second until the dashboard sends its speed
MIN_SPEED, MAX_SPEED = 0.1, 1e6
TICK_S = 0.05                 # wall seconds between two looks at the clock and the commands
MAX_COMMAND_BYTES = 1 << 16   # a command is a few dozen bytes: a longer line is skipped, never held whole
_EOF = {"cmd": "<eof>"}


class Commands:
    """Commands read from a binary stream (the engine's stdin) by a daemon thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.eof = False
        self._thread = threading.Thread(target=self._read, args=(stream,), name="control", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        try:
            while line := stream.readline(MAX_COMMAND_BYTES):
                if len(line) == MAX_COMMAND_BYTES and not line.endswith(b"\n"):
                    # not a command: skip to its end
                    while (rest := stream.readline(MAX_COMMAND_BYTES)) and not rest.endswith(b"\n"):
                        pass
                    continue
                command = decode(line)
                if command is not None:
                    self._queue.put(command)
        except (OSError, ValueError):
            pass
        finally:
            self._queue.put(_EOF)

    def wait(self, timeout: float | None) -> list[dict[str, Any]]:
        """The commands that arrived, waiting up to `timeout` seconds (None: until one does) for the first."""
        if self.eof:
            if timeout:
                time.sleep(timeout)
            return []
        out: list[dict[str, Any]] = []
        try:
            out.append(self._queue.get(timeout=timeout))
            while True:
                out.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        if _EOF in out:
            self.eof = True
            out = [c for c in out if c is not _EOF]
        return out


class Paced(Protocol):
    """What the pacer drives: a run started on a sink, simulated up to a time, given faults, finished."""

    duration_s: float
    stats: RunStats

    @property
    def now(self) -> float:
        """The simulated time now."""

    @property
    def gpus(self) -> int:
        """The cluster's GPUs (a fault lands on one of them)."""

    def start(self, sink: Sink, progress: Callable[[float], None] | None = None) -> None:
        """Write the header and start the run."""

    def advance_to(self, t: float) -> None:
        """Simulate up to time t and write every line up to it."""

    def inject_fault(self, gpu: int, cause: str = ...) -> None:
        """A fault at one GPU now."""

    def finish(self) -> None:
        """Run to the end and close the summary."""


class Pacer:
    """Runs a run paced to the commanded speed, applying commands as they come."""

    def __init__(self, run: Paced, commands: Commands, clock: Callable[[], float] = time.monotonic,
                 warn: Callable[[str], None] | None = None) -> None:
        self.run = run
        self.commands = commands
        self.clock = clock
        self.warn = warn or (lambda text: print(f"clustertop: {text}", file=sys.stderr, flush=True))
        self.speed = DEFAULT_SPEED
        self.paused = False
        self.horizon: float | None = None     # set by run_to: simulate up to here, no further

    def apply(self, command: dict[str, Any]) -> None:
        kind = command["cmd"]
        if kind == SPEED:
            self.speed = min(max(float(command["value"]), MIN_SPEED), MAX_SPEED)
        elif kind == PAUSE:
            self.paused = True
        elif kind == RESUME:
            self.paused = False
        elif kind == RUN_TO:
            self.horizon = float(command["t"])
        elif kind == INJECT_FAULT:
            gpu = command["gpu"]
            gpus = self.run.gpus
            if 0 <= gpu < gpus:
                at = command.get("t")
                if at is not None and float(at) > self.run.now:
                    self.run.advance_to(float(at))   # the time on the dashboard's screen (never in the past)
                self.run.inject_fault(gpu)
            else:
                self.warn(f"inject_fault: GPU {gpu} is not in the cluster; expected 0 to {gpus - 1}")

    def drive(self, sink: Sink, progress: Callable[[float], None] | None = None) -> RunStats:
        """The whole run, paced: simulated time advances by speed x wall time (or to the dashboard's run_to),
        except while paused."""
        run = self.run
        run.start(sink, progress)
        run.advance_to(0.0)                    # jobs start: a fault injected at once has a job to hit
        flush = getattr(sink, "flush", None)
        end = run.duration_s
        sim = 0.0
        last = self.clock()
        while sim < end:
            blocked = self.paused and not self.commands.eof
            for command in self.commands.wait(None if blocked else TICK_S):
                self.apply(command)
            if blocked:
                last = self.clock()            # the wall time spent paused is not simulated time
            if self.commands.eof:
                self.paused = False            # nobody is left to resume it
                self.horizon = None            # nor to drive the clock: run at the speed to the end
            now = self.clock()
            sim = max(sim, run.now)            # an injection at a later time moved the run on
            if not self.paused:
                step = (now - last) * self.speed
                sim = min(end, max(sim, self.horizon) if self.horizon is not None else sim + step)
            last = now
            run.advance_to(sim)
            if flush is not None:
                flush()
        run.finish()
        return run.stats
