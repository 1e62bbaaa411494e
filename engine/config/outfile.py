"""Output paths a user names (record -o, export -o, sweep -o, --best-to): checked up front, written safely.

One opener for every output: '-' is stdout; a FIFO or a character device (/dev/null, /dev/stdout, a terminal)
is written through, never replaced; a directory, a block device, a socket or a dangling symbolic link is
refused; a regular file (or a new one) is created or truncated, or, for an atomic output, written to a
temporary file beside it and renamed over it at the end (a failed export leaves nothing behind). A symbolic
link to a regular file is written through too: renaming over it would replace the link. Write errors (a full
disk, an I/O error, a closed pipe other than stdout's) end in one UserError naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

from .errors import UserError
from .infile import kind_of

_WRITE_THROUGH = (stat.S_ISFIFO, stat.S_ISCHR)


def check_output(path: str, flag: str = "-o") -> None:
    """UserError unless `path` can be written (created, truncated or written through); creates nothing."""
    if path == "-":
        return
    lead = "" if flag == "-o" else f"{flag}: "
    try:
        mode = os.stat(path).st_mode           # follows symbolic links
    except FileNotFoundError:
        mode = None
    except OSError as exc:                     # a symbolic link loop, a name too long,
                                               # a file used as a directory
        raise UserError(f"{lead}cannot write: {exc.strerror}", path) from None
    except ValueError:
        raise UserError(f"{lead}not a valid file name", path) from None
    if mode is None:
        if os.path.islink(path):
            raise UserError(f"{lead}is a symbolic link to a missing file; expected a file name", path)
        parent = Path(path).parent
        if not parent.is_dir():
            raise UserError(f"{lead}directory {str(parent)!r} does not exist", path)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"{lead}cannot create a file in {str(parent)!r} (permission denied)", path)
        return
    if stat.S_ISDIR(mode):
        raise UserError(f"{lead}is a directory; expected a file name such as run.jsonl.gz", path)
    if not stat.S_ISREG(mode) and not any(test(mode) for test in _WRITE_THROUGH):
        raise UserError(f"{lead}is {kind_of(mode)}; expected a regular file, a FIFO or a character device",
                        path)
    if not os.access(path, os.W_OK):
        raise UserError(f"{lead}is not writable", path)


class Output:
    """A binary output: write, flush, then close() to finish (an atomic one renames its temporary file into
    place) or abort() to give up (an atomic one leaves nothing). OSError on write becomes one UserError naming
    the path; BrokenPipeError on stdout stays (its reader went away: not an error)."""

    def __init__(self, stream: BinaryIO, path: str, *, owned: bool = True, temp: str | None = None) -> None:
        self.stream = stream
        self.path = path
        self.name = path                # what gzip puts in its header (the same as opening the path)
        self.owned = owned
        self.temp = temp
        self.closed = False

    def write(self, data: bytes) -> int:
        try:
            return self.stream.write(data)
        except OSError as exc:
            raise self._error(exc) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            raise self._error(exc) from None

    def _error(self, exc: OSError) -> BaseException:
        if isinstance(exc, BrokenPipeError) and not self.owned:
            return exc
        return UserError(f"cannot write: {exc.strerror or exc}", self.path)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.stream.flush()
            if self.owned:
                self.stream.close()
            if self.temp is not None:
                os.replace(self.temp, self.path)
        except OSError as exc:
            self._discard()
            raise self._error(exc) from None

    def abort(self) -> None:
        """Stop writing: an atomic output's temporary file is removed; what was written through stays."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.owned:
                self.stream.close()
        except OSError:
            pass
        self._discard()

    def _discard(self) -> None:
        if self.temp is not None:
            try:
                os.unlink(self.temp)
            except OSError:
                pass


def open_output(path: str, flag: str = "-o", atomic: bool = False) -> Output:
    """An Output for `path` ('-': stdout), checked first (check_output). `atomic`: a regular file is written
    to a temporary file in its directory and renamed over it on close()."""
    if path == "-":
        return Output(sys.stdout.buffer, "<stdout>", owned=False)
    check_output(path, flag)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    try:
        if mode is not None and not stat.S_ISREG(mode):
            # a FIFO or a device: written through; a FIFO nobody reads would block the open, so it is refused
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            os.set_blocking(fd, True)
            return Output(os.fdopen(fd, "wb"), path)
        if atomic and not os.path.islink(path):
            fd, temp = tempfile.mkstemp(prefix=".clustertop-", suffix=".tmp", dir=Path(path).resolve().parent)
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)       # mkstemp creates 0600; the output is an ordinary file
            return Output(os.fdopen(fd, "wb"), path, temp=temp)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        return Output(os.fdopen(fd, "wb"), path)
    except OSError as exc:
        if exc.errno == errno.ENXIO:            # a FIFO with no reader
            raise UserError("is a FIFO that nobody reads; expected a reader on it", path) from None
        raise UserError(f"cannot write: {exc.strerror}", path) from None
