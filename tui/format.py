"""Formatting shared by the panels: compact numbers, durations and text sparklines."""

from __future__ import annotations

import math
from collections.abc import Iterable

from clustertop.engine.config.units import format_duration

SPARKS = "▁▂▃▄▅▆▇█"


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """1234567 -> '1.23M'; keeps `digits` significant digits."""
    if value is None or not math.isfinite(value):
        return "—"
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            scaled = value / factor
            decimals = max(0, digits - 1 - math.floor(math.log10(abs(scaled))))
            return f"{scaled:.{decimals}f}{suffix}{unit}"
    if value == 0:
        return f"0{unit}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{min(decimals, 3)}f}{unit}"


def power(mw: float) -> str:
    """Site power: kW below 1 MW (8 GPUs draw kilowatts), MW above, with thousands separators, so that
    '2,789.8 MW' sits next to '5,000.0 MW'."""
    if not math.isfinite(mw):
        return "—"
    if abs(mw) < 1.0:
        return f"{mw * 1000:,.1f} kW"
    return f"{mw:,.2f} MW" if abs(mw) < 100 else f"{mw:,.1f} MW"


def usd(value: float | None) -> str:
    """Dollars: '$3.24', '$218', '$17.1M'."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"${value:.2f}" if abs(value) < 100 else f"${si(value)}"


def energy(mwh: float) -> str:
    """Energy: kWh below 1 MWh, MWh above, GWh from 10,000 MWh."""
    if not math.isfinite(mwh):
        return "—"
    if abs(mwh) < 1.0:
        return f"{mwh * 1000:,.1f} kWh"
    return f"{mwh:,.2f} MWh" if abs(mwh) < 10_000 else f"{mwh / 1000:,.1f} GWh"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "—"
    return format_duration(max(0.0, seconds))


def sparkline(values: Iterable[float], width: int, low: float | None = None, high: float | None = None) -> str:
    """The last `width` values as block characters, scaled to [low, high] (default: their own range)."""
    data = [v for v in values][-width:] if width > 0 else []
    if not data:
        return ""
    lo = min(data) if low is None else low
    hi = max(data) if high is None else high
    span = hi - lo
    out = []
    for v in data:
        x = 0.0 if span <= 0 else (v - lo) / span
        out.append(SPARKS[min(len(SPARKS) - 1, max(0, round(x * (len(SPARKS) - 1))))])
    return "".join(out)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of `width` cells filled to `fraction` (eighth-cell resolution)."""
    fraction = min(1.0, max(0.0, fraction if math.isfinite(fraction) else 0.0))
    eighths = round(fraction * width * 8)
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest else ""
    return ("█" * full + partial).ljust(width)[:width]
