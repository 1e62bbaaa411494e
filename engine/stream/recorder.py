"""Writing the event stream: plain JSON Lines or gzip, to a file or stdout, crash-safe and byte-reproducible.

Lines are buffered and written whole, and the output is flushed after every sample (and whenever the buffer
passes BUFFER_BYTES), so a process killed at any moment leaves a file whose complete lines all parse. Flush
points depend only on the stream's content, never on the wall clock, so the same run gives the same bytes.

Gzip files are written with zlib directly (level 6 unless told otherwise, no file name, mtime 0) as a sequence
of gzip members: each sample ends with Z_SYNC_FLUSH (a killed process leaves a decompressible prefix), and a
new member starts at the first sample after MEMBER_BYTES of uncompressed data, so every member begins with a
keyframe and a long recording can be cut at member boundaries into valid pieces. Concatenated members are
plain gzip: `gzip -dc` and Python's gzip module read them.

Gzip is compressed on a thread of the Recorder's own (zlib lets go of the interpreter lock while it works), so
a simulation goes on while its last lines are compressed: the same chunks, in the same order, with the same
flushes give the same bytes; `flush()` and `close()` wait for it, and an error writing the output is raised at
the next call. At most QUEUED chunks wait, so a fast writer waits for it rather than fill memory.

A writer (the simulation, real telemetry) writes to any `Sink`: a Recorder, or a ListSink (keeps the lines).
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Callable
from typing import BinaryIO, Protocol

from ..config.outfile import Output, open_output

BUFFER_BYTES = 1 << 20
MEMBER_BYTES = 4 << 20
LEVEL = 6
QUEUED = 8                      # chunks waiting for the compressing thread (each ~BUFFER_BYTES or a sample)
_MEMBER = -1                    # a queued operation: end the gzip member and start the next
_FLUSH_OUT = -2                 # a queued operation: flush the output
_STOP = -3
_SAMPLE = -4                    # a queued operation: a sample's chunk, sync-flushed, then the output flushed


class Sink(Protocol):
    """Where a writer's lines go: `write(line)` for the header and events, `keyframe(line)` for samples (a
    reader may start at any of them). A sink may also take many events at once, `writelines(lines)` (the
    same as writing each; a writer looks for it with `write_many`)."""

    def write(self, line: bytes) -> None: ...
    def keyframe(self, line: bytes) -> None: ...


class ListSink:
    """A sink that keeps the lines in memory (an in-process consumer takes them from `lines`)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    keyframe = write

    def writelines(self, lines: list[bytes]) -> None:
        self.lines += lines


def write_many(sink: Sink) -> Callable[[list[bytes]], None]:
    """The sink's `writelines`, or one that writes each line (a sink with `write` and `keyframe` only)."""
    many: Callable[[list[bytes]], None] | None = getattr(sink, "writelines", None)
    if many is not None:
        return many
    write = sink.write

    def each(lines: list[bytes]) -> None:
        for item in lines:
            write(item)

    return each


