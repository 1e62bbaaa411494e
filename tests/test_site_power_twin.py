"""A real run and its simulated twin compute site power with one formula (engine/model/power.py), optics
included: a simulated run's per-GPU power, turned into Prometheus dumps and imported, gives the site power
the simulation gives for the same per-GPU watts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.facility import IT_OVERHEAD
from clustertop.engine.sim.run import Run
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry.importer import import_prometheus


def site_mw(path: Path) -> dict[float, float]:
    """Each sample's site power by time."""
    return {e["t"]: e["site_mw"] for e in Reader(str(path)).events() if e["type"] == "sample"}


def test_an_imported_run_and_its_simulated_twin_compute_site_power_alike(
        tmp_path: Path, simulated_run: Any, telemetry: Any, planner: Any) -> None:
    path, data = simulated_run.scenario, simulated_run.frames
    names = telemetry.hosts(8)
    util = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, names, 8)
    power = telemetry.range_dump(tmp_path / "power.json", telemetry.POWER, data, names, 8)
    import_prometheus([str(util), str(power)], path, str(tmp_path / "real.jsonl"))
    imported, simulated = site_mw(tmp_path / "real.jsonl"), site_mw(Path(simulated_run.recording))
    run = Run(scenario.load(path), planner=planner)
    assert run.power.optics_w > 0                      # the site's transceivers draw: they must be counted
    assert sorted(imported) == sorted(simulated) == [t for t, _, _ in data]
    for t, _, watts in data:
        # the simulation's formula on the per-GPU watts the dumps carry (integers: the recording's)
        assert imported[t] == round(run.power.site_mw(float(watts.sum()), run.gpus), 4)
        # and the twin's own figure, from its exact (unrounded) per-GPU watts: within their rounding
        rounding = run.gpus * 0.5 * (1.0 + IT_OVERHEAD) * run.power.pue / 1e6
        assert imported[t] == pytest.approx(simulated[t], abs=rounding + 1e-4)
    assert np.ptp(list(imported.values())) > 0          # the run's power moves: not one figure compared
