"""Live mode: the engine in a child process (`python -m clustertop record SCENARIO -o -`), read through a
pipe.

The child writes the same JSON lines as a recording; commands (engine/stream/protocol.py) go back on its
stdin. A child process never competes with the UI for the interpreter lock. Until the engine reads commands,
it simply runs and the dashboard still follows it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clustertop.engine.stream import protocol

from .child import ChildSource


def record_command(scenario: str, seed: int | None = None, extra: list[str] | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "clustertop", "record", scenario, "-o", "-", "--control"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra or [])


def display_name(scenario: str) -> str:
    """A built-in scenario's name, or a scenario file's stem (a sweep point's temporary path is not a
    name)."""
    return Path(scenario).stem if scenario.endswith(".toml") else scenario


class LiveSource(ChildSource):
    """A running engine. `command` overrides the child's command line (tests, benchmarks)."""

    controllable = True
    kind = "live"

    def __init__(self, scenario: str, seed: int | None = None, command: list[str] | None = None) -> None:
        super().__init__(display_name(scenario), command or record_command(scenario, seed),
                         f"{scenario} (engine)")

    def starting(self) -> None:
        self.send(protocol.run_to(0.0))    # wait at the start for the dashboard's clock (it sends run_to)

    def send(self, command: dict[str, Any]) -> bool:
        stdin = self.proc.stdin
        if stdin is None or self.proc.poll() is not None:
            return False
        try:
            stdin.write(protocol.encode(command))
            stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True
