"""Power: per-phase GPU draw by GPU type, the site formula, power swings, the site budget and its extremes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.config.phases import CODE
from clustertop.engine.model.power import PowerModel
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import schema


@pytest.fixture
def cluster(scenario_file: Any, texts: Any) -> Any:
    """`cluster(gpu="h100-sxm-80gb", budget=None)`: the small scenario's cluster, of those GPUs, with that
    site power budget (MW)."""

    def load(gpu: str = "h100-sxm-80gb", budget: float | None = None) -> Any:
        text = texts.small.replace('gpu = "h100-sxm-80gb"', f'gpu = "{gpu}"')
        if budget is not None:
            text = text.replace("[cluster]\n", f"[cluster]\nsite_power_budget_mw = {budget}\n")
        return scenario.load(scenario_file(text)).cluster

    return load


def test_phase_power_per_gpu_type(cluster: Any) -> None:
    for name, gpu in catalog.gpus().items():
        model = PowerModel.of(cluster(name))
        w = model.phase_w
        assert w[CODE["compute"]] == gpu.tdp_w
        assert w[CODE["optimizer"]] == w[CODE["memory"]] == gpu.memory_bound_w
        for waiting in ("idle", "tp", "pp", "dp", "cp", "ep", "bubble", "checkpoint"):
            assert w[CODE[waiting]] == gpu.idle_w
        assert w[CODE["failed"]] == 0.0                               # off: fallen off the bus, or drained
        assert gpu.idle_w < gpu.memory_bound_w < gpu.tdp_w
        assert model.overhead_w_per_gpu == gpu.server_overhead_w


def test_server_overhead_figures() -> None:
    gpus = catalog.gpus()
    # hardware.toml: DGX H100 10.2 kW for 8 x 700 W GPUs; [facility] 575 W per H100.
    assert gpus["h100-sxm-80gb"].server_overhead() == (10200 - 8 * 700) / 8 == 575.0
    assert gpus["a100-sxm-80gb"].server_overhead() == (6500 - 8 * 400) / 8
    assert gpus["b200-sxm-180gb"].server_overhead() == (14300 - 8 * 1000) / 8
    assert gpus["gb200"].server_overhead() == pytest.approx(1750 - 1200)
    for gpu in gpus.values():
        assert 0.3 * gpu.tdp_w < gpu.server_overhead() < 1.1 * gpu.tdp_w


def test_site_formula_and_swing_threshold(cluster: Any) -> None:
    model = PowerModel.of(cluster())
    # 16,384 H100s computing: ((700 + 575) W x 1.1 (storage, switches) + the optics) x 1.2 (PUE) = 28.0 MW.
    assert model.optics_w > 0
    assert model.site_mw(16384 * 700.0, 16384) == pytest.approx((16384 * 1275 * 1.1 + model.optics_w) * 1.2
                                                                / 1e6)
    assert model.swing_threshold_mw(22.0) == pytest.approx(1.1)      # 5% of a 22 MW site
    assert model.swing_threshold_mw(500.0) == 2.0                    # 2 MW at a large site
    assert model.describe()["phase_w"]["failed"] == 0.0 and model.describe()["site_power_budget_mw"] is None
    assert not model.over_budget(1e6)
    budgeted = PowerModel.of(cluster(budget=0.08))
    assert budgeted.over_budget(0.081) and not budgeted.over_budget(0.079)


def test_checkpoints_swing_the_site_and_the_extremes_bracket_it(scenario_file: Any, texts: Any,
                                                                planner: Any) -> None:
    text = texts.small + texts.quiet + '\n[checkpoint]\ninterval = "5s"\nstorage_tb_s = 0.05\n'
    r = Run(scenario.load(scenario_file(text)), planner=planner, duration_s=40.0, sample_s=0.5)
    instants: list[float] = []

    def probe(run: Run) -> Any:                 # the site's power at 4,000 instants, read as the run goes
        for _ in range(4000):
            yield run.env.timeout(0.00997)
            instants.append(run.site_mw(run.env.now))

    r.add_process(probe)
    events = [orjson.loads(line) for line in r.lines()]
    swings = [e for e in events if e["type"] == "power_swing"]
    starts = [e for e in events if e["type"] == "checkpoint_start"]
    ends = [e for e in events if e["type"] == "checkpoint_end"]
    assert len(starts) >= 5 and len(swings) == len(starts) + len(ends)
    # All 64 GPUs stop together: the site falls from the job's step-mean power to every GPU waiting, and back.
    idle = r.power.site_mw(64 * r.power.idle_w, 64)
    running = r.power.site_mw(r.tracks[0].activity.plan.watts[0] * 8, 64)   # 8 replicas at their step mean
    for start, end in zip(starts, ends):
        down = next(e for e in swings if e["t"] == start["t"])
        up = next(e for e in swings if e["t"] == end["t"])
        assert (down["from_mw"] == pytest.approx(running, abs=1e-3)
                and down["to_mw"] == pytest.approx(idle, abs=1e-3))
        assert up["from_mw"] == down["to_mw"] and up["to_mw"] == down["from_mw"]
        assert down["delta_mw"] == pytest.approx(idle - running, abs=2e-3)
    # The instantaneous extremes bracket every sample's mean and the site at any instant.
    lo, hi = r.summary["site_mw_min"], r.summary["site_mw_max"]
    assert lo == pytest.approx(idle, abs=1e-4)
    assert hi == pytest.approx(r.power.site_mw(64 * 700.0, 64), abs=0.005)   # every stage computing at once
    means = [e["site_mw"] for e in events if e["type"] == "sample"]
    assert min(instants) == pytest.approx(idle, abs=1e-4)
    assert lo - 1e-4 <= min(means + instants) and max(means + instants) <= hi + 1e-4


def test_small_changes_are_not_swings(simulate: Any, texts: Any) -> None:
    text = texts.small + texts.quiet.replace("diurnal_amplitude = 0.0", "diurnal_amplitude = 0.02") + \
        '\n[checkpoint]\ninterval = "10h"\n'
    r, events = simulate(text, duration_s=3 * 3600.0, sample_s=600.0)
    assert r.tracks[0].factor != 1.0                      # the clocks changed a dozen times...
    assert not [e for e in events if e["type"] == "power_swing"]     # ...at the same power


def test_budget_in_the_header_samples_and_swings(simulate: Any, texts: Any) -> None:
    text = texts.small.replace("[cluster]\n", "[cluster]\nsite_power_budget_mw = 0.08\n") + texts.quiet + \
        '\n[checkpoint]\ninterval = "5s"\nstorage_tb_s = 0.05\n'
    _, events = simulate(text, duration_s=20.0, sample_s=0.5)
    assert events[0]["power"]["site_power_budget_mw"] == 0.08
    over = [e for e in events if e["type"] == "sample" and e.get("over_budget")]
    under = [e for e in events if e["type"] == "sample" and not e.get("over_budget")]
    assert over and under
    assert all(e["site_mw"] > 0.08 for e in over) and all(e["site_mw"] <= 0.08 for e in under)
    swings = [e for e in events if e["type"] == "power_swing"]
    assert all(e.get("over_budget", False) == (e["to_mw"] > 0.08) for e in swings)
    assert any(e.get("over_budget") for e in swings)


def test_failed_gpus_draw_nothing_but_their_host_does(scenario_file: Any, texts: Any, planner: Any) -> None:
    r = Run(scenario.load(scenario_file(texts.small + texts.quiet)), planner=planner, duration_s=4.0,
            sample_s=1.0)

    def fail(run: Run) -> Any:
        yield run.env.timeout(1.0)
        run.override(8, 8, "failed")

    r.add_process(fail)
    samples = [e for e in map(orjson.loads, r.lines()) if e["type"] == "sample"]
    last = samples[-1]
    watts = schema.rle_decode(last["power_w"])
    assert set(watts[8:16]) == {0}
    assert last["site_mw"] == pytest.approx(r.power.site_mw(watts.sum(), 64),
                                            abs=64 * 0.5 * 1.32 / 1e6 + 1e-4)
