"""Prometheus HTTP API results: range-query dumps (`/api/v1/query_range`, resultType "matrix") read as a
stream of series, and instant-query answers (`/api/v1/query`, resultType "vector").

A dump is never loaded whole: a quick pass over its raw bytes (scan) checks that it is a matrix and finds its
time span, series count and step; then ijson's C parser yields one series at a time, so memory holds one
series and the grid of the current window (engine/telemetry/importer.py), whatever the file's size. Gzip dumps
(`.json.gz`, by magic bytes) are read the same way. Anything wrong ends in one UserError naming the file.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import ijson
import numpy as np
import orjson

from ..config.errors import UserError
from ..config.infile import open_input

CHUNK = 8 << 20
MAX_SERIES_BYTES = 64 << 20       # one series' JSON (labels and points): about 2.5 million points
MAX_TAIL = 1 << 20                 # JSON after the result array (warnings) read whole to check it
MAX_LABEL = 256                    # characters of a label value kept for messages and host names
VALUES_KEY = b'"values":'
_TYPE = re.compile(rb'"resultType"\s*:\s*"([^"]{0,40})"')
_STATUS = re.compile(rb'"status"\s*:\s*"([^"]{0,40})"')
_ERROR = re.compile(rb'"error"\s*:\s*"((?:[^"\\]|\\.){0,300})"')
_ERROR_TYPE = re.compile(rb'"errorType"\s*:\s*"([^"]{0,40})"')
EXPECTED = "expected the JSON of a Prometheus range query (/api/v1/query_range: resultType \"matrix\")"


def open_binary(path: str) -> BinaryIO | gzip.GzipFile:
    """The dump's bytes (inflated when gzip); UserError unless it is a regular, readable file (infile.py)."""
    if path == "-":
        raise UserError("a dump is read twice (a quick scan, then the series); expected a file, not stdin",
                        path)
    raw = open_input(path, "a .json dump of /api/v1/query_range")
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise UserError(f"cannot read: {exc.strerror}", path) from None
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


def _read(stream: BinaryIO | gzip.GzipFile, size: int, path: str) -> bytes:
    try:
        return stream.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"cannot read: {exc}; the file is damaged", path) from None


@dataclass
class DumpInfo:
    """What a quick pass over a dump found: its first and last timestamps (unix seconds), the step between its
    first two points, and how many series it holds."""

    path: str
    start: float
    end: float
    step: float | None
    series: int


def _number(data: bytes, path: str) -> float:
    try:
        value = float(data.strip().strip(b'"'))
    except ValueError:
        raise UserError(f"timestamp {data[:30]!r} is not a number; {EXPECTED}", path) from None
    if not math.isfinite(value):
        raise UserError(f"timestamp {data[:30]!r} is not finite; {EXPECTED}", path)
    return value


def _check_head(head: bytes, path: str) -> None:
    status = _STATUS.search(head)
    if status is not None and status.group(1) != b"success":
        err = _ERROR.search(head)
        kind = _ERROR_TYPE.search(head)
        text = orjson.loads(b'"' + err.group(1) + b'"') if err else "no message"
        label = kind.group(1).decode(errors="replace") if kind else status.group(1).decode(errors="replace")
        raise UserError(f"holds a Prometheus error ({label}): {str(text)[:200]}; {EXPECTED}", path)
    found = _TYPE.search(head)
    if found is not None and found.group(1) != b"matrix":
        raise UserError(f"resultType is {found.group(1).decode(errors='replace')!r}; {EXPECTED}", path)


_FIRST = re.compile(rb'"values"\s*:\s*\[\s*\[\s*([^,\]]{1,40}),\s*"[^"]{0,64}"\s*\]'
                    rb'(?:\s*,\s*\[\s*([^,\]]{1,40}),)?')


