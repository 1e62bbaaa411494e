"""Declarative checks of TOML tables: each key's type, range and choices, with one-line errors.

A spec maps key -> Field. `check_table` returns the table with defaults filled in, or raises UserError naming
the key path (and its line, when the TOML text is known).
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import UserError, has_unsafe, quote
from .tomlfile import locate

_MISSING = object()
_E = TypeVar("_E")            # a catalog's entry type
MAX_INT = 2**63 - 1           # the largest integer any key takes (a 64-bit seed)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Field:
    kind: str                     # "int" | "float" | "str" | "bool" | "table" | "any"
    default: Any = _MISSING       # _MISSING = required
    low: float | None = None      # inclusive lower bound
    high: float | None = None     # inclusive upper bound ("absurd size" guard)
    choices: tuple[str, ...] = ()
    auto: bool = False            # also accepts the string `word` ("auto")
    word: str = "auto"
    positive: bool = False        # strictly greater than zero
    parse: Callable[[Any], Any] | None = None   # converter for strings (durations); raises ValueError
    doc: str = ""
    lines: bool = False           # a string may hold newlines and tabs (a description); never other controls

    @property
    def required(self) -> bool:
        return self.default is _MISSING


def optional(kind: str, default: Any = None, **kw: Any) -> Field:
    return Field(kind, default=default, **kw)


_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
               "table": "a table"}


class Context:
    """Where values come from: the file name and its text, for error messages with a line number."""

    def __init__(self, file: str, text: str | None = None) -> None:
        self.file = file
        self.text = text

    def error(self, path: str, message: str) -> UserError:
        line = locate(self.text, path) if self.text else None
        where = f"{self.file}:{line}" if line else self.file
        return UserError(f"{path}: {message}", where)


def _describe(field: Field) -> str:
    if field.doc:
        return field.doc
    if field.choices:
        options = ", ".join(f'"{c}"' for c in field.choices)
        return f"one of {options}" + (f' or "{field.word}"' if field.auto else "")
    base = _TYPE_NAMES.get(field.kind, field.kind)
    if field.auto:
        base += f' or "{field.word}"'
    return base


def check_value(ctx: Context, path: str, field: Field, value: Any) -> Any:
    if field.auto and value == field.word:
        return field.word
    if field.parse is not None and isinstance(value, str):
        try:
            return field.parse(value)
        except ValueError as exc:
            raise ctx.error(path, str(exc)) from None
    kind = field.kind
    if kind == "any":
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise ctx.error(path, f"expected {_describe(field)}, got {_show(value)}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.error(path, f"expected {_describe(field)}, got {_show(value)}")
        value = float(value)
        if math.isnan(value):
            raise ctx.error(path, "NaN is not a valid value; expected a finite number")
        if math.isinf(value):
            raise ctx.error(path, "infinity is not a valid value; expected a finite number")
    elif kind == "str":
        if not isinstance(value, str):
            raise ctx.error(path, f"expected {_describe(field)}, got {_show(value)}")
        if has_unsafe(value.replace("\n", " ").replace("\t", " ") if field.lines else value):
            raise ctx.error(path, f"{quote(value[:60])} holds a control character; expected "
                            + ("text" if field.lines else "one line of plain text"))
        if field.choices and value not in field.choices:
            hint = did_you_mean(value, field.choices)
            raise ctx.error(path, f"unknown value {_show(value)}{hint}; expected {_describe(field)}")
    elif kind == "bool" and not isinstance(value, bool) or kind == "table" and not isinstance(value, dict):
        raise ctx.error(path, f"expected {_describe(field)}, got {_show(value)}")
    if kind == "int" and abs(value) > MAX_INT:
        raise ctx.error(path, f"{_show(value)} is too large; expected an integer of at most {MAX_INT:,}")
    if kind in ("int", "float"):
        if field.positive and value <= 0:
            raise ctx.error(path, f"must be greater than zero, got {value}")
        if field.low is not None and value < field.low:
            raise ctx.error(path, f"must be at least {_num(field.low)}, got {_num(value)}")
        if field.high is not None and value > field.high:
            raise ctx.error(path, f"{_num(value)} is beyond the supported maximum of {_num(field.high)}")
    return value


def check_table(ctx: Context, path: str, table: Any, spec: dict[str, Field],
                known: tuple[dict[str, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Check every key of `table` against `spec`; fill defaults; reject unknown and missing keys.

    `known`: a table checked before against the same spec and what that gave. A key whose value is the very
    same object is taken from it rather than checked again (check_value depends on the value alone): a sweep's
    points share all but the values they vary with the table they were built from.
    """
    if not isinstance(table, dict):
        raise ctx.error(path or "(top level)", f"expected a table, got {_show(table)}")
    if known is not None and known[0].keys() == table.keys():
        return _check_changed(ctx, path, table, spec, known)
    for key in table:
        if key not in spec:
            hint = did_you_mean(key, spec)
            raise ctx.error(_join(path, _key_text(key)),
                            f"unknown key{hint}; valid keys: {', '.join(sorted(spec))}")
    seen, done = known if known is not None else ({}, {})
    out: dict[str, Any] = {}
    for key, field in spec.items():
        if key in table:
            value = table[key]
            out[key] = done[key] if key in seen and seen[key] is value else \
                check_value(ctx, _join(path, key), field, value)
        elif field.required:
            raise ctx.error(_join(path, key) if path else key, f"missing required key ({_describe(field)})")
        else:
            out[key] = field.default
    return out


