"""Writing the event stream: plain JSON Lines or gzip, to a file or stdout, crash-safe and byte-reproducible.

Lines are buffered and written whole, and the output is flushed after every sample (and whenever the buffer
passes BUFFER_BYTES), so a process killed at any moment leaves a file whose complete lines all parse. Flush
points depend only on the stream's content, never on the wall clock, so the same run gives the same bytes.

Gzip files are written with zlib directly (level 6 unless told otherwise, no file name, mtime 0) as a sequence
of gzip members: each sample ends with Z_SYNC_FLUSH (a killed process leaves a decompressible prefix), and a
new member starts at the first sample after MEMBER_BYTES of uncompressed data, so every member begins with a
keyframe and a long recording can be cut at member boundaries into valid pieces. Concatenated members are
plain gzip: `gzip -dc` and Python's gzip module read them.

A writer (the simulation, real telemetry) writes to any `Sink`: a Recorder, or a ListSink (keeps the lines).
"""

from __future__ import annotations

import zlib
from typing import BinaryIO, Protocol

from ..config.outfile import Output, open_output

BUFFER_BYTES = 1 << 20
MEMBER_BYTES = 4 << 20
LEVEL = 6


class Sink(Protocol):
    """Where a writer's lines go: `write(line)` for the header and events, `keyframe(line)` for samples (a
    reader may start at any of them)."""

    def write(self, line: bytes) -> None: ...
    def keyframe(self, line: bytes) -> None: ...


class ListSink:
    """A sink that keeps the lines in memory (an in-process consumer takes them from `lines`)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    keyframe = write


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

    def keyframe(self, line: bytes) -> None:
        """A sample: may open a new gzip member (so that it starts with this line), then flush."""
        if self._z is not None and self.member + self.buffered >= MEMBER_BYTES:
            self._drain(zlib.Z_NO_FLUSH)
            self._emit(self._z.flush(zlib.Z_FINISH))
            self._z = self._compressor()
            self.member = 0
        self.write(line)
        self._drain(zlib.Z_SYNC_FLUSH)
        self.out.flush()

    def flush(self) -> None:
        """Write out what is buffered now (paced live runs);
        gzip: a sync flush, so a reader can decompress it."""
        if self.buffer:
            self._drain(zlib.Z_SYNC_FLUSH)
        self.out.flush()

    def _drain(self, mode: int) -> None:
        data = b"".join(self.buffer)
        self.buffer.clear()
        self.buffered = 0
        if self._z is None:
            self._emit(data)
            return
        self.member += len(data)
        self._emit(self._z.compress(data))
        if mode != zlib.Z_NO_FLUSH:
            self._emit(self._z.flush(mode))

    def _emit(self, data: bytes) -> None:
        if data:
            self.out.write(data)
            self.bytes_out += len(data)

    def close(self) -> None:
        """Write what is buffered and end the gzip stream; closes files (not stdout)."""
        try:
            self._drain(zlib.Z_NO_FLUSH)
            if self._z is not None:
                self._emit(self._z.flush(zlib.Z_FINISH))
                self._z = None
            self.out.flush()
        finally:
            if self.close_out:
                self.out.close()
