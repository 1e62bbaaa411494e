"""Reading event streams: files (plain or gzip, by magic bytes), stdin and the live engine's pipe.

One reader for every source. Streaming, in constant memory: bytes are read in chunks (gzip inflated with zlib
member by member, so concatenated members and a stream cut short both work), split into lines, parsed with
orjson once, checked (engine/stream/checks.py) and folded into a ClusterState by the one reducer
(ClusterState.apply) or handed on as parsed events.

Errors: a truncated last line (a recorder killed mid-write) is a warning and the complete prefix is used; so
is a gzip stream that ends early. Any other bad line is a UserError naming the line; a header with a newer
schema_version is a UserError saying so. Never a traceback.

Seeking is the dashboard's (tui/index.py): its index keeps the events this reader parsed.
"""

from __future__ import annotations

import io
import sys
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import takewhile
from typing import IO, Any, Self, cast

import orjson

from ..config.errors import UserError, escape
from ..config.infile import open_input
from . import schema
from .checks import MAX_SHAPE_BYTES, MAX_SHAPES, SHAPE, EventChecks, header_problem
from .skipping import PARSED, Passable, passable, time_of
from .state import ClusterState

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20
MAX_LINE_BYTES = schema.MAX_LINE_BYTES
Warn = Callable[[str], None]


def warn_stderr(message: str) -> None:
    print(f"clustertop: warning: {escape(message)}", file=sys.stderr)


EXPECTED = "a .jsonl or .jsonl.gz recording"


def _open_raw(source: str | IO[bytes], expected: str = EXPECTED) -> tuple[IO[bytes], str, bool]:
    """(buffered binary stream, display name, whether we opened it and must close it). A path must be a
    regular file ('-' is stdin): engine/config/infile.py."""
    if not isinstance(source, str):
        raw = source
        name = getattr(source, "name", "<stream>")
        owned = False
    else:
        raw = open_input(source, expected)
        name, owned = ("<stdin>", False) if source == "-" else (source, True)
    if not hasattr(raw, "peek"):
        # typing.IO declares no readinto, which BufferedReader's stubs require and every binary stream has
        raw = io.BufferedReader(raw)  # type: ignore[type-var]
    return raw, str(name), owned


def open_lines(source: str, expected: str) -> Lines:
    """The complete lines of a file (plain or gzip) or '-', bounded as Lines bounds them; close with
    .close()."""
    raw, name, owned = _open_raw(source, expected)
    return Lines(raw, name, owned=owned)


