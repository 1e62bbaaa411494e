"""Reading event streams: files (plain or gzip, by magic bytes), stdin and the live engine's pipe.

One reader for every source. Streaming, in constant memory. Lines are parsed with orjson and folded into a
ClusterState by the one reducer (ClusterState.apply).
"""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path
from typing import IO, Any, Iterator

import orjson

from . import schema
from .errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


def open_binary(source: str) -> IO[bytes]:
    """A binary stream of the recording's lines: '-' is stdin; gzip is detected by its magic bytes."""
    if source == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        path = Path(source)
        if path.is_dir():
            raise UserError("is a directory; expected a .jsonl or .jsonl.gz recording", source)
        try:
            raw = open(path, "rb")
        except FileNotFoundError:
            raise UserError("no such file", source) from None
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror}", source) from None
    buffered = io.BufferedReader(raw) if not isinstance(raw, io.BufferedReader) else raw
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    return buffered


def iter_events(source: str) -> Iterator[dict[str, Any]]:
    """The header, then every event of a recording, in order. UserError on a bad recording."""
    name = "<stdin>" if source == "-" else source
    stream = open_binary(source)
    pending: tuple[int, bytes] | None = None
    number = 0
    try:
        for number, line in enumerate(stream, start=1):
            if pending is not None:
                yield _parse(name, *pending)
                pending = None
            if not line.endswith(b"\n"):
                pending = (number, line)   # possibly a truncated last line
                break
            if number == 1:
                try:
                    header = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise UserError("line 1 is not JSON; expected a clustertop recording header",
                                    f"{name}:1") from None
                yield schema.check_header(header, f"{name}:1")
                continue
            yield _parse(name, number, line)
    except (OSError, EOFError) as exc:
        if number == 0:
            raise UserError(f"cannot read recording: {exc}", name) from None
        print(f"clustertop: warning: {name}: stream ends early after line {number} ({exc}); "
              "using the complete lines", file=sys.stderr)
        return
    finally:
        if source != "-":
            stream.close()
    if number == 0:
        raise UserError("is empty; expected a clustertop recording", name)
    if pending is not None:
        num, line = pending
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            print(f"clustertop: warning: {name}:{num}: last line is truncated; using the {num - 1} complete lines",
                  file=sys.stderr)
            return
        yield event if num > 1 else schema.check_header(event, f"{name}:1")


def _parse(name: str, number: int, line: bytes) -> dict[str, Any]:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise UserError(f"line is not valid JSON ({exc.msg}); the recording is corrupt", f"{name}:{number}") from None
    if not isinstance(event, dict) or "type" not in event or "t" not in event:
        raise UserError("expected an event object with \"t\" and \"type\"", f"{name}:{number}")
    return event