def _check_changed(ctx: Context, path: str, table: dict[str, Any], spec: dict[str, Field],
                   known: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """check_table of a table with the very keys of one checked before (`known`): no key unknown or missing,
    the values it shares taken from that result, the others checked in the spec's order (so the first bad one
    is the one check_table names)."""
    seen, done = known
    out = dict(done)
    changed = [key for key, value in table.items() if seen[key] is not value]
    if len(changed) > 1:
        order = list(spec)
        changed.sort(key=order.index)
    for key in changed:
        out[key] = check_value(ctx, _join(path, key), spec[key], table[key])
    return out


def array_of_tables(ctx: Context, path: str, raw: Any, expected: str) -> list[Any]:
    """[[path]] tables as a list (one [path] table is a list of one); none: []; else one clear error."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [raw]
    if not isinstance(raw, list):
        raise ctx.error(path, expected)
    return raw


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key_text(key: str) -> str:
    """A key the user wrote, as a key path shows it: bare when TOML allows it bare, else quoted (and escaped).
    (The spec's own keys are all bare.)"""
    return key if _BARE_KEY.fullmatch(key) else quote(key)


def did_you_mean(word: str, options: Any) -> str:
    """' (did you mean 'x'?)' for the closest option, or '' when none is close."""
    options = list(options)
    close = difflib.get_close_matches(str(word), options, n=1, cutoff=0.5)
    if not close:
        close = [o for o in options if str(o).startswith(str(word))][:1]
    return f" (did you mean {quote(close[0])}?)" if close else ""


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value if len(value) <= 60 else value[:60] + "...")
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"an integer of {len(str(abs(value))):,} digits"
    return f"{type(value).__name__} {quote(value)}"


def _num(value: float) -> str:
    if isinstance(value, int) and abs(value) > MAX_INT:
        return _show(value)
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def catalog_entry(ctx: Context, key: str, name: str, entries: dict[str, _E]) -> _E:
    """The catalog entry `name` of `entries` (GPUs, fabrics, models), or the one-line error naming `key`."""
    if name not in entries:
        hint = did_you_mean(name, entries)
        raise ctx.error(key, f"unknown name {name!r}{hint}; expected one of {', '.join(entries)}")
    return entries[name]


# ---- a sweep's memo of checked tables (engine/sweep): points share most tables with their base

Sections = dict[str, tuple[tuple[Any, ...], Any]]


def memo_section(sections: Sections | None, key: str, raws: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """`build()`, or what it gave for the very same raw tables (identity, not equality) when `sections`
    has it.

    A sweep parses thousands of points that share every table but the ones it varies (overrides.apply copies
    only what it sets): the tables a point shares with the base were validated by the first point that met
    them, a pure function of those tables, so the same objects are not checked again. Tables that differ (or
    any table when `sections` is None) are validated in full.
    """
    if sections is None:
        return build()
    hit = sections.get(key)
    if hit is not None and len(hit[0]) == len(raws) and all(map(operator.is_, hit[0], raws)):
        return hit[1]
    value = build()
    sections[key] = (raws, value)       # kept with its tables, so their ids stay theirs
    return value


def check_table_memo(sections: Sections | None, ctx: Context, path: str, table: Any,
                     spec: dict[str, Field]) -> dict[str, Any]:
    """check_table, given the last table checked at `path` and its result when `sections` keeps them: the
    values a sweep's point shares with it (the same objects) are not checked again, the others are."""
    if sections is None:
        return check_table(ctx, path, table, spec)
    memo = f"keys of {path}"
    hit = sections.get(memo)
    out = check_table(ctx, path, table, spec, (hit[0][0], hit[1]) if hit is not None else None)
    sections[memo] = ((table,), dict(out))       # a copy: the caller may fill in derived values
                                                 # (inference defaults)
    return out
