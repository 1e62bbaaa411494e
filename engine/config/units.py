"""Parsing and formatting of simulated durations ("90s", "10m", "6h", "54d")."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d|w)\s*$")
MAX_DURATION_S = 10 * 365 * 86400.0


def parse_duration(text: str) -> float:
    """Seconds in a duration string; ValueError with the expected form when it is not one."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if not m:
        shown = text if not isinstance(text, str) or len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"expected a duration such as \"90s\", \"10m\", \"6h\" or \"54d\", got {shown!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive duration, got {text!r}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"duration {text!r} is longer than the 10-year limit")
    return seconds


def format_duration(seconds: float) -> str:
    """Compact human form: 950ms, 42.0s, 12m30s, 5h02m, 3d04h."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"
