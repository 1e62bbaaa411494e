"""Text charts the panels draw: sparklines and bars. (Figures are formatted by engine/config/units.py, as the
command line formats them.)"""

from __future__ import annotations

import math
from collections.abc import Iterable

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float], width: int, low: float | None = None,
              high: float | None = None) -> str:
    """The last `width` values as block characters, scaled to [low, high] (default: their own range)."""
    data = [v for v in values][-width:] if width > 0 else []
    if not data:
        return ""
    lo = min(data) if low is None else low
    hi = max(data) if high is None else high
    span = hi - lo
    return "".join(spark(0.0 if span <= 0 else (v - lo) / span) for v in data)


def spark(fraction: float) -> str:
    """One block character for a fraction 0..1 of the full height."""
    return SPARKS[min(len(SPARKS) - 1, max(0, round(fraction * (len(SPARKS) - 1))))]


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of `width` cells filled to `fraction` (eighth-cell resolution)."""
    fraction = min(1.0, max(0.0, fraction if math.isfinite(fraction) else 0.0))
    eighths = round(fraction * width * 8)
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest else ""
    return ("█" * full + partial).ljust(width)[:width]

