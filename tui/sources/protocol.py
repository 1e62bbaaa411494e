"""The control protocol of live mode: commands the dashboard sends to the engine's stdin, one JSON line each.

    {"cmd": "speed", "value": 1000.0}     simulated seconds per wall-clock second (0.1 .. 1e6)
    {"cmd": "pause"}                       stop emitting events until "resume"
    {"cmd": "resume"}
    {"cmd": "inject_fault", "gpu": 4321}   fail the GPU (and so its node's job) now

Lines end with "\\n"; unknown commands are ignored by the engine, so older engines simply run. The engine must not
import the TUI: when it implements this side, this module moves to engine/ (for example engine/control.py) and
the dashboard imports it from there.
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
    if command["cmd"] == SPEED and not isinstance(command.get("value"), (int, float)):
        return None
    if command["cmd"] == INJECT_FAULT and not isinstance(command.get("gpu"), int):
        return None
    return command
