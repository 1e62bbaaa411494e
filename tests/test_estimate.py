"""estimate(): the plan, the breakdown, auto settings, JSON shape, the CLI, and physical sanity."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from clustertop.cli import main
from clustertop.engine.config import catalog, scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.geometry import TIERS
from clustertop.engine.config.phases import PHASES
from clustertop.engine.model import collectives as col
from clustertop.engine.model.estimate import estimate, estimate_job, to_json
from clustertop.engine.model.step import JobModel

JOB_KEYS = {"name", "gpus", "step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu",
            "hardware_tflops_per_gpu", "memory_gb_per_gpu", "fits", "breakdown_s", "memory_gb", "chosen",
            "energy_j_per_token", "usd_per_mtoken", "tokens_per_s_per_mw", "energy_j_per_step", "power_mw",
            "usd_per_hour", "run_54d_mwh", "run_54d_usd"}


def _flagship(**kw):  # type: ignore[no-untyped-def]
    s = scenario.load("llama3-405b-16k")
    job = dataclasses.replace(s.jobs[0], **{"virtual_stages": 4, "recompute": "selective", **kw})
    return s, job


@pytest.fixture(scope="module")
def flagship():  # type: ignore[no-untyped-def]
    s, job = _flagship()
    return estimate_job(s, job)


def test_plan_covers_the_step_on_every_stage(flagship) -> None:  # type: ignore[no-untyped-def]
    e = flagship
    plan = e.plan
    assert e.fits and plan is not None
    # the plan is a nominal GPU's step:
    # the engine run draws the GPUs' speeds and adds the straggler wait itself
    assert plan.step_time_s == pytest.approx(e.step_time_s - e.breakdown_s.get("stragglers", 0.0))
    assert len(plan.stages) == 16
    for stage in plan.stages:
        assert stage[0].start_s == 0.0
        assert stage[-1].end_s == pytest.approx(plan.step_time_s)
        for a, b in itertools.pairwise(stage):
            assert a.end_s == pytest.approx(b.start_s) and a.phase != b.phase
        assert all(0 <= iv.phase < len(PHASES) and iv.end_s > iv.start_s for iv in stage)    # phase codes
        assert len(stage) < 2000
    assert set(plan.tier_load) == set(TIERS)
    assert all(0.0 <= x <= 1.0 for x in plan.tier_load.values())
    assert plan.tier_load["node"] > 0 and plan.tier_load["leaf"] > 0
    assert plan.tokens == 2048 * 8192
    assert plan.model_flops == pytest.approx(e.model_tflops_per_gpu * 1e12 * e.gpus * e.step_time_s)


def test_breakdown_sums_to_the_step(flagship) -> None:  # type: ignore[no-untyped-def]
    e = flagship
    assert sum(e.breakdown_s.values()) == pytest.approx(e.step_time_s, rel=1e-4)
    assert e.breakdown_s["compute"] > 0.5 * e.step_time_s
    assert e.breakdown_s["tp"] > 0 and e.breakdown_s["bubble"] > 0
    assert e.tokens_per_s == pytest.approx(2048 * 8192 / e.step_time_s)
    assert e.mfu == pytest.approx(e.model_tflops_per_gpu / 989.4)
    assert e.hardware_tflops_per_gpu == pytest.approx(e.model_tflops_per_gpu)   # no GEMM recomputed
    assert e.tiers == {"tp": "node", "cp": None, "pp": "spine", "dp": "core", "ep": None}


@pytest.mark.parametrize("v", [1, 2])
def test_extending_a_step_stretches_the_simulated_one(v: int) -> None:
    import numpy as np
    from clustertop.engine.config.phases import CODE
    from clustertop.engine.model.pipeline import evaluate
    from clustertop.engine.model.plan import extend_run as _extend

    p, m1, m2 = 4, 8, 16
    rng = np.random.default_rng(v)
    fwd = [[[("compute", float(rng.uniform(0.5, 1.5))), ("tp", 0.1)] for _ in range(v)] for _ in range(p)]
    bwd = [[[("compute", float(rng.uniform(1.0, 3.0)))] for _ in range(v)] for _ in range(p)]
    sends = [0.05] * p
    run1, run2 = (evaluate("1f1b", p, v, m, fwd, bwd, sends, sends) for m in (m1, m2))
    # m = m2: run2 itself (to rounding: the times are rebuilt by adding the intervals' lengths)
    same, ends, last_b = _extend(run1, run2, m1, m2, m2)
    assert np.allclose(same.start, run2.intervals.start, rtol=1e-12, atol=1e-12)
    assert np.allclose(same.end, run2.intervals.end, rtol=1e-12, atol=1e-12)
    assert ends == pytest.approx(run2.ends, rel=1e-12)
    assert np.allclose(last_b, run2.last_backward, rtol=1e-12, atol=1e-12)
    # m = 4 m2: every stage ends on the line through the two runs, work scales by m / m2, and each chunk's
    # last backward (in the drain) comes as much later as the stage's end, taking as long as in run2
    m = 4 * m2
    longer, ends, last_b = _extend(run1, run2, m1, m2, m)
    for r in range(p):
        assert ends[r] == pytest.approx(run2.ends[r] + (m - m2) * (run2.ends[r] - run1.ends[r]) / (m2 - m1))
        mine = longer.stage == r
        work = ((longer.end - longer.start)[mine & (longer.phase != CODE["bubble"])]).sum()
        assert work == pytest.approx(m / m2 * ((run2.intervals.end - run2.intervals.start)[
            (run2.intervals.stage == r) & (run2.intervals.phase != CODE["bubble"])]).sum())
        for (b0, b1), (a0, a1) in zip(last_b[r], run2.last_backward[r]):
            assert b1 - b0 == pytest.approx(a1 - a0)
            assert ends[r] - b1 == pytest.approx(run2.ends[r] - a1)


def _per_phase(plan) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Seconds per phase of a StepPlan, as a mean over its stages."""
    out: dict[str, float] = {}
    for stage in plan.stages:
        for iv in stage:
            name = PHASES[iv.phase]
            out[name] = out.get(name, 0.0) + (iv.end_s - iv.start_s) / len(plan.stages)
    return out