def scan(path: str) -> DumpInfo:
    """A quick pass over the raw bytes (no JSON objects built): UserError for what is plainly not a matrix.
    Each series' first points are found by a regular expression, its last point just before the next
    series."""
    with open_binary(path) as stream:
        data = _read(stream, CHUNK, path)
        if not data.lstrip()[:1] == b"{":
            raise UserError(f"does not start with a JSON object; {EXPECTED}", path)
        _check_head(data[:65536], path)
        if _TYPE.search(data[:65536]) is None:
            raise UserError(f"has no resultType in its first 64 KB; {EXPECTED}", path)
        start, end, step, count = math.inf, -math.inf, math.inf, 0
        while True:
            chunk = _read(stream, CHUNK, path) if data else b""
            eof = not chunk
            matches = list(_FIRST.finditer(data))
            last = len(matches) if eof else len(matches) - 1     # the last one's end is in the next chunk
            for i in range(max(0, last)):
                m = matches[i]
                first = _number(m.group(1), path)
                known = first
                if m.group(2) is not None:
                    known = _number(m.group(2), path)
                    step = min(step, known - first)
                start = min(start, first)
                stop = matches[i + 1].start() if i + 1 < len(matches) else len(data)
                if stop - m.start() > MAX_SERIES_BYTES:
                    raise UserError(f"series {count + 1} is over {MAX_SERIES_BYTES >> 20} MB of JSON; "
                                    "expected a range query of at most a few million points per series", path)
                point = data.rfind(b"[", m.start() + 8, stop)
                comma = data.find(b",", point, stop) if point >= 0 else -1
                try:             # the last point's time (not one when the next series is empty: "values": [])
                    end = max(end, known, _number(data[point + 1:comma], path) if comma > 0 else known)
                except UserError:
                    end = max(end, known)
                count += 1
            if eof:
                break
            keep = matches[-1].start() if matches else max(0, len(data) - 4096)
            if len(data) - keep > MAX_SERIES_BYTES:
                raise UserError(f"series {count + 1} is over {MAX_SERIES_BYTES >> 20} MB of JSON; expected a "
                                "range query of at most a few million points per series", path)
            data = data[keep:] + chunk
    if count == 0:
        raise UserError(f"holds no series with values; {EXPECTED}", path)
    return DumpInfo(path, start, max(end, start), step if math.isfinite(step) and step > 0 else None, count)


@dataclass
class Series:
    """One series of a range query: its labels, its timestamps (unix s, float64) and values (float64; NaN for
    Prometheus's NaN and for infinities, which no DCGM gauge means)."""

    labels: dict[str, str]
    t: np.ndarray
    v: np.ndarray


def _label(value: Any) -> str:
    return value[:MAX_LABEL] if isinstance(value, str) else str(value)[:MAX_LABEL]


def series(path: str, wanted: frozenset[str] | None = None) -> Iterator[Series]:
    """Every series of a dump, one at a time
    (series of other metrics than `wanted` are skipped unconverted)."""
    number = 0
    try:
        for item in _items(path):
            number += 1
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) \
                    or not isinstance(item.get("values"), (list, np.ndarray)):
                raise UserError(f'series {number} is not {{"metric": {{...}}, "values": [[t, "v"], ...]}}; '
                                f"{EXPECTED}", path)
            labels = {str(k)[:MAX_LABEL]: _label(v) for k, v in item["metric"].items()}
            if wanted is not None and labels.get("__name__") not in wanted:
                continue
            values = item["values"]
            if isinstance(values, np.ndarray):
                v = values[:, 1].copy()
                v[~np.isfinite(v)] = np.nan
                yield Series(labels, values[:, 0].copy(), v)
            else:
                yield _convert(labels, values, number, path)
    except ijson.JSONError as exc:
        text = exc.args[0] if exc.args else ""
        text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        # ijson's first line says what is wrong; the next ones quote the file (garbage, control bytes)
        why = "".join(c for c in (text.strip().splitlines() or ["?"])[0][:120] if c.isprintable())
        raise UserError(f"is not valid JSON after series {number} ({why}); {EXPECTED}", path) from None
    except (OSError, EOFError, zlib.error) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise UserError(f"cannot read after series {number}: {why}; the file is damaged", path) from None


class _Fallback(Exception):
    """The fast path met something it does not take whole: ijson reads the rest."""


def _items(path: str) -> Iterator[Any]:
    """The dump's series as parsed JSON, in order. Fast path: Prometheus writes compact JSON, so a series ends
    at the first `]]}` after its start; that slice is handed to orjson (five times ijson's speed), and a slice
    that is not one whole JSON object (the `]]}` was inside a label value, an empty series, spaces from a
    pretty printer) hands the rest of the file to ijson's streaming parser, which skips the series already
    given."""
    given = 0
    try:
        for item in _fast_items(path):
            given += 1
            yield item
        return
    except _Fallback:
        pass
    with open_binary(path) as stream:
        for k, item in enumerate(ijson.items(stream, "data.result.item", use_float=True)):
            if k >= given:
                yield item


