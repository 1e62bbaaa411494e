"""Phases forced on GPU ranges over a span of time: a failed node, a failed link's GPU (engine/sim/run.py
`Run.override`). Samples compute the GPUs under one apart (engine/sim/sampling.py); the site's level counts
them (engine/sim/site_power.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Override:
    """A phase forced on GPUs [first, first + count) from `start` to `end`."""

    first: int
    count: int
    phase: str
    start: float
    end: float = math.inf
