"""`KEY=VALUE` overrides of a raw scenario table: parsing `--vary` flags, checking keys, applying values.

Keys are written as in the scenario format: `cluster.gpus`, `jobs[0].tp`, `jobs[1].model` (a catalog name),
`jobs[0].model.layers` (inside an inline model table), `faults.rate_scale`, `seed`. Values are typed like TOML
(`8` an integer, `7.0` a float, `true` a boolean, `"a b"` a string); a bare word that is not TOML
(`roce-400g`, `auto`, `6h`) is a string.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import catalog, cluster, job, scenario
from .errors import UserError
from .fields import Context, Field, check_value, did_you_mean

Path = tuple[str | int, ...]
DELETE = object()          # an override value that removes the key

_SECTIONS: dict[str, dict[str, Field]] = {
    "cluster": cluster.CLUSTER_SPEC,
    "faults": scenario.FAULTS_SPEC,
    "checkpoint": scenario.CHECKPOINT_SPEC,
    "variability": scenario.VARIABILITY_SPEC,
    "economics": catalog.ECONOMICS_SPEC,
}
_TOP = {k: f for k, f in scenario.TOP_SPEC.items() if k not in _SECTIONS and k not in ("jobs", "format")}
_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)(?:\[(\d+)\])?$")
_BARE = re.compile(r"^[A-Za-z0-9_.+:/-]+$")
MAX_VALUES = 100_000


@dataclass(frozen=True)
class Axis:
    """One `--vary` flag: a checked key, where it sits in the raw scenario table, and its typed values."""
    key: str
    path: Path
    values: tuple[Any, ...]


def every_key(data: dict[str, Any]) -> list[str]:
    """Every key a scenario with `data`'s jobs accepts, for "did you mean" hints."""
    keys = list(_TOP)
    for section, spec in _SECTIONS.items():
        keys += [f"{section}.{k}" for k in spec]
    for i in range(len(_jobs(data))):
        keys += [f"jobs[{i}].{k}" for k in job.JOB_SPEC]
    return keys


def parse_vary(flag: str, data: dict[str, Any]) -> Axis:
    """A `KEY=V1,V2,...` flag checked against the scenario format and the base scenario's raw table."""
    key, sep, text = flag.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--vary {flag!r}: expected KEY=V1,V2,... (e.g. jobs[0].tp=4,8)")
    path, field, key = check_key(key, data)
    tokens = split_values(text, key)
    values: list[Any] = []
    seen: list[Any] = []
    ctx = Context("--vary")
    for token in tokens:
        value = parse_value(token)
        checked = check_value(ctx, key, field, value)
        _check_catalog(key, path, value)
        if checked in seen:
            raise UserError(f"--vary {key}: the value {token} is given twice; expected distinct values")
        seen.append(checked)
        values.append(value)
    if len(values) > MAX_VALUES:
        raise UserError(f"--vary {key}: {len(values):,} values; expected at most {MAX_VALUES:,}")
    return Axis(key, path, tuple(values))


def check_key(key: str, data: dict[str, Any]) -> tuple[Path, Field, str]:
    """The raw-table path, the field and the canonical spelling of a scenario key; UserError when unknown."""
    segments = key.split(".")
    parsed = [_SEGMENT.match(s) for s in segments]
    if not all(parsed):
        raise UserError(f"--vary {key!r}: not a scenario key; expected a key such as cluster.gpus or "
                        "jobs[0].tp")
    names = [(m.group(1), None if m.group(2) is None else int(m.group(2))) for m in parsed if m]
    head, index = names[0]
    rest = [n for n, i in names[1:]]
    if any(i is not None for _, i in names[1:]) or (index is not None and head != "jobs"):
        raise _unknown(key, data)
    if head == "jobs":
        jobs = _jobs(data)
        if index is None:
            raise UserError(f"--vary {key}: jobs is an array of tables; "
                            f"expected jobs[N].{'.'.join(rest) or 'tp'}")
        if index >= len(jobs):
            raise UserError(f"--vary {key}: the scenario has {len(jobs)} job(s); "
                            f"expected an index below {len(jobs)}")
        canon = f"jobs[{index}]." + ".".join(rest)
        if len(rest) == 1 and rest[0] in job.JOB_SPEC:
            return ("jobs", index, rest[0]), job.JOB_SPEC[rest[0]], canon
        if len(rest) == 2 and rest[0] == "model":
            model = jobs[index].get("model") if isinstance(jobs[index], dict) else None
            if not isinstance(model, dict):
                raise UserError(f"--vary {key}: jobs[{index}].model is the catalog model {model!r}, "
                                f"not an inline table; expected jobs[{index}].model=NAME1,NAME2,...")
            if rest[1] in catalog.MODEL_SPEC:
                return ("jobs", index, "model", rest[1]), catalog.MODEL_SPEC[rest[1]], canon
        raise _unknown(key, data)
    if head in _SECTIONS and len(rest) == 1 and rest[0] in _SECTIONS[head]:
        return (head, rest[0]), _SECTIONS[head][rest[0]], key
    if head in _SECTIONS and not rest:
        raise UserError(f"--vary {key}: is a table; expected one of its keys, e.g. {head}."
                        f"{next(iter(_SECTIONS[head]))}")
    if head in _TOP and not rest:
        return (head,), _TOP[head], key
    raise _unknown(key, data)


