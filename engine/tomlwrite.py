"""Writing a raw scenario table back as TOML (the standard library reads TOML but does not write it).

Covers what scenario files hold: strings, integers, floats, booleans, arrays of those, tables and arrays of
tables (`[[jobs]]` with an inline `[jobs.model]`). Scalars come before sub-tables, as TOML requires.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(data: dict[str, Any], header: str = "") -> str:
    """TOML text of `data`, preceded by `header` as comment lines."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], prefix: list[str], table: dict[str, Any]) -> None:
    subtables: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, dict) or (isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
            subtables.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in subtables:
        path = ".".join(_key(k) for k in [*prefix, key])
        for item in value if isinstance(value, list) else [value]:
            lines.append("")
            lines.append(f"[[{path}]]" if isinstance(value, list) else f"[{path}]")
            _table(lines, [*prefix, key], item)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")