class Lines:
    """Complete lines (without their newline) of a plain or gzip byte stream, in batches, in constant memory.

    After iteration, `count` is the number of complete lines, `tail` the bytes of an unterminated last line.
    """

    def __init__(self, raw: IO[bytes], name: str, number: int = 0, owned: bool = False) -> None:
        self.raw = raw
        self.owned = owned
        self.name = name
        self.count = number            # line number of the last line handed out
        self.tail = b""
        self.ended_early = False        # a compressed stream that stops mid-member (a writer killed)
        try:
            self.gzip = raw.peek(2)[:2] == GZIP_MAGIC  # type: ignore[attr-defined]
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror}", name) from None
        self._read = getattr(raw, "read1", raw.read)

    def close(self) -> None:
        if self.owned:
            self.raw.close()

    def _raw_chunk(self) -> bytes:
        """The next bytes of the file as stored (b"" at its end); a read error is one line."""
        try:
            return self._read(CHUNK)
        except OSError as exc:
            raise UserError(f"cannot read after line {self.count}: {exc.strerror}", self.name) from None

    def _chunks(self) -> Iterator[bytes]:
        if not self.gzip:
            while chunk := self._raw_chunk():
                yield chunk
            return
        d: Any = None
        while chunk := self._raw_chunk():
            while chunk:
                if d is None:
                    d = zlib.decompressobj(31)
                try:
                    out = d.decompress(chunk, CHUNK)
                    if out:
                        yield out
                    while d.unconsumed_tail and not d.eof:
                        out = d.decompress(d.unconsumed_tail, CHUNK)
                        if out:
                            yield out
                except zlib.error as exc:
                    raise UserError(f"corrupt compressed data after line {self.count} ({exc}); the recording "
                                    "is damaged", self.name) from None
                if d.eof:
                    chunk = d.unused_data
                    d = None
                    if chunk.strip(b"\0") == b"":    # zero padding after the last member
                        chunk = b""
                else:
                    chunk = b""
        if d is not None:
            try:
                rest = d.flush()
            except zlib.error:
                rest = b""
            if rest:
                yield rest
            self.ended_early = True

    def batches(self) -> Iterator[list[bytes]]:
        """Lists of complete lines; `count` is updated before each list is handed out."""
        carry: list[bytes] = []
        carried = 0
        for chunk in self._chunks():
            if carry:
                carry.append(chunk)
                carried += len(chunk)
                if b"\n" not in chunk:
                    if carried > MAX_LINE_BYTES:
                        raise self._too_long()
                    continue
                chunk = b"".join(carry)
                carry = []
            lines = chunk.split(b"\n")
            last = lines.pop()
            carried = len(last)
            if last:
                carry.append(last)
            # (only the first can be: the others are in one chunk)
            if lines and len(lines[0]) > MAX_LINE_BYTES:
                raise self._too_long()
            if lines:
                self.count += len(lines)
                yield lines
        self.tail = b"".join(carry)

    def __iter__(self) -> Iterator[bytes]:
        for batch in self.batches():
            yield from batch

    def _too_long(self) -> UserError:
        return UserError(f"line {self.count + 1} is longer than {MAX_LINE_BYTES:,} bytes, the most a line of "
                         "a clustertop stream holds", self.name)


def _bad(name: str, number: int, message: str) -> UserError:
    return UserError(message, f"{name}:{number}")


def _not_json(exc: orjson.JSONDecodeError) -> str:
    return f"line is not valid JSON ({exc.msg}); the recording is corrupt"


