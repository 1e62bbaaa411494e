"""Stragglers and the day's clocks in the engine run:
the job waits for its slowest GPU, which the stream shows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from clustertop.engine.config.phases import CODE
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import schema

NO_FAULTS = "\n[faults]\nenabled = false\nrate_scale = 0.0\nplanned_per_day = 0.0\n"


@pytest.fixture
def run(simulate: Any, texts: Any) -> Any:
    """`run(variability, **run_options)`: the small scenario without faults, with that [variability] table,
    simulated: the Run and its events."""

    def run(variability: str, **kw: Any) -> tuple[Run, list[dict[str, Any]]]:
        return simulate(texts.small + NO_FAULTS + "\n[variability]\n" + variability, **kw)

    return run


def test_the_job_waits_for_its_slowest_gpu(run: Any) -> None:
    r, events = run("straggler_sigma = 0.0\nslow_gpu_fraction = 0.1\nslow_gpu_factor = 0.8\n"
                    "diurnal_amplitude = 0.0\n", duration_s=120.0, sample_s=60.0)
    assert r.speeds is not None
    slow = np.flatnonzero(r.speeds < 1.0)
    assert slow.size > 0 and set(r.speeds[slow]) == {0.8}          # drawn once, from the seed
    header = events[0]["jobs"][0]
    assert header["speed"] == 0.8 and header["slow_gpus"] == slow.tolist()
    nominal = r.tracks[0].plan
    assert nominal is not None
    steps = [e for e in events if e["type"] == "step"]
    assert steps[0]["step_time_s"] == pytest.approx(nominal.step_time_s / 0.8, abs=1e-6)
    assert len(steps) == int(120.0 / (nominal.step_time_s / 0.8))
    # Over a minute: each slow GPU computes longer than the GPUs of its stage, which wait for it ("dp").
    util = schema.rle_decode([e for e in events if e["type"] == "sample"][-1]["util"])
    stage = r.tracks[0].stage_index()
    compute = nominal.phases.full[:, CODE["compute"]] / nominal.step_time_s
    for g in slow:
        peers = np.flatnonzero((stage == stage[g]) & (r.speeds == 1.0))
        assert len(set(util[peers])) == 1
        # The slow GPU computes c / 0.8 of the nominal step c: 0.25 c more, out of a step 1.25 times as long.
        assert util[g] - util[peers[0]] == pytest.approx(100 * compute[stage[g]] * 0.25 / 1.25, abs=1.0)


def test_stragglers_are_patched_into_the_symmetric_runs_exactly(run: Any) -> None:
    r, events = run("straggler_sigma = 0.02\nslow_gpu_fraction = 0.05\ndiurnal_amplitude = 0.0\n",
                    duration_s=10.0, sample_s=0.37)
    st = r.tracks[0].stragglers
    assert st is not None and 0 < st.gpus.size < 64
    stage = r.tracks[0].stage_index()
    for e in [e for e in events if e["type"] == "sample"][1:]:
        for key in ("util", "power_w", "phase"):
            got = schema.rle_decode(e[key])
            assert e[key] == schema.rle_encode(got)                   # canonical: equal neighbours merged
            others = np.setdiff1d(np.arange(64), st.gpus)
            for s in range(4):                                       # every other GPU: its stage's value
                assert len(set(got[others[stage[others] == s]])) == 1


def test_site_power_includes_the_stragglers(run: Any) -> None:
    r, events = run("straggler_sigma = 0.0\nslow_gpu_fraction = 0.1\nslow_gpu_factor = 0.8\n"
                    "diurnal_amplitude = 0.0\n", duration_s=30.0, sample_s=3.0)
    for e in events:
        if e["type"] == "sample" and e["t"] > 0:
            watts = schema.rle_decode(e["power_w"]).sum()
            expected = r.power.site_mw(watts, 64)
            assert e["site_mw"] == pytest.approx(expected, abs=64 * 0.5 * 1.32 / 1e6 + 1e-4)


def test_day_and_night(run: Any) -> None:
    amplitude = 0.02
    r, events = run(f"straggler_sigma = 0.0\nslow_gpu_fraction = 0.0\ndiurnal_amplitude = {amplitude}\n",
                    duration_s=86400.0, sample_s=3600.0)
    nominal = r.tracks[0].plan
    assert nominal is not None
    times = {e["t"]: e["jobs"]["train"]["step_time_s"] for e in events
             if e["type"] == "sample" and e["t"] > 0}
    slowest, fastest = max(times, key=times.__getitem__), min(times, key=times.__getitem__)
    assert 13 * 3600 <= slowest <= 15 * 3600 and (fastest <= 3 * 3600 or fastest >= 23 * 3600)
    assert times[fastest] == pytest.approx(nominal.step_time_s, rel=1e-4)
    assert times[slowest] / times[fastest] == pytest.approx(1 / (1 - amplitude), rel=1e-3)    # peak to trough
    # Throughput follows: steps in the hottest hour are fewer than in the coolest, by about the amplitude.
    steps = np.array([e["t"] for e in events if e["type"] == "step"])
    hot = ((steps > 13.5 * 3600) & (steps <= 14.5 * 3600)).sum()
    cool = ((steps > 1.5 * 3600) & (steps <= 2.5 * 3600)).sum()
    assert 1 - hot / cool == pytest.approx(amplitude, abs=0.002)
    # The clock changes at step boundaries: no work is lost, the step counter never jumps.
    numbers = [e["step"] for e in events if e["type"] == "step"]
    assert numbers == list(range(1, len(numbers) + 1))
    assert r.summary["effective_training_time"] == pytest.approx(
        sum(e["step_time_s"] for e in events if e["type"] == "step") / 86400.0, abs=1e-4)


def test_no_variability_is_the_cost_model_exactly(run: Any) -> None:
    r, events = run("straggler_sigma = 0.0\nslow_gpu_fraction = 0.0\ndiurnal_amplitude = 0.0\n",
                    duration_s=20.0, sample_s=1.0)
    assert r.speeds is None and r.tracks[0].stragglers is None
    assert events[0]["jobs"][0]["speed"] == 1.0 and events[0]["jobs"][0]["slow_gpus"] == []
    p = r.tracks[0].plan
    assert p is not None
    steps = [e for e in events if e["type"] == "step"]
    assert [e["t"] for e in steps] == [round(k * p.step_time_s, 6) for k in range(1, len(steps) + 1)]
    assert math.isclose(steps[0]["step_time_s"], p.step_time_s, abs_tol=1e-6)
