"""Lines a fold of a whole stream passes over without parsing them (Reader.fold).

Folding a step replaces its job's figures, so of the steps between two other events only each job's last
counts; and an event the state has no use for (a power swing, a checkpoint's start) changes nothing but its
time. A 54-day recording is nine tenths steps. The reader checks every line, but a line of a shape
(engine/stream/checks.py: its bytes with every digit made 0) already parsed and walked needs no parse to be
checked, when the shape leaves nothing to its digits:

- JSON: a line of the same non-digit bytes as a valid line is valid but for a number's leading zero (the
  one rule of the grammar on digits) and orjson's limits: a number with an exponent (past a double: an error)
  or of 19 digits or more (past 64 bits: a float). Shapes with either are parsed; leading zeros are looked up
  at the digits that start an integer part of two digits or more (`zeros`).
- Its meaning: its "type" and a step's "job" are fixed by the non-digit bytes when they have no digit, and
  "t" is the first key (up to the first comma) when the line is the canonical form of its event (orjson.dumps:
  no spaces, no key twice).
- Its time: lines whose "t" (non-negative, no exponent, no leading zero) has as many digits before its point
  (`layout`) order by their time as by their bytes from "t" on, the comma after it being below the point and
  the digits (an equal time may order either way); else the digits are read as orjson reads them (an int, or
  the double nearest the decimal).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container
from operator import itemgetter
from typing import Any, NamedTuple

import orjson

from . import schema

# a string (no escapes: checks.remember keeps no shape with one) or a number, its integer part grouped
_TOKEN = re.compile(rb'"[^"]*"|-?(0+)(\.0+)?([eE][-+]?0+)?')
_TIME = re.compile(rb"0+(\.0+)?")
_DIGIT = re.compile(r"[0-9]")
_PREFIX = b'{"t":'
MAX_DIGITS = 19                   # runs of digits this long are parsed (past 64 bits an int is a float)
_NONE = itemgetter(slice(0, 0))   # no digit (b"")


class Passable(NamedTuple):
    """How a line of one shape folds without its parse: the key it waits under until the next line that is
    parsed (a step's job; None for an event the fold has no use for), its time's layout (the line's bytes up
    to its time's point or comma, digits made 0), and a getter of the first digits of its integer parts of two
    digits or more (a 48, "0", among them: the line is not JSON)."""

    key: str | None
    layout: bytes
    zeros: Callable[[bytes], Container[int]]


def passable(event: Any, line: bytes, line_shape: bytes, used: bool) -> Passable | None:
    """How later lines of `line_shape` fold unparsed, or None (they are parsed). `event` is `line` parsed
    and checked, `line_shape` a shape checks.EventChecks.known holds; `used`: whether the state folds events
    of its type (but for a step)."""
    if type(event) is not dict or type(event.get("type")) is not str or _DIGIT.search(event["type"]):
        return None
    key = None
    if event["type"] == schema.STEP:
        key = event.get("job")
        if type(key) is not str or _DIGIT.search(key):
            return None
    elif used:
        return None
    if not line.startswith(_PREFIX) or b"0" * MAX_DIGITS in line_shape:
        return None
    end = line_shape.find(b",", len(_PREFIX))
    time = _TIME.fullmatch(line_shape, len(_PREFIX), end) if end > 0 else None
    if time is None or orjson.dumps(event) != line:
        return None
    starts = []
    for token in _TOKEN.finditer(line_shape):
        if token[3] is not None:
            return None
        if token[1] is not None and len(token[1]) > 1:
            starts.append(token.start(1))
    zeros = itemgetter(*starts, starts[0]) if starts else _NONE     # (two or more: always a tuple)
    return Passable(key, line_shape[:time.start(1) if time[1] else end], zeros)


# What the reader's loop holds for a line of a shape not passable: parse it (its "zeros" hold a "0").
PARSED = Passable(None, b"", lambda line: b"0")


def time_of(line: bytes) -> int | float:
    """The "t" of a line of a Passable shape as orjson parses it."""
    digits = line[len(_PREFIX):line.index(b",", len(_PREFIX))]
    return float(digits) if b"." in digits else int(digits)
