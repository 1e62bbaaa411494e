"""The flagship over Llama 3's 54-day snapshot (one run with the cost model): interruptions, causes, effective
training time and the site's power swing, against ../shared/reference/published_runs.toml.

Statistics over many seeds are tested on engine/faults directly (tests/test_faults.py); this run checks that
the engine turns those draws into the published picture.
"""

from __future__ import annotations

import collections

import orjson
import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.model import checkpoint
from clustertop.engine.sim import faults
from clustertop.engine.sim.run import Run

DAYS54 = 54 * 86400.0
TABLE5 = {c.name: c.count for c in catalog.causes()}


class Events:
    """A sink keeping the discrete events other than steps (the run writes ~700K lines)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, line: bytes) -> None:
        if b'"type":"step"' not in line[:40]:
            self.events.append(orjson.loads(line))

    def keyframe(self, line: bytes) -> None:
        pass


@pytest.fixture(scope="module")
def flagship() -> tuple[Run, list[dict]]:
    run = Run(scenario.load("llama3-405b-16k"), duration_s=DAYS54)
    sink = Events()
    run.run(sink)
    return run, sink.events


def test_interruptions_match_llama3(flagship: tuple[Run, list[dict]]) -> None:
    run, events = flagship
    s = run.summary
    assert 379 <= s["interruptions_unexpected"] <= 459               # Poisson 95% range around 419
    assert 34 <= s["interruptions_planned"] <= 61                      # around 47
    drawn = faults.schedule(0, 16384, 8, 0.0, DAYS54, run.seed, 1.0, stream="pretrain/")
    assert s["interruptions_unexpected"] == len(drawn) == sum(e["type"] == "fault" for e in events)
    causes = collections.Counter(e["cause"] for e in events if e["type"] == "fault")
    n = sum(causes.values())
    assert set(causes) <= set(TABLE5) and causes.most_common(1)[0][0] == "Faulty GPU"
    for name, count in TABLE5.items():
        share = count / 419
        assert abs(causes[name] / n - share) < 4 * (share * (1 - share) / n) ** 0.5 + 0.005, name
    gpu_share = sum(v for k, v in causes.items() if catalog.cause(k).category == "GPU") / n
    assert gpu_share == pytest.approx(268 / 419, abs=0.08)       # the GPU category of faults.toml


def test_effective_training_time_and_checkpoints(flagship: tuple[Run, list[dict]]) -> None:
    run, events = flagship
    s = run.summary
    assert 0.85 <= s["effective_training_time"] <= 0.95              # Llama 3: above 90%
    plan = checkpoint.checkpoint_plan(run.scenario, run.scenario.jobs[0])
    up = DAYS54 - sum(e["downtime_s"] for e in events if e["type"] == "restart")
    # One checkpoint per interval plus its write, each started at the next step boundary (~7 s steps).
    assert s["checkpoints"] == pytest.approx(up / (plan.interval_s + plan.write_s + 3.5), rel=0.03)
    restarts = [e for e in events if e["type"] == "restart"]
    assert all(e["lost_s"] <= plan.interval_s + 20 for e in restarts)   # never more than one interval lost


def test_site_power_swings_by_megawatts(flagship: tuple[Run, list[dict]]) -> None:
    run, events = flagship
    s = run.summary
    assert s["site_mw_max"] - s["site_mw_min"] >= 10.0
    swings = [e for e in events if e["type"] == "power_swing"]
    assert len(swings) >= 2 * s["checkpoints"]
    assert min(e["delta_mw"] for e in swings) < -7.0 and max(e["delta_mw"] for e in swings) > 7.0
