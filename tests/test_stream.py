"""The engine run: the stream it produces follows the plan exactly, in time order, deterministically."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.phases import CODE, PHASES
from clustertop.engine.model.plan import Interval, StepPlan
from clustertop.engine.sim.activity import Constant
from clustertop.engine.sim.run import Run
from clustertop.engine.sim.sampling import PHASE_UTIL, default_sample_interval
from clustertop.engine.stream import schema
from clustertop.engine.stream.state import ClusterState

# The stream's mechanics are tested on a cluster with no faults, no checkpoints and no stragglers (those
# have their own tests in test_run_faults*.py): steps then follow the cost model's plan exactly.


@pytest.fixture
def run_events(planner: Any) -> Any:
    """`run_events(path, **run_options)`: the engine's run of a scenario file (with the fake planner unless
    `planner=` says otherwise) and its events, decoded."""

    def run_events(path: str, **kw: Any) -> tuple[Run, list[dict[str, Any]]]:
        run = Run(scenario.load(path), planner=kw.pop("planner", planner), **kw)
        return run, [orjson.loads(line) for line in run.lines()]

    return run_events


def stage_values(event: dict[str, Any], key: str, tp: int = 2, pp: int = 4) -> np.ndarray:
    """Per-stage values of the first replica (the GPUs of stage s are [s*tp, (s+1)*tp))."""
    return schema.rle_decode(event[key])[: tp * pp: tp]


@pytest.fixture
def small(scenario_file: Any, texts: Any) -> str:
    return scenario_file(texts.small + texts.quiet)


# ----- run-length encoding ----------------------------------------------------------------------------------


def test_rle_round_trip() -> None:
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 1000, 16384):
        for levels in (1, 2, 5, 100):
            values = rng.integers(0, levels, size=size // 4 + 1).repeat(4)[:size]
            rle = schema.rle_encode(values)
            assert sum(rle["n"]) == size and all(a != b for a, b in zip(rle["v"], rle["v"][1:]))
            assert np.array_equal(schema.rle_decode(rle), values)
            out = np.zeros(size, dtype=np.int64)
            assert np.array_equal(schema.rle_decode(rle, out=out), values)
    with pytest.raises(ValueError):
        schema.rle_decode({"v": [1, 2], "n": [3, 3]}, out=np.zeros(5))


# ----- header and ordering ----------------------------------------------------------------------------------


def test_header_replays_without_the_scenario(small: str, run_events: Any) -> None:
    _run, events = run_events(small, duration_s=5.0, sample_s=1.0)
    header = events[0]
    assert header["type"] == "header" and header["schema_version"] == schema.SCHEMA_VERSION
    assert header["scenario"]["name"] == "small" and header["scenario"]["path"] == "small.toml"
    assert header["topology"]["gpus"] == 64 and header["topology"]["pods"] == 2
    assert header["seed"] == 7 and header["sample_interval_s"] == 1.0 and header["duration_s"] == 5.0
    job = header["jobs"][0]
    keys = ("name", "first_gpu", "gpus", "tp", "cp", "pp", "dp", "ep", "model", "kind")
    assert {k: job[k] for k in keys} == {
        "name": "train", "first_gpu": 0, "gpus": 64, "tp": 2, "cp": 1, "pp": 4, "dp": 8, "ep": 1,
        "model": "llama3.1-8b", "kind": "training"}
    state = ClusterState(header)
    for event in events[1:]:
        state.apply(event)
    assert state.jobs["train"].running and state.jobs["train"].step > 0


def test_times_never_decrease_and_samples_are_regular(small: str, run_events: Any) -> None:
    _, events = run_events(small, duration_s=10.0, sample_s=0.3)
    times = [e["t"] for e in events[1:]]
    assert times == sorted(times)
    samples = [e["t"] for e in events if e["type"] == "sample"]
    assert samples[0] == 0.0 and samples[-1] == 10.0
    assert np.allclose(np.diff(samples[:-1]), 0.3)


def test_same_seed_same_bytes(scenario_file: Any, texts: Any, planner: Any) -> None:
    path = scenario_file(texts.mixed)
    a = b"".join(Run(scenario.load(path), planner=planner, sample_s=0.5).lines())
    b = b"".join(Run(scenario.load(path), planner=planner, sample_s=0.5).lines())
    assert a == b
    c = b"".join(Run(scenario.load(path), planner=planner, sample_s=0.5, seed=4).lines())
    assert c != a and b'"seed":4' in c


def test_default_interval_suits_the_duration() -> None:
    assert default_sample_interval(600) == 0.2
    assert default_sample_interval(6 * 3600) == 5.0
    assert default_sample_interval(54 * 86400) == 1200.0
    # A site: coarser, so that a recording holds about a billion per-GPU values at most.
    assert default_sample_interval(3600, 432_864) == 2.0
    assert default_sample_interval(3600, 16_384) == 1.0
    for d in (60, 3600, 86400, 54 * 86400, 365 * 86400):
        assert d / default_sample_interval(d) <= 5000


# ----- steps ------------------------------------------------------------------------------------------------


def test_steps_follow_the_plan(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=30.0, sample_s=5.0)
    plan = run.tracks[0].plan
    assert plan is not None
    period = plan.step_time_s
    steps = [e for e in events if e["type"] == "step"]
    assert len(steps) == int(30.0 // period)
    for k, e in enumerate(steps, start=1):
        assert e["step"] == k and e["t"] == pytest.approx(k * period, abs=1e-6)
        assert e["tokens"] == 64 * 4096 and e["tokens_total"] == k * 64 * 4096
        assert e["tokens_per_s"] == pytest.approx(64 * 4096 / period, rel=1e-6)
        assert 0 < e["mfu"] < 1 and e["tflops_per_gpu"] == pytest.approx(e["mfu"] * 989.4, rel=1e-3)
    assert run.stats.steps == len(steps) and run.stats.tokens == steps[-1]["tokens_total"]


def test_fast_forward_does_not_simulate_steps_one_by_one(small: str, planner: Any) -> None:
    run = Run(scenario.load(small), planner=planner, duration_s=86400.0, sample_s=3600.0)
    woken = 0
    step = run.env.step

    def counting_step() -> None:
        nonlocal woken
        woken += 1
        step()

    run.env.step = counting_step  # type: ignore[method-assign]
    lines = list(run.lines())
    assert run.stats.steps > 100_000                       # a day of 0.75 s steps...
    assert woken < 100                                     # ...in a few dozen SimPy events
    assert len(lines) == 1 + 1 + run.stats.steps + 25      # header, job_start, steps, 25 samples


# ----- samples follow the schedule --------------------------------------------------------------------------


def test_pipeline_fills_and_drains(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=1.6, sample_s=0.01)
    samples = [e for e in events if e["type"] == "sample"]
    util = np.array([stage_values(e, "util") for e in samples])     # (samples, stages)
    phase = np.array([stage_values(e, "phase") for e in samples])
    first_busy = [int(np.argmax(util[:, s] > 0)) for s in range(4)]
    assert first_busy == sorted(first_busy) and first_busy[0] < first_busy[3]    # stage 0 starts first
    assert phase[0, 0] == CODE["compute"] and (phase[0, 1:] == CODE["bubble"]).all()
    # Within one step every stage spends time in the bubble; the last stage finishes its step first.
    period = run.tracks[0].plan.step_time_s
    one_step = [i for i, e in enumerate(samples) if 0 < e["t"] <= period]
    assert all((phase[one_step, s] == CODE["bubble"]).any() for s in range(4))
    last_compute = [max(i for i in one_step if phase[i, s] == CODE["compute"]) for s in range(4)]
    assert last_compute[3] < last_compute[0]
    # GPUs wait on communication: TP and PP waits appear, and the exposed DP reduction before the optimizer.
    names = {int(p) for p in phase.ravel()}
    assert {CODE["tp"], CODE["dp"], CODE["optimizer"]} & names


def test_samples_are_exact_means(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=7.0, sample_s=0.37)
    plan = run.tracks[0].plan.plan
    power = run.power.phase_w
    samples = [e for e in events if e["type"] == "sample"]
    for prev, e in itertools.pairwise(samples):
        a, b = prev["t"], e["t"]
        grid = np.linspace(a, b, 40001)[:-1] + (b - a) / 80000      # midpoints, brute force
        for s in range(4):
            codes = plan_phase_at(plan, s, grid)
            expected_util = 100 * PHASE_UTIL[codes].mean()
            expected_power = power[codes].mean()
            assert stage_values(e, "util")[s] == pytest.approx(expected_util, abs=0.6)
            assert stage_values(e, "power_w")[s] == pytest.approx(expected_power,
                                                                  abs=0.6 + 0.002 * expected_power)


def plan_phase_at(plan: StepPlan, stage: int, times: np.ndarray) -> np.ndarray:
    ivs = plan.stages[stage]
    starts = np.array([iv.start_s for iv in ivs])
    codes = np.array([iv.phase for iv in ivs])
    return codes[np.searchsorted(starts, times % plan.step_time_s, side="right") - 1]


def test_long_interval_means_match_the_plan_shares(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=600.0, sample_s=300.0)
    plan = run.tracks[0].plan.plan
    sample = [e for e in events if e["type"] == "sample"][-1]
    for s in range(4):
        compute = sum(iv.end_s - iv.start_s for iv in plan.stages[s] if iv.phase == CODE["compute"])
        optimizer = sum(iv.end_s - iv.start_s for iv in plan.stages[s] if iv.phase == CODE["optimizer"])
        share = (compute + 0.5 * optimizer) / plan.step_time_s
        assert stage_values(sample, "util")[s] == round(100 * share)
        assert stage_values(sample, "phase")[s] == CODE["compute"]


def test_power_and_site_mw(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=3.0, sample_s=1.0)
    gpu = run.scenario.cluster.gpu
    first = events[2]
    assert first["type"] == "sample" and first["t"] == 0
    watts = schema.rle_decode(first["power_w"])
    phases = schema.rle_decode(first["phase"])
    assert set(watts[phases == CODE["compute"]]) == {gpu.tdp_w}
    assert set(watts[phases == CODE["bubble"]]) == {gpu.idle_w}
    for e in events:
        if e["type"] == "sample":
            total = schema.rle_decode(e["power_w"]).sum()
            expected = ((total + 64 * 575.0) * 1.1 + run.power.optics_w) * run.scenario.cluster.pue / 1e6
            assert e["site_mw"] == pytest.approx(expected, abs=64 * 0.5 * 1.32 / 1e6 + 1e-4)


def test_links_per_pod_and_building(small: str, run_events: Any) -> None:
    run, events = run_events(small, duration_s=2.0, sample_s=1.0)
    header = events[0]
    assert header["link_scope"] == {"node": "pod", "leaf": "pod", "spine": "pod", "core": "pod",
                                    "campus": "building"}
    sample = [e for e in events if e["type"] == "sample"][-1]
    links = sample["links"]
    assert set(links) == {"node", "leaf", "spine", "core", "campus"}
    for tier in ("node", "leaf", "spine", "core"):
        assert isinstance(links[tier], list) and len(links[tier]) == header["topology"]["pods"]
    assert isinstance(links["campus"], list) and len(links["campus"]) == header["topology"]["buildings"]
    tiers = run.tracks[0].layout.tiers()
    assert links["node"][0] > 0 and tiers["tp"] == "node"
    assert links[tiers["dp"]] != 0


def test_job_that_does_not_fit(run_events: Any, scenario_file: Any, texts: Any) -> None:
    _run, events = run_events(scenario_file(texts.mixed + texts.quiet), duration_s=3.0, sample_s=1.0)
    header = events[0]
    assert [j["fits"] for j in header["jobs"]] == [True, False]
    stops = [e for e in events if e["type"] == "job_stop"]
    assert stops == [{"t": 0.0, "type": "job_stop", "job": "too-big", "reason": "out of memory"}]
    assert all(e["job"] == "train" for e in events if e["type"] == "step")
    sample = [e for e in events if e["type"] == "sample"][-1]
    util = schema.rle_decode(sample["util"])
    phase = schema.rle_decode(sample["phase"])
    assert (util[64:] == 0).all() and (phase[64:] == CODE["idle"]).all()
    assert (util[:64] > 0).all()
    assert sample["jobs"]["too-big"]["running"] is False and sample["jobs"]["train"]["running"] is True


# ----- hooks for faults, checkpoints and power --------------------------------------------------------------


def test_perturbation_pauses_the_job_and_resumes(small: str, planner: Any, checkpoint: Any) -> None:
    """A checkpoint-like perturbation: the job's GPUs write for 2 s, then training resumes from that step."""
    run = Run(scenario.load(small), planner=planner, duration_s=10.0, sample_s=1.0)

    def source(run: Run) -> Any:
        yield run.env.timeout(4.0)
        run.interrupt(run.tracks[0], checkpoint(2.0))

    run.add_process(source)
    events = [orjson.loads(line) for line in run.lines()]
    period = run.tracks[0].plan.step_time_s
    kinds = [e["type"] for e in events]
    assert kinds.index("checkpoint_start") < kinds.index("checkpoint_end")
    steps = [e for e in events if e["type"] == "step"]
    before = [e for e in steps if e["t"] <= 4.0]
    after = [e for e in steps if e["t"] > 4.0]
    assert len(before) == int(4.0 // period) and after[0]["step"] == len(before) + 1
    assert after[0]["t"] == pytest.approx(6.0 + period, abs=1e-6)      # restarted at 6 s, partial step lost
    samples = {e["t"]: e for e in events if e["type"] == "sample"}
    assert set(schema.rle_decode(samples[5.0]["phase"])) == {CODE["checkpoint"]}
    assert set(schema.rle_decode(samples[5.0]["util"])) == {0}
    assert samples[5.0]["jobs"]["train"]["running"] is False
    assert samples[5.0]["site_mw"] < samples[3.0]["site_mw"]


def test_override_marks_gpus_exactly(small: str, planner: Any) -> None:
    """A failed node (8 GPUs) for the second half of one sample interval, then repaired."""
    run = Run(scenario.load(small), planner=planner, duration_s=4.0, sample_s=1.0)

    def fault(run: Run) -> Any:
        yield run.env.timeout(1.5)
        item = run.override(8, 8, "failed")
        yield run.env.timeout(1.5)
        run.clear_override(item)

    run.add_process(fault)
    samples = {e["t"]: e for e in map(orjson.loads, run.lines()) if e["type"] == "sample"}
    ref = Run(scenario.load(small), planner=planner, duration_s=4.0, sample_s=1.0)
    plain = {e["t"]: e for e in map(orjson.loads, ref.lines()) if e["type"] == "sample"}
    for t in (1.0, 4.0):
        assert samples[t] == plain[t]
    util2, base2 = schema.rle_decode(samples[2.0]["util"]), schema.rle_decode(plain[2.0]["util"])
    assert np.array_equal(util2[:8], base2[:8]) and np.array_equal(util2[16:], base2[16:])
    assert (util2[8:16] < base2[8:16]).all()
    assert set(schema.rle_decode(samples[3.0]["phase"])[8:16]) == {CODE["failed"]}
    assert set(schema.rle_decode(samples[3.0]["util"])[8:16]) == {0}


def test_plan_must_cover_the_stages(small: str) -> None:
    bad = StepPlan(step_time_s=1.0, stages=((Interval(0.0, 1.0, CODE["compute"]),),))
    with pytest.raises(ValueError, match="stage timelines"):
        Run(scenario.load(small), planner=lambda s, j: bad)


def test_site_power_between_samples(small: str, planner: Any) -> None:
    """Issue 6 reads exact site power at any instant or over any window (power swings within a step)."""
    run = Run(scenario.load(small), planner=planner, duration_s=10.0, sample_s=1.0)
    list(run.lines())
    period = run.tracks[0].plan.step_time_s
    instants = [run.site_mw(2 * period + x) for x in np.linspace(0, period, 200, endpoint=False)]
    assert max(instants) - min(instants) > 0.02                      # 64 GPUs: 700 W vs 90 W phases
    mean = run.site_mw(2 * period, 3 * period)
    assert min(instants) < mean < max(instants)
    assert mean == pytest.approx(float(np.mean(instants)), rel=0.01)


def test_overlapping_overrides_stay_physical(small: str, planner: Any) -> None:
    run = Run(scenario.load(small), planner=planner, duration_s=3.0, sample_s=1.0)

    def faults(run: Run) -> Any:
        yield run.env.timeout(1.2)
        run.override(0, 16, "failed")
        yield run.env.timeout(0.3)
        run.override(8, 16, "checkpoint")

    run.add_process(faults)
    samples = [e for e in map(orjson.loads, run.lines()) if e["type"] == "sample"]
    for e in samples:
        util = schema.rle_decode(e["util"])
        watts = schema.rle_decode(e["power_w"])
        assert (util >= 0).all() and (util <= 100).all() and (watts >= 0).all() and (watts <= 700).all()
    phase = schema.rle_decode(samples[-1]["phase"])
    assert set(phase[:8]) == {CODE["failed"]} and set(phase[8:24]) == {CODE["checkpoint"]}


def test_fault_during_a_checkpoint_replaces_it(small: str, planner: Any, checkpoint: Any) -> None:
    run = Run(scenario.load(small), planner=planner, duration_s=12.0, sample_s=1.0)

    def fault(run: Run, track: Any) -> Any:
        run.emit("fault", job=track.job.name)
        run.switch(track, Constant("failed", track.job.pp))
        yield run.env.timeout(2.0)
        run.emit("restart", job=track.job.name)
        run.resume(track, step=0, tokens=0)

    def source(run: Run) -> Any:
        yield run.env.timeout(2.0)
        run.interrupt(run.tracks[0], checkpoint(3.0))
        yield run.env.timeout(1.0)
        run.interrupt(run.tracks[0], fault)

    run.add_process(source)
    events = [orjson.loads(line) for line in run.lines()]
    kinds = [(e["t"], e["type"]) for e in events
             if e["type"] not in ("sample", "step", "header", "power_swing")]
    assert kinds == [(0.0, "job_start"), (2.0, "checkpoint_start"), (3.0, "fault"), (5.0, "restart")]
    steps = [e for e in events if e["type"] == "step" and e["t"] > 5.0]
    assert steps[0]["step"] == 1 and steps[0]["tokens_total"] == 64 * 4096        # restarted from step 0


def test_phase_mix_is_each_gpus_time_shares(small: str, planner: Any) -> None:
    """Defect: the phase view showed one phase per GPU ("computing 100%" at 60-74% utilization). Samples carry
    each GPU's shares; they agree with util (compute counts 1, memory-bound 0.5) and with the dominant phase,
    a failed node shows as its own run, and a sample without them (an older recording) falls back to the
    dominant phase."""
    run = Run(scenario.load(small), planner=planner, duration_s=4.0, sample_s=1.0)

    def fault(run: Run) -> Any:
        yield run.env.timeout(1.5)
        run.override(8, 8, "failed")

    run.add_process(fault)
    events = [orjson.loads(line) for line in run.lines()]
    header, samples = events[0], [e for e in events if e["type"] == "sample"]
    util_weight = np.zeros(len(PHASES))
    util_weight[[CODE["compute"], CODE["optimizer"], CODE["memory"]]] = (1.0, 0.5, 0.5)
    for event in samples[1:]:
        state = ClusterState(header)
        state.apply(event)
        shares = state.mix.per_gpu(0, state.gpus)
        assert np.allclose(shares.sum(axis=1), 1.0, atol=0.03)
        assert np.allclose(shares @ util_weight, state.util, atol=0.03)
        assert len(orjson.dumps(event["phase_mix"])) < 600          # symmetric: a few dozen numbers
        mixed = shares.max(axis=1) < 0.99
        assert mixed.any() or event["t"] > 3.0                        # a step mixes phases within a second
        dominant = shares.argmax(axis=1)
        clear = shares.max(axis=1) > 0.55
        assert np.array_equal(dominant[clear], state.phase[clear])
    last = ClusterState(header)
    last.apply(samples[-1])
    assert np.allclose(last.mix.per_gpu(8, 16)[:, CODE["failed"]], 1.0)
    assert last.mix.shares(8, 16)[CODE["failed"]] == pytest.approx(1.0)
    older = ClusterState(header)
    older.apply({k: v for k, v in samples[2].items() if k != "phase_mix"})
    assert np.array_equal(older.mix.per_gpu(0, older.gpus).argmax(axis=1), older.phase)
    assert np.allclose(older.mix.per_gpu(0, older.gpus).sum(axis=1), 1.0)


def test_a_degraded_pod_tier_carries_its_load_on_the_links_left(run_events: Any, scenario_file: Any,
                                                                texts: Any, planner: Any) -> None:
    """congested-fabric: half of pod 1's spine links down; the same traffic is twice the load there."""
    plain = scenario_file(texts.small + texts.quiet)
    degraded = scenario_file(texts.small + '\n[[cluster.degraded]]\ntier = "spine"\npod = 1\ncapacity = 0.5\n'
                             + texts.quiet, "degraded.toml")
    import dataclasses

    def on_the_spine(s: Any, j: Any) -> Any:          # the fake plan, with traffic on the spine
        plan = planner(s, j)
        return dataclasses.replace(plan, tier_load={**plan.tier_load, "spine": 0.3})

    def links(path: str) -> dict[str, Any]:
        events = run_events(path, duration_s=3.0, sample_s=1.0, planner=on_the_spine)[1]
        return [e for e in events if e["type"] == "sample"][-1]["links"]

    a, b = links(plain), links(degraded)
    assert a["spine"][1] > 0 and b["spine"][0] == a["spine"][0]
    assert b["spine"][1] == pytest.approx(min(1.0, 2 * a["spine"][1]), abs=2e-4)
