"""Streams read while they are written: stdin (`clustertop record X -o - | clustertop replay -`) and pipes.

The header is read before the dashboard starts (a bad stream is a one-line error); the rest is read by a
daemon thread that only appends to the index. The UI polls the index at its frame rate, so however fast lines
arrive, the UI sees one coalesced update per frame and is never flooded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import IO, Any

from clustertop.engine.config.errors import UserError
from clustertop.engine.stream.reader import iter_events

from ..index import EventIndex
from . import Source

LIVE_KEYFRAMES = 2048   # keyframes kept by an endless stream (memory stays flat)


def stream_events(stream: IO[bytes], name: str) -> Iterator[Any]:
    """The header (checked), then each event of an open binary stream (plain or gzip), read and checked by
    engine/stream/reader.py as lines arrive. Warnings (a truncated last line when the writer stops) are not
    printed over the screen."""
    return iter_events(stream, warn=lambda message: None, name=name)


class StreamSource(Source):
    """Events from an iterator whose first item is the header, read on a background thread."""

    live = True

    def __init__(self, name: str, events: Iterator[Any], max_keyframes: int | None = LIVE_KEYFRAMES) -> None:
        try:
            header = next(events)
        except StopIteration:
            raise UserError("is empty; expected a clustertop event stream", name) from None
        super().__init__(name, EventIndex(header, max_keyframes=max_keyframes))
        self._events = events
        self._thread = threading.Thread(target=self._read, name=f"reader:{name}", daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive() and not self.index.done:
            self._thread.start()

    def _read(self) -> None:
        error: str | None = None
        try:
            add = self.index.add
            for event in self._events:
                add(event)
        except UserError as exc:
            error = str(exc)
        except (OSError, ValueError) as exc:   # the pipe closed under us
            error = f"{self.name}: stream ended: {exc}"
        self.index.finish(error)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the stream has been read to its end (tests, benchmarks)."""
        self._thread.join(timeout)
        return self.index.done
