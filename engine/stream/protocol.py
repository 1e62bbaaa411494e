"""The live-control protocol: the commands the dashboard sends to a running engine (engine/sim/control.py).

The dashboard's live mode starts `python -m clustertop record SCENARIO -o - --control` and writes one JSON
object per line on its stdin:

    {"cmd": "speed", "value": 1000.0}     simulated seconds per wall-clock second (0.1 .. 1e6)
    {"cmd": "pause"}                       stop simulating (and writing) until "resume"
    {"cmd": "resume"}
    {"cmd": "inject_fault", "gpu": 4321}   a "Faulty GPU" fault at that GPU now: its node fails, the job on
                                           it stops, restarts from its last checkpoint, and the work since is
                                           lost
    {"cmd": "inject_fault", "gpu": 4321, "t": 812.5}
                                           the same at simulated time t (the time on the dashboard's screen);
                                           an engine already past t injects now
    {"cmd": "run_to", "t": 812.5}          simulate up to t and no further: from the first run_to on, the
                                           dashboard's clock drives the engine (speed no longer paces it), so
                                           the engine is never ahead of the screen and a pause stops it
                                           exactly

Lines end with "\\n"; lines that are not a command this version knows are ignored, so that an older engine
simply runs.

This module is the protocol's one definition: the dashboard encodes with it, the engine decodes with it.
"""

from __future__ import annotations

from typing import Any

import orjson

SPEED = "speed"
PAUSE = "pause"
RESUME = "resume"
INJECT_FAULT = "inject_fault"
RUN_TO = "run_to"
COMMANDS = (SPEED, PAUSE, RESUME, INJECT_FAULT, RUN_TO)


def speed(value: float) -> dict[str, Any]:
    return {"cmd": SPEED, "value": float(value)}


def pause() -> dict[str, Any]:
    return {"cmd": PAUSE}


def resume() -> dict[str, Any]:
    return {"cmd": RESUME}


def inject_fault(gpu: int, t: float | None = None) -> dict[str, Any]:
    command: dict[str, Any] = {"cmd": INJECT_FAULT, "gpu": int(gpu)}
    if t is not None:
        command["t"] = float(t)
    return command


def run_to(t: float) -> dict[str, Any]:
    return {"cmd": RUN_TO, "t": float(t)}


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


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
    kind = command["cmd"]
    if kind == SPEED and not _number(command.get("value")):
        return None
    gpu = command.get("gpu")
    if kind == INJECT_FAULT and (isinstance(gpu, bool) or not isinstance(gpu, int)
                                 or ("t" in command and not _number(command["t"]))):
        return None
    if kind == RUN_TO and not _number(command.get("t")):
        return None
    return command
