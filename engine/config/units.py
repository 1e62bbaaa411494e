"""Units: durations parsed from scenarios and flags, and every figure formatted for people, in one place.

The command line and the dashboard print through these functions, so a figure reads the same wherever it
shows: thousands separators everywhere ("16,384 GPUs", "1,193 s"), power in kW below 1 MW and MW above, energy
in kWh, MWh or GWh, dollars with K, M and B, and memory in GB (10^9 bytes). A GPU's memory is sold in GiB (an
"80 GB" H100 holds 80 GiB, 85.9 GB: nvidia-smi reports 81,559 MiB), so a capacity in GiB is converted before
it is shown beside a figure in GB, and says so: "70.6 GB of 85.9 GB (80 GiB)".
"""

from __future__ import annotations

import math
import re

GB = 1e9
GiB = 2.0 ** 30
DASH = "—"                  # a figure that is not known

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


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


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
    return f"{int(seconds // 86400):,}d{int(seconds % 86400 // 3600):02d}h"


def duration(seconds: float | None) -> str:
    """format_duration, or a dash for a figure that is not known; negative durations are 0."""
    return format_duration(max(0.0, seconds)) if seconds is not None and _known(seconds) else DASH


def latency(value: float | None) -> str:
    """A request's latency: '7.3 ms', '1.23 s', '1m26s'; a dash when not known."""
    if value is None or not _known(value):
        return DASH
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s" if value < 60 else format_duration(value)


def seconds(value: float) -> str:
    """A time in seconds for messages: '0.25 s', '42.5 s'; from 1,000 s whole seconds with thousands
    separators ('1,193 s', '1,234,568 s': `g` alone would write '1.23457e+06 s')."""
    if abs(value) >= 1000:
        return f"{value:,.0f} s"
    return f"{value:g} s"


def count(n: float, noun: str) -> str:
    """'16,384 GPUs', '1 node'."""
    return f"{int(n):,} {noun}{'' if n == 1 else 's'}"


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1234567 -> '1.23M'; keeps `digits` significant digits; a dash when unknown."""
    if value is None or not math.isfinite(value):
        return DASH
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{_significant(value / factor, digits)}{suffix}{unit}"
    if value == 0:
        return f"0{unit}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{min(decimals, 3)}f}{unit}"


def file_size(n_bytes: int) -> str:
    """A file's size: '812 B', '12.3 MB'."""
    if n_bytes < 1000:
        return f"{n_bytes:,} B"
    scaled = si(n_bytes)                      # '12.3M': the number, then its SI prefix
    return f"{scaled[:-1]} {scaled[-1]}B"


def _significant(value: float, digits: int) -> str:
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


# (below this, scale by, format): the first step whose bound the value is under
_POWER = ((1.0, 1000.0, "{:,.1f} kW"), (100.0, 1.0, "{:,.2f} MW"), (math.inf, 1.0, "{:,.1f} MW"))
_ENERGY = ((1.0, 1000.0, "{:,.1f} kWh"), (10_000.0, 1.0, "{:,.2f} MWh"), (math.inf, 1e-3, "{:,.1f} GWh"))


def _ladder(value: float | None, steps: tuple[tuple[float, float, str], ...]) -> str:
    if value is None or not _known(value):
        return DASH
    for below, scale, form in steps:
        if abs(value) < below:
            return form.format(value * scale)
    raise AssertionError("the last step of a ladder is unbounded")


def power(mw: float | None) -> str:
    """Power: kW below 1 MW (8 GPUs draw kilowatts), MW above, thousands separated ('2,789.8 MW' beside
    '5,000.0 MW')."""
    return _ladder(mw, _POWER)


def energy(mwh: float | None) -> str:
    """Energy: kWh below 1 MWh, MWh above, GWh from 10,000 MWh."""
    return _ladder(mwh, _ENERGY)


def usd(value: float | None) -> str:
    """Dollars: '$3.24' below $100, then three significant digits with K, M, B: '$218', '$1.23K', '$17.1M'."""
    if value is None or not _known(value):
        return DASH
    if abs(value) < 100:
        return f"${value:,.2f}"
    for factor, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"${_significant(value / factor, 3)}{suffix}"
    return f"${value:,.0f}"


def gib_to_gb(gib: float) -> float:
    """A capacity sold in GiB, in GB (10^9 bytes): 80 GiB is 85.9 GB."""
    return gib * GiB / GB


def gb(value: float | None, decimals: int = 1) -> str:
    """Memory in GB (10^9 bytes): '70.6 GB'."""
    return f"{value:,.{decimals}f} GB" if value is not None and _known(value) else DASH


def memory_cell(used_gb: float | None, capacity_gb: float | None) -> str:
    """Memory in use against a capacity for a narrow table cell whose header says GB: '62.4/85.9'."""
    if used_gb is None or not _known(used_gb):
        return DASH
    return f"{used_gb:,.1f}/{capacity_gb:,.1f}" if capacity_gb is not None and _known(capacity_gb) else \
        f"{used_gb:,.1f}"


def memory(used_gb: float | None, capacity_gb: float | None) -> str:
    """Memory in use against a GPU's capacity, both in GB, the capacity also in GiB as it is sold:
    '70.6 GB of 85.9 GB (80 GiB)'."""
    if capacity_gb is None or not _known(capacity_gb):
        return gb(used_gb)
    return f"{gb(used_gb)} of {gb(capacity_gb)} ({capacity_gb * GB / GiB:,.0f} GiB)"
