"""TOML files: reading with one-line errors, finding the line a key sits on, and writing (tomli-w)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from .errors import UserError
from .infile import read_capped

MAX_FILE_BYTES = 4 * 1024 * 1024      # a scenario of 1,000 jobs is ~300 KB;
                                      # the standard parser reads 4 MB in ~2 s
MAX_NESTING = 16        # arrays and inline tables inside each other; a scenario needs 2
                        # (jobs = [{model = {...}}])
MAX_KEY_PARTS = 16      # parts of a key path (table header, dotted key, inline tables); a scenario needs 3
MAX_DIGITS = 40         # digits of a number: the largest any key takes (a 64-bit seed) has 19
EXPECTED = "a .toml scenario file"


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """The parsed table and the text of a TOML file; UserError naming the file (and line) otherwise.

    What the standard parser cannot take is refused before it runs: more than MAX_FILE_BYTES (counting what is
    read, not what stat says), nesting deeper than MAX_NESTING (it recurses), key paths longer than
    MAX_KEY_PARTS (it takes time and memory quadratic in them) and numbers longer than MAX_DIGITS.
    """
    where = str(path)
    raw = read_capped(where, MAX_FILE_BYTES, EXPECTED)
    if b"\x00" in raw:
        raise UserError("is a binary file; expected a UTF-8 TOML text file", where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"is not UTF-8 text (byte {exc.start}); expected a UTF-8 TOML file", where) from None
    if not text.strip():
        raise UserError("is empty; expected a TOML scenario (name, [cluster], [[jobs]])", where)
    check_structure(text, where)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", message)
        if m:
            message = message[: m.start()].strip()
            raise UserError(f"TOML syntax error: {message} (column {m.group(2)})",
                            f"{where}:{m.group(1)}") from None
        raise UserError(f"TOML syntax error: {message}", where) from None
    except (ValueError, RecursionError, MemoryError) as exc:      # what check_structure should have caught
        raise UserError(f"cannot parse: {type(exc).__name__}; expected {EXPECTED}", where) from None


# The tokens that matter for structure: strings and comments (skipped whole), brackets, '=', ',', '.',
# newlines.
_TOKEN = re.compile(r'''"""(?:[^"\\]|\\.|"(?!""))*+"""|\'\'\'(?:[^\']|\'(?!\'\'))*+\'\'\'|'''
                    r'''"(?:[^"\\\n]|\\.)*+"|\'[^\'\n]*+\''''
                    rf"|#[^\n]*+|[-+]?[0-9][0-9_]{{{MAX_DIGITS},}}|[\[\]{{}}=,.\n]", re.DOTALL)

_LONG_DIGITS = re.compile(rf"[0-9][0-9_]{{{MAX_DIGITS},}}")     # what a too long number's token starts with


def check_structure(text: str, where: str) -> None:
    """UserError (with the line) when TOML `text` nests arrays or inline tables deeper than MAX_NESTING, has a
    key path longer than MAX_KEY_PARTS or a number longer than MAX_DIGITS: a scan of its brackets, dots and
    '=' outside strings and comments, before the recursive parser sees it. A text with too few brackets, dots
    and digits in a row for any of these (most scenarios) is not scanned."""
    brackets = text.count("[") + text.count("{")
    if brackets <= MAX_NESTING and text.count(".") + brackets + 2 < MAX_KEY_PARTS and \
            _LONG_DIGITS.search(text) is None:
        # nesting needs more brackets than that; a key path's parts are at most its header's and keys' dots
        # plus one per key and per inline table it is in; a long number is that many digits in a row
        return
    stack: list[tuple[str, int]] = []   # open '[' or '{' of values, with the key path length outside them
    table = 0                           # parts of the current [table] header
    outer = 0                           # key path length the key being read adds to
    dots = 0                            # dots in the key (or header) being read
    context = "key"                     # "key" | "header" | "value" | "done" (after a value or a header)
    for m in _TOKEN.finditer(text):
        c = m.group()[0]
        if c in "\"'#":
            continue
        if c.isdigit() or c in "+-":
            if context == "value":
                raise _refuse(text, m.start(), where,
                              f"a number of {len(m.group()):,} digits; expected at most {MAX_DIGITS}")
        elif c == "\n":
            if not stack:
                context, dots, outer = "key", 0, table
        elif context == "header":
            if c == ".":
                dots += 1
                if dots >= MAX_KEY_PARTS:
                    raise _refuse(text, m.start(), where,
                                  f"a table header of more than {MAX_KEY_PARTS} parts; "
                                  f"expected at most {MAX_KEY_PARTS}")
            elif c == "]":
                table, context = dots + 1, "done"
        elif context == "key":
            if c == "[" and not stack:
                context, dots = "header", 0
            elif c == ".":
                dots += 1
                if outer + dots >= MAX_KEY_PARTS:
                    raise _refuse(text, m.start(), where,
                                  f"a key path of more than {MAX_KEY_PARTS} parts; expected "
                                  f"at most {MAX_KEY_PARTS}")
            elif c == "=":
                context, outer = "value", outer + dots + 1
        elif c in "[{":                 # a value, or what follows one
            stack.append((c, outer))
            if len(stack) > MAX_NESTING:
                raise _refuse(text, m.start(), where,
                              f"arrays or inline tables nested more than {MAX_NESTING} deep; "
                              f"expected at most {MAX_NESTING}")
            context, dots = ("key" if c == "{" else "value"), 0
        elif c in "]}" and stack:
            stack.pop()
            context, outer = "done", (stack[-1][1] if stack else table)
        elif c == "," and stack:
            context, dots, outer = ("key" if stack[-1][0] == "{" else "value"), 0, stack[-1][1]


def _refuse(text: str, at: int, where: str, what: str) -> UserError:
    return UserError(what, f"{where}:{text.count(chr(10), 0, at) + 1}")


_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\"-]+)\s*\]\]?")
_KEY = re.compile(r"^\s*\"?([A-Za-z0-9_.-]+?)\"?\s*=\s*(.*)$")
_INLINE_KEY = re.compile(r"[{,]\s*\"?([A-Za-z0-9_-]+)\"?\s*=")


def key_lines(text: str) -> dict[str, int]:
    """Map every key path in TOML `text` (``cluster.gpus``, ``jobs[0].tp``) to its 1-based line.

    Best effort, for error messages: follows [table] and [[array]] headers, dotted keys and inline tables
    written on one line.
    """
    where: dict[str, int] = {}
    counts: dict[str, int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            name = header.group(2).replace('"', "")
            if header.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                section = f"{name}[{counts[name]}]"
            else:
                first, _, rest = name.partition(".")
                section = f"{first}[{counts[first]}].{rest}" if first in counts and rest else name
            where.setdefault(section, number)
            continue
        key = _KEY.match(line)
        if not key:
            continue
        path = f"{section}.{key.group(1)}" if section else key.group(1)
        where.setdefault(path, number)
        for inner in _INLINE_KEY.finditer(key.group(2)):
            where.setdefault(f"{path}.{inner.group(1)}", number)
    return where


def locate(text: str, path: str) -> int | None:
    """1-based line of `path` in `text`, or of its closest enclosing table; None when not found."""
    lines = key_lines(text)
    while path:
        if path in lines:
            return lines[path]
        path = path.rpartition(".")[0] if "." in path else ""
    return None


def dumps(data: dict[str, Any], header: str = "") -> str:
    """TOML text of a raw scenario table, preceded by `header` as comment lines."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + tomli_w.dumps(data)