def _unknown(key: str, data: dict[str, Any]) -> UserError:
    return UserError(f"--vary {key}: unknown scenario key{did_you_mean(key, every_key(data))}; "
                     "expected a key such as cluster.gpus, cluster.scale_out, jobs[0].tp or "
                     "jobs[0].micro_batch")


def _check_catalog(key: str, path: Path, value: Any) -> None:
    """Catalog names are checked here too, so a typo stops the sweep before it starts."""
    names: dict[str, Any] | None = None
    if path == ("cluster", "gpu"):
        names = catalog.gpus()
    elif path == ("cluster", "scale_out"):
        names = {n: f for n, f in catalog.fabrics().items() if f.kind in ("ib", "roce")}
    elif len(path) == 3 and path[0] == "jobs" and path[2] == "model":
        if not isinstance(value, str):
            raise UserError(f"--vary {key}: expected catalog model names, got {value!r}")
        names = catalog.models()
    if names is not None and value not in names:
        raise UserError(f"--vary {key}: unknown name {value!r}{did_you_mean(value, names)}; "
                        f"expected one of {', '.join(names)}")


def split_values(text: str, key: str) -> list[str]:
    """Comma-separated tokens; commas inside quoted strings do not split."""
    tokens: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote and not (quote == '"' and current[-2:-1] == ["\\"]):
                quote = ""
        elif ch in "\"'":
            quote = ch
            current.append(ch)
        elif ch == ",":
            tokens.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if quote:
        raise UserError(f"--vary {key}: unterminated quoted string in {text!r}")
    tokens.append("".join(current).strip())
    if not all(tokens):
        raise UserError(f"--vary {key}={text}: empty value; expected KEY=V1,V2,... with no empty item")
    return tokens


def parse_value(token: str) -> Any:
    """A TOML-typed value: integers, floats, true/false, quoted strings; a bare word is a string."""
    try:
        value = tomllib.loads(f"v = {token}")["v"]
    except tomllib.TOMLDecodeError:
        if _BARE.match(token):
            return token
        raise UserError(f"--vary: cannot read the value {token!r}; expected a number, true/false, "
                        "a bare word or a quoted string") from None
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, dict)):
        raise UserError(f"--vary: the value {token!r} is an array or a table; expected a single value")
    return token      # a TOML date or time: the text as written


def apply(data: dict[str, Any], assignments: Iterable[tuple[Path, Any]]) -> dict[str, Any]:
    """`data` with each path set to its value (or removed, for DELETE), copying only what changes."""
    out = dict(data)
    copied: dict[Path, Any] = {(): out}
    for path, value in assignments:
        node: Any = out
        for depth in range(len(path) - 1):
            seg, prefix = path[depth], path[: depth + 1]
            child = copied.get(prefix)
            if child is None:
                child = node.get(seg, {}) if isinstance(node, dict) else node[seg]
                child = list(child) if isinstance(child, list) else dict(child)
                node[seg] = child
                copied[prefix] = child
            node = child
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return out


def get(data: dict[str, Any], path: Path, default: Any = None) -> Any:
    node: Any = data
    for seg in path:
        try:
            node = node[seg]
        except (KeyError, IndexError, TypeError):
            return default
    return node


def _jobs(data: dict[str, Any]) -> list[Any]:
    jobs = data.get("jobs")
    if isinstance(jobs, dict):
        return [jobs]
    return jobs if isinstance(jobs, list) else []