@pytest.mark.parametrize("name", ["llama3-405b-16k", "llama3-405b-8k", "scaling-512", "pcie-8gpu",
                                  "congested-fabric", "meta-24k-roce"])
def test_breakdown_is_the_plan_summed_per_phase(name: str) -> None:
    # the breakdown is summed from the pipeline's arrays, the plan built from intervals: the same seconds
    s = scenario.load(name)
    for e in estimate(s).jobs:
        if not e.fits or e.plan is None:
            continue
        per_phase = _per_phase(e.plan)
        shown = {k: v for k, v in e.breakdown_s.items() if k != "stragglers"}
        assert set(shown) <= set(per_phase) | {"bubble", "optimizer"}
        for phase, seconds in per_phase.items():
            assert shown.get(phase, 0.0) == pytest.approx(seconds, abs=2e-6), (name, phase)


def test_full_recompute_counts_in_hardware_flops_only() -> None:
    s, job = _flagship(recompute="full")
    e = estimate_job(s, job)
    assert e.hardware_tflops_per_gpu > 1.25 * e.model_tflops_per_gpu


def test_more_microbatches_shrink_the_bubble() -> None:
    s8 = scenario.load("llama3-405b-8k")
    s16 = scenario.load("llama3-405b-16k")
    kw = {"virtual_stages": 4, "recompute": "selective"}
    e8 = estimate_job(s8, dataclasses.replace(s8.jobs[0], **kw))
    e16 = estimate_job(s16, dataclasses.replace(s16.jobs[0], **kw))
    assert e8.breakdown_s["bubble"] / e8.step_time_s < e16.breakdown_s["bubble"] / e16.step_time_s
    assert e8.model_tflops_per_gpu > e16.model_tflops_per_gpu


