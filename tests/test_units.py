"""One set of unit formatters for the command line and the dashboard (engine/config/units.py): a figure reads
the same wherever it shows, with thousands separators, and GB and GiB said plainly."""

from __future__ import annotations

import math

import pytest
from clustertop.engine.config import units


@pytest.mark.parametrize("mw,text", [(0.0857, "85.7 kW"), (14.79, "14.79 MW"), (2789.84, "2,789.8 MW"),
                                     (5000.0, "5,000.0 MW"), (math.nan, "—"), (None, "—")])
def test_power_switches_to_kw_below_one_mw_and_separates_thousands(mw: float, text: str) -> None:
    assert units.power(mw) == text


@pytest.mark.parametrize("value,text", [(3.244, "$3.24"), (218.4, "$218"), (1234.0, "$1.23K"),
                                        (17.1e6, "$17.1M"), (2.3e9, "$2.30B"), (None, "—")])
def test_dollars_use_k_m_b(value: float, text: str) -> None:
    assert units.usd(value) == text


@pytest.mark.parametrize("mwh,text", [(0.2592, "259.2 kWh"), (124.9, "124.90 MWh"), (30_500.0, "30.5 GWh")])
def test_energy(mwh: float, text: str) -> None:
    assert units.energy(mwh) == text


def test_counts_and_seconds_separate_thousands() -> None:
    assert units.count(16384, "GPU") == "16,384 GPUs"
    assert units.count(1, "node") == "1 node"
    assert units.seconds(1193.0) == "1,193 s"
    assert units.seconds(1200.0) == "1,200 s"
    assert units.seconds(0.25) == "0.25 s"
    assert units.seconds(0.05) == "0.05 s" and units.seconds(42.5) == "42.5 s"
    assert units.si(2.52e6) == "2.52M" and units.si(9890.0) == "9.89k" and units.si(None) == "—"


@pytest.mark.parametrize("value,text", [(1_234_567.8, "1,234,568 s"), (86_400.0, "86,400 s"),
                                        (10 * 365 * 86400.0, "315,360,000 s"), (999.5, "999.5 s")])
def test_large_seconds_are_whole_with_separators(value: float, text: str) -> None:
    """Never the exponent form of `g` ('1.23457e+06 s'): a long run's times read whole."""
    assert units.seconds(value) == text


def test_memory_says_gb_and_gib_plainly() -> None:
    """An '80 GB' H100 holds 80 GiB: shown beside usage in GB, it is 85.9 GB, and says so."""
    assert units.gib_to_gb(80.0) == pytest.approx(85.899, abs=1e-3)
    assert units.memory(70.6, units.gib_to_gb(80.0)) == "70.6 GB of 85.9 GB (80 GiB)"
    assert units.memory(64.25, None) == "64.2 GB"
    assert units.memory_cell(62.4, units.gib_to_gb(80.0)) == "62.4/85.9"
    assert units.memory_cell(None, 85.9) == "—"


def test_durations() -> None:
    assert [units.duration(s) for s in (0.95, 42.0, 750.0, 18120.0, 273600.0)] == \
        ["950ms", "42.0s", "12m30s", "5h02m", "3d04h"]
    assert units.duration(None) == "—" and units.duration(-5.0) == "0ms"
    assert units.parse_duration("54d") == 54 * 86400.0
    with pytest.raises(ValueError, match="expected a duration"):
        units.parse_duration("5 parsecs")
