"""Frozen dataclasses hashed once.

The model's caches key on clusters, GPUs, fabrics and models: frozen dataclasses of many fields (a cluster
holds a GPU and three fabrics), whose generated __hash__ hashes every field again at each lookup, thousands of
times in a sweep. `hash_once` is that same hash, kept on the object the first time; `state_without_hash`
leaves it out of a pickle (a string's hash differs from one process to the next).
"""

from __future__ import annotations

import dataclasses
from typing import Any

_HASHED: dict[type, tuple[str, ...]] = {}      # per class: the fields its generated __hash__ would hash


def hash_once(self: Any) -> int:
    """The dataclass's own hash (of the fields it compares), computed once per object."""
    cached: int | None = self.__dict__.get("_hash")
    if cached is not None:
        return cached
    names = _HASHED.get(type(self))
    if names is None:
        names = _HASHED[type(self)] = tuple(f.name for f in dataclasses.fields(self)
                                            if (f.compare if f.hash is None else f.hash))
    value = hash(tuple(getattr(self, name) for name in names))
    object.__setattr__(self, "_hash", value)
    return value


def state_without_hash(self: Any) -> dict[str, Any]:
    """What pickles of such an object: all but its hash."""
    state = dict(self.__dict__)
    state.pop("_hash", None)
    return state