def _parse(data: bytes, loads: Any) -> Any:
    """One series' JSON. Its points' values are quoted strings ("12.5"); with the quotes taken out of the
    points orjson reads them as numbers, straight into an (n, 2) array. Points it cannot read so ("NaN",
    "+Inf") are read the ordinary way."""
    cut = data.find(VALUES_KEY)
    if cut > 0:
        try:
            head = loads(data[:cut].rstrip().rstrip(b",") + b"}")
            points = loads(data[cut + len(VALUES_KEY):-1].replace(b'"', b""))
            if isinstance(head, dict) and isinstance(points, list):
                array = np.asarray(points, dtype=np.float64)
                if array.ndim == 2 and array.shape[1] == 2:
                    head["values"] = array
                    return head
        except (orjson.JSONDecodeError, ValueError, TypeError):
            pass
    return loads(data)


_RESULT = re.compile(rb'"result"\s*:\s*\[')


def _fast_items(path: str) -> Iterator[Any]:
    with open_binary(path) as stream:
        buf, pos, eof = _read(stream, CHUNK, path), 0, False

        def more() -> None:
            """Drop what was read, append the next chunk."""
            nonlocal buf, pos, eof
            chunk = _read(stream, CHUNK, path)
            eof = not chunk
            buf, pos = buf[pos:] + chunk, 0

        found = _RESULT.search(buf)
        if found is None:
            raise _Fallback
        pos = found.end()
        before = buf[:pos]
        while True:
            while pos >= len(buf) and not eof:
                more()
            head = buf[pos:pos + 1]
            if head == b"]":                             # the end of the result array: the rest of the
                while not eof and len(buf) - pos <= MAX_TAIL:        # file closes the object, and what
                    more()                                          # came before the result with it
                try:
                    orjson.loads(before + buf[pos:])
                except orjson.JSONDecodeError:
                    raise _Fallback from None            # ijson says where it is not JSON
                return
            if head != b"{":
                raise _Fallback
            end = buf.find(b"]]}", pos)
            while end < 0 and not eof:
                if len(buf) - pos > MAX_SERIES_BYTES:
                    raise UserError(f"a series is over {MAX_SERIES_BYTES >> 20} MB of JSON; expected a range "
                                    "query of at most a few million points per series", path)
                more()
                end = buf.find(b"]]}", pos)
            if end < 0:
                raise _Fallback
            try:
                yield _parse(buf[pos:end + 3], orjson.loads)
            except orjson.JSONDecodeError:
                raise _Fallback from None
            pos = end + 3
            while pos >= len(buf) and not eof:
                more()
            if buf[pos:pos + 1] == b",":
                pos += 1
            elif buf[pos:pos + 1] != b"]":
                raise _Fallback


def _convert(labels: dict[str, str], values: list[Any], number: int, path: str) -> Series:
    n = len(values)
    try:
        t = np.fromiter((p[0] for p in values), np.float64, n)
        v = np.fromiter((float(p[1]) for p in values), np.float64, n)
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        name = labels.get("__name__", "?")
        raise UserError(f'series {number} ({name}) has a point that is not [timestamp, "value"]; {EXPECTED}',
                        path) from None
    v[~np.isfinite(v)] = np.nan
    if not np.isfinite(t).all():
        raise UserError(f"series {number} has a timestamp that is not finite; {EXPECTED}", path)
    return Series(labels, t, v)


def evaluated_at(body: bytes) -> float | None:
    """The evaluation time of an instant query's answer (every result carries it: the time asked about, not
    the time its sample was scraped; `timestamp(M)` gives that), or None when it has no result."""
    try:
        t = float(orjson.loads(body)["data"]["result"][0]["value"][0])
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError):
        return None
    return t if math.isfinite(t) else None


def vector(body: bytes, where: str) -> list[tuple[dict[str, str], float]]:
    """The samples of an instant query's answer (resultType "vector"): (labels, value), NaN kept as NaN."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UserError(f"answer is not JSON ({exc.msg}); expected the Prometheus HTTP API", where) from None
    if not isinstance(doc, dict):
        raise UserError("answer is not a JSON object; expected the Prometheus HTTP API", where)
    if doc.get("status") != "success":
        raise UserError(f"Prometheus answered an error ({_label(doc.get('errorType', doc.get('status')))}): "
                        f"{_label(doc.get('error', 'no message'))[:200]}", where)
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or \
            not isinstance(data.get("result"), list):
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise UserError(f"resultType is {_label(kind)!r}; expected \"vector\" (an instant query)", where)
    out = []
    for item in data["result"]:
        try:
            labels = {str(k)[:MAX_LABEL]: _label(v) for k, v in item["metric"].items()}
            value = float(item["value"][1])
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            raise UserError('a result is not {"metric": {...}, "value": [t, "v"]}; expected the Prometheus '
                            "HTTP API", where) from None
        out.append((labels, value if math.isfinite(value) else math.nan))
    return out