def test_a_faster_fabric_gives_a_faster_step() -> None:
    s, job = _flagship(tp=4, pp=32, dp=128, virtual_stages=1)
    slow = estimate_job(s, job)
    fast_cluster = dataclasses.replace(s.cluster, scale_out=catalog.fabrics()["roce-800g"])
    fast = estimate_job(dataclasses.replace(s, cluster=fast_cluster), job)
    assert fast.step_time_s < slow.step_time_s
    pcie = dataclasses.replace(s.cluster, scale_up="pcie")
    assert estimate_job(dataclasses.replace(s, cluster=pcie), job).step_time_s > 1.2 * slow.step_time_s


def test_auto_settings_choose_the_fastest_that_fits() -> None:
    s, job = _flagship(micro_batch="auto", virtual_stages="auto", recompute="auto")
    e = estimate_job(s, job)
    assert e.fits and set(e.chosen) == {"micro_batch", "virtual_stages", "recompute"}
    assert e.job.micro_batch == e.chosen["micro_batch"] and e.job.recompute == e.chosen["recompute"]
    for v in (1, 2):
        other = estimate_job(s, dataclasses.replace(job, micro_batch=1, virtual_stages=v, recompute="full"))
        assert e.step_time_s <= other.step_time_s


def test_fixed_settings_that_do_not_fit_get_a_hint() -> None:
    s = scenario.load("llama3-405b-16k")
    job = dataclasses.replace(s.jobs[0], micro_batch=16, virtual_stages=1, recompute="none")
    e = estimate_job(s, job)
    assert not e.fits and "fits with" in e.note
    assert estimate_job(s, job, hints=False).note == ""


def test_gpipe_holds_every_microbatch() -> None:
    s, job = _flagship(schedule="gpipe", virtual_stages=1, recompute="full")
    gp = estimate_job(s, job)
    ofob = estimate_job(s, dataclasses.replace(job, schedule="1f1b"))
    assert gp.memory_gb["activations"] > ofob.memory_gb["activations"]


def test_interleaving_that_cannot_run_is_a_user_error() -> None:
    s, job = _flagship(virtual_stages=2, global_batch=128 * 24)   # 24 microbatches: not rounds of 16
    with pytest.raises(UserError):
        estimate_job(s, job)


