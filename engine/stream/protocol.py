"""The live-control protocol: the commands the dashboard sends to a running engine (engine/sim/control.py).

The dashboard's live mode starts `python -m clustertop record SCENARIO -o - --control` and writes one JSON
object per line on its stdin:

    {"cmd": "speed", "value": 1000.0}     simulated seconds per wall-clock second (0.1 .. 1e6)
    {"cmd": "pause"}                       stop simulating (and writing) until "resume"
    {"cmd": "resume"}
    {"cmd": "inject_fault", "gpu": 4321}   a "Faulty GPU" fault at that GPU now: its node fails, the job on it
                                           stops, restarts from its last checkpoint, and the work since is lost

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
COMMANDS = (SPEED, PAUSE, RESUME, INJECT_FAULT)



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
