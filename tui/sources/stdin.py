"""Standard input as a live stream (`clustertop record X -o - | clustertop replay -`).

The dashboard reads its keyboard from stdin, so the pipe is moved to another file descriptor and the terminal
(/dev/tty) takes its place before the app starts.
"""

from __future__ import annotations

import io
import os
import sys

from clustertop.engine.config.errors import UserError

from .stream import StreamSource, stream_events


def stdin_source() -> StreamSource:
    """The stream on stdin, with the keyboard switched to the terminal."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UserError("stdin is a terminal; expected a stream, as in `clustertop record X -o - | "
                        "clustertop replay -`", "-")
    pipe = io.BufferedReader(os.fdopen(os.dup(0), "rb", buffering=0))
    source = StreamSource("<stdin>", stream_events(pipe, "<stdin>"))
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        raise UserError("no terminal to read keys from (/dev/tty); run it in a terminal", "-") from None
    os.dup2(tty, 0)
    os.close(tty)
    return source
