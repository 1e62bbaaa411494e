"""Writing the event stream: plain JSON Lines or gzip, to a file or stdout, crash-safe and byte-reproducible.

Lines are buffered and written whole, and the output is flushed after every sample (and whenever the buffer
passes BUFFER_BYTES), so a process killed at any moment leaves a file whose complete lines all parse. Flush
points depend only on the stream's content, never on the wall clock, so the same run gives the same bytes.

Gzip files are written with zlib directly (level 6 unless told otherwise, no file name, mtime 0) as a sequence of gzip members:
each sample ends with Z_SYNC_FLUSH (a killed process leaves a decompressible prefix), and a new member starts
at the first sample after MEMBER_BYTES of uncompressed data, so every member begins with a keyframe and a long
recording can be cut at member boundaries into valid pieces. Concatenated members are plain gzip: `gzip -dc`
and Python's gzip module read them.
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path
from typing import BinaryIO

from ..config.errors import UserError

BUFFER_BYTES = 1 << 20
MEMBER_BYTES = 4 << 20
LEVEL = 6


def check_output(path: str) -> None:
    """UserError unless `path` can be created or overwritten; creates nothing."""
    if path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UserError("is a directory; expected a file name such as run.jsonl.gz", path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"directory {str(parent)!r} does not exist", path)
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError("is not writable", path)
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot create a file in {str(parent)!r} (permission denied)", path)


class Recorder:
    """A sink for Run: `write(line)` for events, `keyframe(line)` for samples; `close()` at the end."""

    def __init__(self, out: BinaryIO, *, compress: bool, close_out: bool = True, level: int = LEVEL) -> None:
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
        """'-' is stdout (plain); a name ending in .gz is gzip, at zlib `level` (real telemetry, whose every GPU
        differs, takes level 1: seven times faster than 6 for a fifth more bytes)."""
        if path == "-":
            return cls(sys.stdout.buffer, compress=False, close_out=False)
        check_output(path)
        try:
            out = open(path, "wb")  # noqa: SIM115 (the Recorder owns and closes it)
        except OSError as exc:
            raise UserError(f"cannot write: {exc.strerror}", path) from None
        return cls(out, compress=path.endswith(".gz"), level=level)

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
        """Write out what is buffered now (paced live runs); gzip: a sync flush, so a reader can decompress it."""
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
