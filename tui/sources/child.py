"""A child process that writes the event stream to its stdout (the engine, a telemetry watcher), read through
a pipe. Until its header arrives the child is only starting: if it stops first, its last line on stderr is the
user's one-line error. A child process never competes with the UI for the interpreter lock."""

from __future__ import annotations

import subprocess
import threading
from typing import IO

from clustertop.engine.config.errors import UserError

from .stream import StreamSource, stream_events


class ChildSource(StreamSource):
    """The stream of `command`'s stdout; its stdin stays open for commands (subclasses send them)."""

    def __init__(self, name: str, command: list[str], label: str) -> None:
        self.command = command
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)
        self._stderr: list[bytes] = []
        self._stderr_thread = threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)
        self._stderr_thread.start()
        self.starting()
        assert self.proc.stdout is not None
        stdout: IO[bytes] = self.proc.stdout
        try:
            super().__init__(name, stream_events(stdout, label))
        except UserError:
            self._fail()
            raise
        except Exception:
            self.close()
            raise

    def starting(self) -> None:
        """Called once the child runs, before its header is read (the engine is told to wait for the
        clock)."""

    def _drain(self, stream: IO[bytes]) -> None:
        for line in stream:
            self._stderr.append(line)
            del self._stderr[:-20]

    def _fail(self) -> None:
        """The child stopped before its header: its one-line error is the user's error."""
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:      # it closed its output but runs on: end it, and say so
            self.proc.kill()
            self.proc.wait()
        self._stderr_thread.join(timeout=5)
        message = b"".join(self._stderr).decode(errors="replace").strip().splitlines()
        text = message[-1] if message else f"the child process exited with code {self.proc.returncode}"
        self.close()
        raise UserError(text.removeprefix("clustertop: "))

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
