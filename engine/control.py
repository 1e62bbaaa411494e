"""Live control: the commands the dashboard sends to a running engine, and the engine's side of them.

The dashboard's live mode starts `python -m clustertop record SCENARIO -o - --control` and writes one JSON
object per line on its stdin:

    {"cmd": "speed", "value": 1000.0}     simulated seconds per wall-clock second (0.1 .. 1e6)
    {"cmd": "pause"}                       stop simulating (and writing) until "resume"
    {"cmd": "resume"}
    {"cmd": "inject_fault", "gpu": 4321}   a "Faulty GPU" fault at that GPU now: its node fails, the job on it
                                           stops, restarts from its last checkpoint, and the work since is lost

Lines end with "\\n"; lines that are not a command this version knows are ignored, so that an older engine
simply runs. With --control, `record` paces its output to the speed (1 simulated second per second until told
otherwise) and flushes what it wrote every tick; at the end of stdin it keeps running (unpaused) to the end.
Without --control a recording is neither paced nor changed.

This module is the protocol's one definition: tui/sources/protocol.py re-exports it (the engine never imports
the dashboard).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from .run import Run, RunStats, Sink

SPEED = "speed"
PAUSE = "pause"
RESUME = "resume"
INJECT_FAULT = "inject_fault"
COMMANDS = (SPEED, PAUSE, RESUME, INJECT_FAULT)

DEFAULT_SPEED = 1.0           # simulated seconds per wall second until the dashboard sends its speed
MIN_SPEED, MAX_SPEED = 0.1, 1e6
TICK_S = 0.05                 # wall seconds between two looks at the clock and the commands
_EOF = {"cmd": "<eof>"}


def speed(value: float) -> dict[str, Any]:
    return {"cmd": SPEED, "value": float(value)}


def pause() -> dict[str, Any]:
    return {"cmd": PAUSE}


def resume() -> dict[str, Any]:
    return {"cmd": RESUME}


def inject_fault(gpu: int) -> dict[str, Any]:
    return {"cmd": INJECT_FAULT, "gpu": int(gpu)}


def encode(command: dict[str, Any]) -> bytes:
    """One command as a JSON line."""
    if command.get("cmd") not in COMMANDS:
        raise ValueError(f"unknown command {command.get('cmd')!r}; expected one of {', '.join(COMMANDS)}")
    return orjson.dumps(command, option=orjson.OPT_APPEND_NEWLINE)


def decode(line: bytes | str) -> dict[str, Any] | None:
    """The engine side: one line back into a command, or None when it is not one this version knows."""
    try:
        command = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(command, dict) or command.get("cmd") not in COMMANDS:
        return None
    value = command.get("value")
    if command["cmd"] == SPEED and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return None
    gpu = command.get("gpu")
    if command["cmd"] == INJECT_FAULT and (isinstance(gpu, bool) or not isinstance(gpu, int)):
        return None
    return command


class Commands:
    """Commands read from a binary stream (the engine's stdin) by a daemon thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.eof = False
        self._thread = threading.Thread(target=self._read, args=(stream,), name="control", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        try:
            for line in stream:
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


class Pacer:
    """Runs a Run paced to the commanded speed, applying commands as they come."""

    def __init__(self, run: Run, commands: Commands, clock: Callable[[], float] = time.monotonic,
                 warn: Callable[[str], None] | None = None) -> None:
        self.run = run
        self.commands = commands
        self.clock = clock
        self.warn = warn or (lambda text: print(f"clustertop: {text}", file=sys.stderr, flush=True))
        self.speed = DEFAULT_SPEED
        self.paused = False

    def apply(self, command: dict[str, Any]) -> None:
        kind = command["cmd"]
        if kind == SPEED:
            self.speed = min(max(float(command["value"]), MIN_SPEED), MAX_SPEED)
        elif kind == PAUSE:
            self.paused = True
        elif kind == RESUME:
            self.paused = False
        elif kind == INJECT_FAULT:
            gpu = command["gpu"]
            gpus = self.run.topology.gpus
            if 0 <= gpu < gpus:
                self.run.inject_fault(gpu)
            else:
                self.warn(f"inject_fault: GPU {gpu} is not in the cluster; expected 0 to {gpus - 1}")

    def drive(self, sink: Sink, progress: Callable[[float], None] | None = None) -> RunStats:
        """The whole run, paced: simulated time advances by speed x wall time, except while paused."""
        run = self.run
        run.start(sink, progress)
        run.advance_to(0.0)                    # jobs start: a fault injected at once has a job to hit
        flush = getattr(sink, "flush", None)
        end = run.duration_s
        sim = 0.0
        last = self.clock()
        while sim < end:
            for command in self.commands.wait(None if self.paused and not self.commands.eof else TICK_S):
                self.apply(command)
            if self.commands.eof:
                self.paused = False            # nobody is left to resume it
            now = self.clock()
            if not self.paused:
                sim = min(end, sim + (now - last) * self.speed)
            last = now
            run.advance_to(sim)
            if flush is not None:
                flush()
        run.finish()
        return run.stats