def test_moe_job_runs_with_expert_parallel_all_to_all(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "moe.toml"
    path.write_text('name = "moe"\n[cluster]\ngpu = "h800-sxm-80gb"\ngpus = 2048\nscale_out = "ib-ndr-400g"\n'
                    '[[jobs]]\nmodel = "deepseek-v3"\nseq_len = 4096\nglobal_batch = 7680\npp = 16\n'
                    'dp = 128\n'
                    'ep = 64\nzero = 1\nrecompute = "auto"\nprecision = "fp8"\n')
    s = scenario.load(str(path))
    e = estimate_job(s, s.jobs[0])
    assert e.fits and e.breakdown_s.get("ep", 0) > 0
    assert e.tiers["ep"] in ("leaf", "spine")
    assert 0.03 < e.mfu < 0.6


def test_json_has_exactly_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "single-gpu-405b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "single-gpu-405b"
    assert set(out["cluster"]) == {"gpus", "nodes", "pods", "buildings", "it_power_mw", "facility_power_mw",
                                   "scale_up", "transceivers", "transceivers_by_tier", "optics", "optics_mw"}
    job = out["jobs"][0]
    assert JOB_KEYS <= set(job)
    assert job["fits"] is False and job["step_time_s"] is None
    assert job["energy_j_per_token"] is None and job["usd_per_mtoken"] is None     # no step: no figures
    assert job["memory_gb"]["weights"] == pytest.approx(811, rel=0.01)


def test_cluster_power() -> None:
    s = scenario.load("llama3-405b-16k")
    c = to_json(estimate(dataclasses.replace(s, jobs=())))["cluster"]
    assert c["gpus"] == 16384 and c["nodes"] == 2048 and c["pods"] == 6 and c["buildings"] == 1
    # the transceivers of a 3-tier 400G Clos: every NIC's leaf has an uplink (1:1), each pod's uplinks carry
    # 1/7 of its NICs (5 pods of 3,072 GPUs: 439 links each, the last of 1,024: 147),
    # two 9 W transceivers per link
    links = 16384 + 5 * 439 + 147
    assert (c["transceivers"] == 2 * links
            and c["transceivers_by_tier"] == {"spine": 2 * 16384, "core": 2 * 2342})
    assert c["optics_mw"] == pytest.approx(2 * links * 9.0 / 1e6)
    assert c["it_power_mw"] == pytest.approx(16384 * (700 + 575) * 1.10 / 1e6 + c["optics_mw"], rel=1e-4)
    assert c["facility_power_mw"] == pytest.approx(c["it_power_mw"] * 1.2, rel=1e-4)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "llama3-405b-8k"]) == 0
    out = capsys.readouterr().out
    for needle in ("layout", "TP 8 (node)", "DP 64 (core)", "memory", "weights", "fits"):
        assert needle in out
    assert main(["estimate", "single-gpu-405b"]) == 0
    assert "OUT OF MEMORY" in (out := capsys.readouterr().out) and "hint" in out
    assert main(["estimate", "no-such-scenario"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_long_steps_extend_the_simulated_steady_state(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import clustertop.engine.model.step as est
    from clustertop.engine.model import calibration

    s = calibration.scenario(next(r for r in calibration.rows() if r.name == "bloom-176b"))
    job = dataclasses.replace(s.jobs[0], micro_batch=1)        # 256 microbatches per replica
    exact = estimate_job(s, job)
    monkeypatch.setattr(est, "MAX_SIM_MICROBATCHES", 64)
    est._evaluate_cached.cache_clear()
    short = estimate_job(s, job)
    est._evaluate_cached.cache_clear()
    assert exact.microbatches == short.microbatches == 256
    # the extra microbatches are extra steady-state rounds: the step and the DP reduction after the drain
    # come out as simulated in full (stretching the drain as well made DP 0.6 s short and the step 0.5%)
    assert short.step_time_s == pytest.approx(exact.step_time_s, rel=1e-3)
    assert short.breakdown_s["dp"] == pytest.approx(exact.breakdown_s["dp"], abs=0.01)
    for stage in short.plan.stages:
        assert stage[-1].end_s == pytest.approx(short.plan.step_time_s)
    # the breakdown is summed from the extended intervals the plan shows
    for phase, seconds in _per_phase(short.plan).items():
        assert short.breakdown_s.get(phase, 0.0) == pytest.approx(seconds, abs=2e-6), phase


def _fast_and_full(s):  # type: ignore[no-untyped-def]
    """estimate(s) without and with the plan and hints, each computed from scratch."""
    import clustertop.engine.model.step as est

    est._evaluate_cached.cache_clear()
    fast = estimate(s, plan=False, hints=False)
    est._evaluate_cached.cache_clear()
    return fast, estimate(s)


@pytest.mark.parametrize("name", sorted(scenario.builtin_names()))
def test_the_sweep_fast_path_gives_the_same_figures(name: str) -> None:
    fast, full = _fast_and_full(scenario.load(name))
    assert to_json(fast) == to_json(full)
    for a, b in zip(fast.jobs, full.jobs, strict=True):
        assert a.plan is None and a.note == ""
        assert (a.step_time_s, a.breakdown_s, a.memory_gb, a.memory_gb_per_gpu, a.fits, a.chosen) == \
            (b.step_time_s, b.breakdown_s, b.memory_gb, b.memory_gb_per_gpu, b.fits, b.chosen)
        assert (b.plan is not None) == b.fits
        if b.plan is not None and b.job.schedule != "dualpipe":   # DualPipe's plan keeps the 1F1B order
            # the plan is a nominal GPU's step; the straggler wait is the engine run's to draw
            assert b.plan.step_time_s == pytest.approx(a.step_time_s - a.breakdown_s.get("stragglers", 0.0))


@pytest.mark.parametrize("kw", [{"micro_batch": "auto", "virtual_stages": "auto", "recompute": "auto"},
                                {"schedule": "gpipe", "virtual_stages": 1, "recompute": "full", "zero": 3},
                                {"global_batch": 128 * 320, "micro_batch": 1}])   # 320 microbatches: extended
def test_the_fast_path_gives_the_same_figures_for_searches_and_long_steps(kw: dict[str, object]) -> None:
    s, job = _flagship(**kw)
    fast, full = _fast_and_full(dataclasses.replace(s, jobs=(job,)))
    assert to_json(fast) == to_json(full)
    assert fast.jobs[0].step_time_s == full.jobs[0].step_time_s and full.jobs[0].plan is not None


def _walk(intervals: list[tuple[float, float, str]], end: float) -> list[tuple[float, float, str]]:
    """The runs by definition: walk the sorted intervals, skip what is covered, clip overlaps, fill gaps with
    bubble (also up to `end`), merge adjacent equal phases."""
    out: list[tuple[float, float, str]] = []

    def push(a: float, b: float, phase: str) -> None:
        if out and out[-1][2] == phase:
            out[-1] = (out[-1][0], b, phase)
        else:
            out.append((a, b, phase))

    t = 0.0
    for a, b, phase in sorted(intervals):
        if b <= t:
            continue
        a = max(a, t)
        if a > t:
            push(t, a, "bubble")
        push(a, b, phase)
        t = b
    if end > t:
        push(t, end, "bubble")
    return out


def test_merged_runs_are_the_walk_over_sorted_intervals() -> None:
    import random

    from clustertop.engine.model.pipeline import Intervals
    from clustertop.engine.model.plan import merge_runs as _merge

    rng = random.Random(7)
    for _ in range(300):
        stages = []
        for _ in range(rng.randint(1, 4)):
            t, ivs = 0.0, []
            for _ in range(rng.randint(0, 12)):
                t += rng.choice([0.0, 0.0, 0.25, 1.0, -0.5, 1e-17])    # contiguous, gaps, overlaps, rounding
                d = rng.choice([0.5, 1.0, 1e-17])
                ivs.append((max(t, 0.0), max(t, 0.0) + d, rng.choice(["compute", "tp", "bubble", "pp"])))
                t = max(t, 0.0) + d
            if rng.random() < 0.2:
                rng.shuffle(ivs)
            stages.append(ivs)
        end = max([b for s in stages for _, b, _ in s], default=0.0) + rng.choice([0.0, 1.0])
        runs = _merge(Intervals.of(stages), end, len(stages))
        for r, ivs in enumerate(stages):
            assert runs.of_stage(r) == tuple(_walk(ivs, end))


def test_the_fast_path_keeps_no_pipeline_it_will_not_look_up_again() -> None:
    """A sweep's or a search's configurations do not repeat: their evaluated pipelines are not kept (hashing
    the segments to look them up cost more than the cache saved); a plan's simulation is (the run replays
    it)."""
    import clustertop.engine.model.step as est

    s = scenario.load("llama3-405b-8k")
    est._evaluate_cached.cache_clear()
    estimate(s, plan=False, hints=False)
    assert est._evaluate_cached.cache_info().currsize == 0
    estimate(s)
    assert est._evaluate_cached.cache_info().currsize == 1


@pytest.mark.parametrize("geometry", [(8, 16, 192, 0), (8, 32, 4, 2), (4, 12, 3, 3), (72, 72, 8, 1)])
def test_the_tiers_an_estimate_reports_are_its_routes_and_the_layouts(geometry, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A training estimate reads each dimension's tier off its routes (CP = 1: each route's groups are the
    dimension's), without walking the layout again; they are the tiers the layout gives."""
    from clustertop.engine.config.geometry import DIMS, Geometry
    from clustertop.engine.model import collectives as col
    from clustertop.engine.model import step
    from clustertop.engine.model.estimate import _tiers
    from clustertop.engine.model.layout import Layout

    per_node, per_rack, racks_per_pod, pods_per_building = geometry
    base = scenario.load("llama3-405b-16k")
    for tp, pp, dp, ep, first in [(8, 16, 128, 1, 0), (4, 3, 8, 4, 24), (2, 5, 40, 5, 8), (1, 7, 600, 3, 96),
                                  (8, 1, 2048, 8, 0), (3, 2, 100, 1, 12)]:
        for order in ("tp-cp-pp-dp", "tp-cp-dp-pp"):
            gpus = tp * pp * dp
            total = -(-(gpus + first) // per_node) * per_node
            cluster = dataclasses.replace(base.cluster, gpus=total, gpus_per_node=per_node,
                                          gpus_per_rack=per_rack, racks_per_pod=racks_per_pod,
                                          pods_per_building=pods_per_building)
            job = dataclasses.replace(base.jobs[0], tp=tp, cp=1, pp=pp, dp=dp, ep=ep, gpus=gpus,
                                      first_gpu=first, rank_order=order)
            layout = Layout(job, Geometry.of(cluster))
            net = step._net(cluster, col.placement(job))
            assert _tiers(cluster, job, net) == {d: layout.tier(d) for d in DIMS}, (geometry, job)

    def walked(*_: object) -> None:
        raise AssertionError("the layout walked again")

    monkeypatch.setattr(Layout, "tier", walked)
    assert estimate(base, plan=False, hints=False).jobs[0].tiers == {"tp": "node", "cp": None, "pp": "spine",
                                                                      "dp": "core", "ep": None}


def test_collective_seconds_are_kept_with_the_placements_routes_and_are_the_collectives() -> None:
    """A JobModel keeps a collective's seconds with its placement's routes (Net.seconds): another job of the
    same placement (other microbatches, ZeRO) reads them, each is the collective computed afresh, and what
    differs in the operation, the dimension, the bytes or the placement is not read from another."""
    s = scenario.load("llama3-405b-16k")
    job = s.jobs[0]
    a = JobModel(s.cluster, job)
    b = JobModel(s.cluster, dataclasses.replace(job, zero=3, micro_batch=2))
    other = JobModel(s.cluster, dataclasses.replace(job, tp=4, dp=job.dp * 2))
    assert a.net is b.net and other.net is not a.net
    a.net.seconds.clear()
    other.net.seconds.clear()
    cl, dp, tp = s.cluster, a.net.dp, a.net.tp
    expected = {("allreduce", 1e9): col.allreduce(cl, dp, 1e9).time_s,
                ("reduce_scatter", 1e9): col.reduce_scatter(cl, dp, 1e9).time_s,
                ("reduce_scatter", 2e9): col.reduce_scatter(cl, dp, 2e9).time_s}
    assert len(set(expected.values())) == 3
    for model in (a, b):                    # made by the first, read by the second
        for (reduce, nbytes), seconds in expected.items():
            assert model._dp_seconds(reduce, nbytes) == seconds
        assert model._tp_seconds(1e8, True) == 2 * col.reduce_scatter(cl, tp, 1e8).time_s
        assert model._tp_seconds(1e8, False) == col.allreduce(cl, tp, 1e8).time_s
    assert len(a.net.seconds) == 5
    assert other._dp_seconds("allreduce", 1e9) == col.allreduce(cl, other.net.dp, 1e9).time_s != \
        expected[("allreduce", 1e9)]