class Reader:
    """One recording or stream: its header, then its events or a folded ClusterState."""

    def __init__(self, source: str | IO[bytes], warn: Warn | None = None, name: str | None = None) -> None:
        raw, self.name, self._owned = _open_raw(source)
        if name is not None:          # an already-open stream's display name (a pipe's is a number)
            self.name = name
        self.raw = raw
        self.warn = warn or warn_stderr
        self.lines = Lines(raw, self.name)
        self._batches = self.lines.batches()
        self._first: list[bytes] = []
        self.header = self._read_header()

    def close(self) -> None:
        if self._owned:
            self.raw.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_header(self) -> dict[str, Any]:
        try:
            for batch in self._batches:
                self._first = batch[1:]
                return self._parse_header(batch[0])
        except BaseException:
            self.close()
            raise
        tail, self.lines.tail = self.lines.tail, b""
        if tail:
            return self._parse_header(tail)
        self.close()
        raise UserError("is empty; expected a clustertop recording", self.name)

    def _parse_header(self, line: bytes) -> dict[str, Any]:
        try:
            header = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.close()
            if self.lines.ended_early and not self.lines.count:
                raise UserError("line 1 is not JSON: the compressed stream ends inside it (the writer was "
                                "stopped before its first line was out); nothing to read",
                                f"{self.name}:1") from None
            raise UserError("line 1 is not JSON; expected a clustertop recording header",
                            f"{self.name}:1") from None
        try:
            header = schema.check_header(header, f"{self.name}:1")
            why = header_problem(header)
            if why:
                raise UserError(f"header {why}", f"{self.name}:1")
        except UserError:
            self.close()
            raise
        self.checks = EventChecks(header)
        return header

    def _all_batches(self) -> Iterator[list[bytes]]:
        if self._first:
            first, self._first = self._first, []
            yield first
        yield from self._batches

    def _bad_line(self, batch: list[bytes], line: bytes, message: str) -> UserError:
        """The error of a line of `batch`, naming its number. Lines are found by identity: split makes a new
        object of each, but for the empty line and those of one byte, whose first is the first to fail."""
        number = self.lines.count - len(batch) + next(i for i, x in enumerate(batch) if x is line) + 1
        return _bad(self.name, number, message)

    def _problem(self, event: Any, last: float) -> str | None:
        """What is wrong with a parsed line as the next event (the full walk of engine/stream/checks.py, then
        its time), or None."""
        why = self.checks.problem(event)
        if why is None and event["t"] < last:
            why = f"time goes backwards ({event['t']} after {last})"
        return why

    def events(self) -> Generator[dict[str, Any], None, None]:
        """Every event after the header, in order, parsed once and checked against the schema (and t never
        decreases). A line of a shape already checked (checks.SHAPE) passes on its time alone."""
        last = float("-inf")
        loads, checks, translate, table = orjson.loads, self.checks, bytes.translate, SHAPE
        longest = MAX_SHAPE_BYTES
        known, passed = checks.known, b"\0"
        try:
            for batch in self._all_batches():
                for line in batch:
                    try:
                        event = loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise self._bad_line(batch, line, _not_json(exc)) from None
                    line_shape = translate(line, table) if len(line) <= longest else line
                    if line_shape != passed:
                        if line_shape is line or line_shape not in known:
                            why = self._problem(event, last)
                            if why:
                                raise self._bad_line(batch, line, why)
                            checks.remember(event, line, line_shape)
                            last = event["t"]
                            yield event
                            continue
                        passed = line_shape
                    t = event["t"]
                    if t < last:
                        raise self._bad_line(batch, line, f"time goes backwards ({t} after {last})")
                    last = t
                    yield event
            event = self._tail(last)
            if event is not None:
                yield event
        finally:
            self.close()

    def applied(self, state: ClusterState) -> Iterator[dict[str, Any]]:
        """Fold every event into `state` and yield it afterwards (for consumers that need both)."""
        apply = state.apply
        for event in self.events():
            apply(event)
            yield event

    def fold(self, state: ClusterState | None = None, until: float | None = None) -> ClusterState:
        """Fold every event (or those with t <= until) into a ClusterState. Without `until`, steps that a
        later step of their job replaces before any other event, and events the state has no use for, are
        checked but not parsed (engine/stream/skipping.py)."""
        state = state if state is not None else ClusterState(self.header)
        events = self.events() if until is not None else self._folded(state.uses)
        try:
            state.fold(events if until is None else takewhile(lambda event: event["t"] <= until, events))
        finally:
            events.close()
        return state

    def _folded(self, uses: Callable[[str], bool]) -> Generator[dict[str, Any], None, None]:
        """The events a fold of the whole stream needs, in order, every line checked: events() but for lines
        of a shape skipping.passable passes (`uses(type)`: whether the state folds events of the type). Of
        those only each job's last step before a line that is parsed, and the stream's last line, are parsed
        and handed on."""
        translate, table, longest = bytes.translate, SHAPE, MAX_SHAPE_BYTES
        shapes: dict[bytes, Passable | None] = {}        # shapes checked: how they fold unparsed
        pending: dict[str | None, bytes] = {}            # job (None: no use) -> its last line passed over
        current: bytes | None = None                    # the shape of the last line passed over
        key, layout, zeros = PARSED                      # how it folds
        last: int | float | None = float("-inf")        # time of the last line (None: read it from last_line)
        last_line, last_layout = b"", b""                # the last line if passed over, its time's layout
        try:
            for batch in self._all_batches():
                for line in batch:
                    line_shape = translate(line, table) if len(line) <= longest else line
                    if line_shape != current:
                        hit = shapes.get(line_shape) if line_shape is not line else None
                        current, (key, layout, zeros) = (None, PARSED) if hit is None else (line_shape, hit)
                    if 48 not in zeros(line):     # no leading 0 (PARSED: any line)
                        # (the time of a line of the last one's layout, no less in bytes, is no less)
                        if layout == last_layout and line >= last_line:
                            last = None
                        else:
                            t = time_of(line)
                            before = last if last is not None else time_of(last_line)
                            if t < before:
                                raise self._bad_line(batch, line,
                                                     f"time goes backwards ({t} after {before})")
                            last = t
                        pending[key] = line
                        last_line, last_layout = line, layout
                        continue
                    if pending:                   # each job's last step (not an event of no use)
                        for kept_key, kept in pending.items():
                            if kept_key is not None:
                                yield orjson.loads(kept)
                        pending.clear()
                    before = last if last is not None else time_of(last_line)
                    event, known = self._parsed(batch, line, line_shape, before)
                    last, last_line, last_layout = event["t"], b"", b""
                    if known and line_shape not in shapes and len(shapes) < MAX_SHAPES:
                        shapes[line_shape] = passable(event, line, line_shape, uses(event["type"]))
                    yield event
            yield from self._pending(pending, last_line)
            tail = self._tail(last if last is not None else time_of(last_line))
            if tail is not None:
                yield tail
        finally:
            self.close()

    @staticmethod
    def _pending(pending: dict[str | None, bytes], final: bytes) -> Iterator[dict[str, Any]]:
        """At the stream's end, the lines passed over that a fold keeps, parsed (checked already): each job's
        last step, and `final` (the stream's last line, if passed over) last, the fold's time being its last
        event's."""
        lines = sorted((line for key, line in pending.items() if key is not None or line is final),
                       key=lambda line: line is final)
        pending.clear()
        for line in lines:
            yield orjson.loads(line)

    def _parsed(self, batch: list[bytes], line: bytes, line_shape: bytes,
                last: float) -> tuple[dict[str, Any], bool]:
        """A line parsed and checked as events() checks it after `last`, and whether its shape was known
        before (a line of a known shape passes on its time alone)."""
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise self._bad_line(batch, line, _not_json(exc)) from None
        if line_shape is line or line_shape not in self.checks.known:
            why = self._problem(event, last)
            if why:
                raise self._bad_line(batch, line, why)
            self.checks.remember(event, line, line_shape)
            return event, False
        if event["t"] < last:
            raise self._bad_line(batch, line, f"time goes backwards ({event['t']} after {last})")
        return event, True

    def _tail(self, last: float) -> dict[str, Any] | None:
        """The unterminated last line: used if it is a whole event, a warning if it is cut short, an error if
        it is a whole line that breaks the schema."""
        tail = self.lines.tail
        if not tail:
            if self.lines.ended_early:
                self.warn(f"{self.name}: compressed stream ends early (the writer was stopped?); using the "
                          f"{self.lines.count} complete lines")
            return None
        number = self.lines.count + 1
        try:
            event = orjson.loads(tail)
        except orjson.JSONDecodeError:
            pass                          # cut short
        else:
            why = self._problem(event, last)
            if why is None:
                return cast(dict[str, Any], event)      # checked above: an event object
            raise _bad(self.name, number, why)
        cause = (" (the compressed stream ends early: the writer was stopped?)" if self.lines.ended_early
                 else "")
        self.warn(f"{self.name}:{number}: last line is truncated{cause}; using the {number - 1} complete "
                  "lines")
        return None


def iter_events(source: str | IO[bytes], warn: Warn | None = None,
                name: str | None = None) -> Iterator[dict[str, Any]]:
    """The header, then every event of a recording or stream, in order. UserError on a bad recording.

    `source` may be an already-open binary stream (a pipe: read with read1, so events arrive as they are
    written); `name` then names it in errors."""
    reader = Reader(source, warn, name)
    yield reader.header
    yield from reader.events()


def fold(source: str | IO[bytes], until: float | None = None, warn: Warn | None = None) -> ClusterState:
    """The ClusterState after every event of a recording (or those up to time `until`)."""
    return Reader(source, warn).fold(until=until)


def iter_lines_events(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Events from an in-process engine's lines (engine.sim.run.Run.lines()): the header is checked."""
    it = iter(lines)
    first = next(it, None)
    if first is None:
        raise UserError("the engine produced no header")
    yield schema.check_header(orjson.loads(first), "<engine>:1")
    for line in it:
        yield orjson.loads(line)
