"""Live mode: the engine in a child process (`python -m clustertop record SCENARIO -o -`), read through a pipe.

The child writes the same JSON lines as a recording; commands (engine/stream/protocol.py) go back on its stdin.
A child process never competes with the UI for the interpreter lock. Until the engine reads commands, it simply
runs and the dashboard still follows it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from clustertop.engine.config.errors import UserError
from clustertop.engine.stream import protocol

from .stream import StreamSource, stream_events


def record_command(scenario: str, seed: int | None = None, extra: list[str] | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "clustertop", "record", scenario, "-o", "-", "--control"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra or [])


def display_name(scenario: str) -> str:
    """A built-in scenario's name, or a scenario file's stem (a sweep point's temporary path is not a name)."""
    return Path(scenario).stem if scenario.endswith(".toml") else scenario


class LiveSource(StreamSource):
    """A running engine. `command` overrides the child's command line (tests, benchmarks)."""

    controllable = True

    def __init__(self, scenario: str, seed: int | None = None, command: list[str] | None = None) -> None:
        self.command = command or record_command(scenario, seed)
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)
        self._stderr: list[bytes] = []
        self._stderr_thread = threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)
        self._stderr_thread.start()
        self.send(protocol.run_to(0.0))    # wait at the start for the dashboard's clock (it sends run_to)
        assert self.proc.stdout is not None
        stdout: IO[bytes] = self.proc.stdout
        try:
            super().__init__(display_name(scenario), stream_events(stdout, f"{scenario} (engine)"))
        except UserError:
            self._fail()
            raise
        except Exception:
            self.close()
            raise

    def _drain(self, stream: IO[bytes]) -> None:
        for line in stream:
            self._stderr.append(line)
            del self._stderr[:-20]

    def _fail(self) -> None:
        """The engine stopped before its header: its one-line error is the user's error."""
        self.proc.wait(timeout=30)
        self._stderr_thread.join(timeout=5)
        message = b"".join(self._stderr).decode(errors="replace").strip().splitlines()
        text = message[-1] if message else f"the engine exited with code {self.proc.returncode}"
        self.close()
        raise UserError(text.removeprefix("clustertop: "))

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

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
