"""Untrusted input files (scenarios, recordings, sweep results): opened only when they are regular files, or
'-' for stdin, and read with a cap on what is read.

stat's size is no guide: a FIFO blocks the open and a device (/dev/zero) never ends, and both say 0 bytes. So
the file is opened without blocking, refused unless it is a regular file, and readers bound what they read
themselves (`read_capped` here; the recording reader bounds each line).
"""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO

from .errors import UserError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file is, for messages: 'a directory', 'a FIFO (named pipe)', ... or 'a special file'."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def open_input(path: str, expected: str) -> BinaryIO:
    """A binary stream of `path` ('-': stdin). UserError naming the path when it is missing, unreadable or not
    a regular file; `expected` says what it should be ("a .toml scenario file")."""
    if path == "-":
        return sys.stdin.buffer
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)          # non-blocking: opening a FIFO with no writer returns at once
    except FileNotFoundError:
        raise UserError("no such file", path) from None
    except PermissionError:
        raise UserError("permission denied", path) from None
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}; expected {expected}", path) from None
    except ValueError:                     # a NUL byte in the name
        raise UserError(f"is not a valid file name; expected {expected}", path) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"is {kind_of(mode)}; expected {expected}", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


READ_CHUNK = 1 << 16        # read_capped reads this much at a time: one read(limit + 1) would first allocate
                            # the whole limit (4 MB for a scenario: a mapping and its page faults)


def read_capped(path: str, limit: int, expected: str) -> bytes:
    """Every byte of a regular file of at most `limit` bytes; UserError when it holds more
    (whatever stat says)."""
    parts: list[bytes] = []
    size = 0
    with open_input(path, expected) as stream:
        try:
            while size <= limit:
                part = stream.read(min(READ_CHUNK, limit + 1 - size))
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror}", path) from None
    data = b"".join(parts)
    if len(data) > limit:
        raise UserError(f"is larger than {limit:,} bytes; expected {expected} of at most {limit:,} bytes",
                        path)
    return data
