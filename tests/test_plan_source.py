"""The step plan comes from pipeline.evaluate, not from SimPy processes: the same plans as the SimPy
simulation (pipeline.simulate, kept as the reference it is checked against), for every schedule, with none
started."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.job import Job
from clustertop.engine.config.phases import CODE, PHASES
from clustertop.engine.model import calibration, pipeline, step
from clustertop.engine.model.estimate import clear_caches, estimate_job

EIGHT_STAGES: dict[str, Any] = {"pp": 8, "dp": 256, "global_batch": 4096, "recompute": "full"}


def _flagship(**changes: Any) -> tuple[scenario.Scenario, Job]:
    s = scenario.load("llama3-405b-16k")
    return s, dataclasses.replace(s.jobs[0], **changes)


def _cases() -> dict[str, tuple[scenario.Scenario, Job]]:
    deepseek = scenario.load("deepseek-v3-2048")
    bloom = calibration.scenario(next(r for r in calibration.rows() if r.name == "bloom-176b"))
    return {
        "interleaved 1F1B": _flagship(),
        "1F1B": _flagship(virtual_stages=1, **EIGHT_STAGES),
        "GPipe": _flagship(schedule="gpipe", virtual_stages=1, **EIGHT_STAGES),
        "blocking sends": _flagship(overlap_p2p_comm=False),
        "DualPipe": (deepseek, deepseek.jobs[0]),
        "auto settings": _flagship(micro_batch="auto", virtual_stages="auto", recompute="auto"),
        # 256 microbatches: two sizes simulated and extended
        "extended": (bloom, dataclasses.replace(bloom.jobs[0], micro_batch=1)),
    }


def _plan(s: scenario.Scenario, job: Job) -> tuple[Any, ...]:
    clear_caches()
    est = estimate_job(s, job)
    assert est.plan is not None
    p = est.plan
    return (est.step_time_s, est.breakdown_s, est.busy_s, est.chosen, p.step_time_s, p.stages, p.tier_load,
            p.memory_gb, p.tokens, p.model_flops)


@pytest.mark.parametrize("case", list(_cases()))
def test_plans_are_the_simpy_simulations(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s, job = _cases()[case]
    evaluated = _plan(s, job)
    monkeypatch.setattr(step, "evaluate", pipeline.simulate)        # the SimPy processes instead
    simulated = _plan(s, job)
    assert simulated == evaluated
    clear_caches()


def test_a_plan_starts_no_simpy_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_simpy(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a SimPy process was started")

    monkeypatch.setattr(pipeline.simpy.Environment, "process", no_simpy)
    s, job = _flagship()
    assert _plan(s, job)[0] > 0


def test_a_plans_stages_are_made_when_read_and_read_like_tuples() -> None:
    from clustertop.engine.model.pipeline import Intervals
    from clustertop.engine.model.plan import Interval, Timelines

    stages = ((Interval(0.0, 1.0, CODE["compute"]), Interval(1.0, 3.0, CODE["bubble"])), (),
              (Interval(0.0, 3.0, CODE["pp"]),))
    timelines = Timelines(Intervals.of([[(a, b, PHASES[c]) for a, b, c in s] for s in stages]), 3)
    assert timelines._made == [None, None, None]                       # nothing made before it is read
    assert timelines[2] == stages[2] and timelines._made[:2] == [None, None]
    assert timelines == stages and stages == timelines and list(timelines) == list(stages)
    assert len(timelines) == 3 and timelines[-1] is timelines[2] and timelines[1:] == stages[1:]
    assert all(type(iv) is Interval for stage in timelines for iv in stage)
    assert timelines[0][1].end_s == 3.0 and repr(timelines) == repr(stages)
    assert timelines != stages[:2]
    with pytest.raises(IndexError):
        timelines[3]
