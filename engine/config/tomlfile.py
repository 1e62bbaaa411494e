"""TOML files: reading with one-line errors, finding the line a key sits on, and writing (tomli-w)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from .errors import UserError

MAX_FILE_BYTES = 4 * 1024 * 1024


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """The parsed table and the text of a TOML file; UserError naming the file (and line) otherwise."""
    where = str(path)
    if path.is_dir():
        raise UserError("is a directory; expected a .toml scenario file", where)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"is {size} bytes; a scenario file is expected to be under {MAX_FILE_BYTES} bytes",
                            where)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError("no such file", where) from None
    except PermissionError:
        raise UserError("permission denied", where) from None
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}", where) from None
    if b"\x00" in raw:
        raise UserError("is a binary file; expected a UTF-8 TOML text file", where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"is not UTF-8 text (byte {exc.start}); expected a UTF-8 TOML file", where) from None
    if not text.strip():
        raise UserError("is empty; expected a TOML scenario (name, [cluster], [[jobs]])", where)
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