class Recorder:
    """A sink to a file or stdout: `write(line)` for events, `keyframe(line)` for samples; then `close()`."""

    def __init__(self, out: BinaryIO | Output, *, compress: bool, close_out: bool = True,
                 level: int = LEVEL) -> None:
        self.out = out
        self.compress = compress
        self.level = level
        self.close_out = close_out
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.member = 0                 # uncompressed bytes in the current gzip member
        self.bytes_out = 0              # bytes written to the output
        self.lines = 0
        self._z = self._compressor() if compress else None
        self._queue: queue.Queue[tuple[int, bytes]] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @classmethod
    def open(cls, path: str, level: int = LEVEL) -> Recorder:
        """'-' is stdout (plain); a name ending in .gz is gzip, at zlib `level` (real telemetry, whose every
        GPU differs, takes level 1: seven times faster than 6 for a fifth more bytes). The path is checked and
        written as engine/config/outfile.py says (a FIFO or a device is written through, a full disk is one
        error)."""
        return cls(open_output(path), compress=path != "-" and path.endswith(".gz"), level=level)

    def _compressor(self) -> zlib._Compress:
        return zlib.compressobj(self.level, zlib.DEFLATED, 31)

    def write(self, line: bytes) -> None:
        self.buffer.append(line)
        self.buffered += len(line)
        self.lines += 1
        if self.buffered >= BUFFER_BYTES:
            self._drain(zlib.Z_NO_FLUSH)

    def writelines(self, lines: list[bytes]) -> None:
        """Events, the same as writing each (the buffer drains after the same line), in fewer calls."""
        size = sum(map(len, lines))
        if self.buffered + size >= BUFFER_BYTES:      # it drains after one of them: where write would
            for item in lines:
                self.write(item)
            return
        self.buffer += lines
        self.buffered += size
        self.lines += len(lines)

    def keyframe(self, line: bytes) -> None:
        """A sample: may open a new gzip member (so that it starts with this line), then flush."""
        if self._z is not None and self.member + self.buffered >= MEMBER_BYTES:
            self._drain(zlib.Z_NO_FLUSH)
            self._submit(_MEMBER, b"")
            self.member = 0
        self.write(line)
        self._drain(_SAMPLE)

    def flush(self) -> None:
        """Write out what is buffered now (paced live runs);
        gzip: a sync flush, so a reader can decompress it."""
        if self.buffer:
            self._drain(zlib.Z_SYNC_FLUSH)
        self._submit(_FLUSH_OUT, b"")
        self._wait()

    def _drain(self, mode: int) -> None:
        data = b"".join(self.buffer)
        self.buffer.clear()
        self.buffered = 0
        if self._z is not None:
            self.member += len(data)
        self._submit(mode, data)

    def _submit(self, op: int, data: bytes) -> None:
        """Compress and write a chunk (op: its zlib flush mode, or _SAMPLE: sync-flushed and the output
        flushed, one hand-off a sample), end a member, or flush the output: on the compressing thread for gzip
        (in order), here for plain output."""
        if self._error is not None:
            raise self._error
        if self._z is None:
            if op != _FLUSH_OUT:
                self._emit(data)
            if op in (_FLUSH_OUT, _SAMPLE):
                self.out.flush()
            return
        if self._queue is None:
            self._queue = queue.Queue(QUEUED)
            self._thread = threading.Thread(target=self._compress, name="recorder-gzip", daemon=True)
            self._thread.start()
        self._queue.put((op, data))

    def _compress(self) -> None:
        """The compressing thread: the queued operations in order; after an error, it only empties the queue
        (the error is raised to the writer at its next call)."""
        assert self._queue is not None
        while True:
            op, data = self._queue.get()
            try:
                if op == _STOP:
                    return
                if self._error is None:
                    self._apply(op, data)
            except BaseException as exc:  # noqa: BLE001 (any error, e.g. a full disk's UserError, goes back)
                self._error = exc
            finally:
                self._queue.task_done()

    def _apply(self, op: int, data: bytes) -> None:
        z = self._z
        assert z is not None
        if op == _MEMBER:
            self._emit(z.flush(zlib.Z_FINISH))
            self._z = self._compressor()
        elif op == _FLUSH_OUT:
            self.out.flush()
        else:
            self._emit(z.compress(data))
            if op != zlib.Z_NO_FLUSH:
                self._emit(z.flush(zlib.Z_SYNC_FLUSH if op == _SAMPLE else op))
            if op == _SAMPLE:
                self.out.flush()

    def _wait(self) -> None:
        """Until the compressing thread has done everything queued; its error, if any, raised here."""
        if self._queue is not None:
            self._queue.join()
        if self._error is not None:
            raise self._error

    def _emit(self, data: bytes) -> None:
        if data:
            self.out.write(data)
            self.bytes_out += len(data)

    def close(self) -> None:
        """Write what is buffered and end the gzip stream; closes files (not stdout)."""
        try:
            self._drain(zlib.Z_NO_FLUSH)
            self._wait()
            if self._z is not None:
                self._emit(self._z.flush(zlib.Z_FINISH))
                self._z = None
            self.out.flush()
        finally:
            if self._queue is not None and self._thread is not None:
                self._queue.put((_STOP, b""))
                self._thread.join()
                self._queue = self._thread = None
            if self.close_out:
                self.out.close()
