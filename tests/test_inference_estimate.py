"""Inference in the estimate: decode bound by HBM bandwidth, prefill by compute, throughput saturating."""

from __future__ import annotations

import dataclasses

import pytest
from clustertop.engine.config import catalog, scenario
from clustertop.engine.config.phases import PHASES
from clustertop.engine.model.estimate import estimate, estimate_job, to_json
from clustertop.engine.model.inference import serve


@pytest.fixture(scope="module")
def base() -> scenario.Scenario:
    return scenario.load("inference-serving")


def _with(scen: scenario.Scenario, gpu: str | None = None, **job_changes: object) -> scenario.Scenario:
    cluster = scen.cluster
    if gpu:
        cluster = dataclasses.replace(cluster, gpu=catalog.gpus()[gpu])
    job = dataclasses.replace(scen.jobs[0], **job_changes)
    return dataclasses.replace(scen, cluster=cluster, jobs=(job,))


def test_estimate_reports_inference_kind_and_latencies(base: scenario.Scenario) -> None:
    out = to_json(estimate(base, plan=False))
    job = out["jobs"][0]
    assert job["kind"] == "inference" and job["fits"]
    assert job["tokens_per_s"] > 0 and 0 < job["ttft_s"] < 5 and 0 < job["tpot_s"] < 1
    assert set(job["memory_gb"]) == {"weights", "activations", "kv_cache", "reserve"}
    assert job["memory_gb"]["weights"] == pytest.approx(141.1 / 4, rel=0.02)   # 70B in BF16 over TP 4
    assert job["memory_gb_per_gpu"] <= job["capacity_gb"]


def test_training_jobs_report_training_kind() -> None:
    scen = scenario.load("scaling-8")
    assert to_json(estimate(scen, plan=False))["jobs"][0]["kind"] == "training"


def test_decode_is_hbm_bound(base: scenario.Scenario) -> None:
    light = {"request_rate": 2.0, "prompt_tokens": 256, "output_tokens": 128}
    r70 = serve(*_pair(_with(base, **light)))
    r8 = serve(*_pair(_with(base, model=catalog.models()["llama3.1-8b"], **light)))
    h200 = serve(*_pair(_with(base, gpu="h200-sxm-141gb", **light)))
    # a lightly loaded decode reads the weights once per token: TPOT follows the model's bytes ...
    assert r8.tpot.median < r70.tpot.median / 3
    # ... and HBM bandwidth (H200 4.8 TB/s against H100 3.35 TB/s, same compute)
    assert h200.tpot.median < r70.tpot.median * 0.85


def test_ttft_grows_with_prompt_length(base: scenario.Scenario) -> None:
    short = serve(*_pair(_with(base, request_rate=2.0, prompt_tokens=512, output_tokens=64)))
    long = serve(*_pair(_with(base, request_rate=2.0, prompt_tokens=8192, output_tokens=64)))
    assert long.ttft.median > 4 * short.ttft.median


def test_tokens_per_s_grows_with_rate_until_saturation(base: scenario.Scenario) -> None:
    rates = [4.0, 16.0, 400.0, 1600.0]
    res = [serve(*_pair(_with(base, request_rate=r, prompt_tokens=512, output_tokens=64))) for r in rates]
    tps = [r.tokens_per_s for r in res]
    assert tps[1] > 3 * tps[0]                   # unsaturated: proportional to the arrival rate
    assert res[-1].busy > 0.95                   # saturated: the replicas never idle ...
    assert tps[-1] < 1.3 * tps[-2]               # ... and 4x the requests add little throughput
    assert tps[-1] < 0.5 * 1600 * 64             # far below the offered load (requests/s x tokens)


def test_inference_plan_records_decode_as_memory_phase(base: scenario.Scenario) -> None:
    est = estimate_job(base, base.jobs[0])
    assert est.plan is not None
    phases = {PHASES[iv.phase] for stage in est.plan.stages for iv in stage}
    assert {"compute", "memory"} <= phases


def _pair(scen: scenario.Scenario) -> tuple[scenario.Scenario, scenario.Job]:
    return scen, scen.jobs[0]


def test_a_recorded_inference_job_is_shown_as_one(base: scenario.Scenario) -> None:
    """The header says the job serves (kind, memory per GPU, median TTFT and TPOT): the jobs panel shows
    latencies instead of MFU, and the inspector its memory."""
    import orjson
    from clustertop.engine.sim.run import Run
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.widgets.jobs import figures

    run = Run(base, duration_s=30.0)
    lines = list(run.lines())
    header = orjson.loads(lines[0])
    job = header["jobs"][0]
    est = estimate_job(base, base.jobs[0])
    assert job["kind"] == "inference" and job["memory_gb"] == est.memory_gb_per_gpu
    assert (job["ttft_s"] == pytest.approx(est.ttft_s, abs=1e-6)
            and job["tpot_s"] == pytest.approx(est.tpot_s, abs=1e-6))
    state = ClusterState(header)
    for line in lines[1:]:
        state.apply(orjson.loads(line))
    shown = figures(state.jobs[job["name"]], state, state.t)
    assert "MFU" not in shown and shown["TTFT"].endswith(("ms", "s")) and shown["TTFT"] != "—"
    # the header carries the serving figures of `estimate --json`; the panel shows them under their own names
    serving = est.serving
    assert job["ttft_p99_s"] == pytest.approx(serving["ttft_p99_s"], abs=1e-6)
    assert job["batch_limit"] == serving["batch_limit"] and job["saturated"] is serving["saturated"]
    assert job["mean_batch"] == pytest.approx(serving["mean_batch"], abs=0.01)
    assert 0.0 < job["kv_cache_use"] <= 1.0
    assert shown["batch"] == f"{job['mean_batch']:,.0f}/{job['batch_limit']:,}"
    assert shown["KV cache"] == f"{100 * job['kv_cache_use']:.0f}%"
    assert shown["saturated"] == ("YES" if job["saturated"] else "no")


def test_the_jobs_table_gives_serving_figures_their_own_columns() -> None:
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.jobs import JobsPanel

    topology = {"gpus": 128, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 64,
                "gpus_per_building": 64, "nodes": 16, "racks": 8, "pods": 2, "buildings": 1}
    jobs = [{"name": "train", "kind": "training", "first_gpu": 0, "gpus": 64, "tp": 8, "dp": 8},
            {"name": "chat", "kind": "inference", "first_gpu": 64, "gpus": 64, "tp": 4, "dp": 16,
             "ttft_s": 0.25, "tpot_s": 0.03, "requests_per_s": 120.0}]
    header = {"type": "header", "topology": topology, "jobs": jobs, "gpus": 128, "sample_interval_s": 1.0}
    state = DisplayState(header)
    for name in ("train", "chat"):
        state.apply({"t": 0.0, "type": "job_start", "job": name})
    panel = JobsPanel()
    _, both = panel.columns(120, 5, serving=True)
    _, training = panel.columns(120, 5)
    assert [c[0] for c in both[:5]] == ["state", "tok/s", "req/s", "TTFT", "TPOT"]
    assert "req/s" not in [c[0] for c in training] and "MFU" in [c[0] for c in training]
    text = panel._many(state, 0.0, 120).plain.splitlines()
    chat = next(line for line in text if line.startswith("chat"))
    train = next(line for line in text if line.startswith("train"))
    assert "250 ms" in chat and "30 ms" in chat and "120" in chat
    assert "ms" not in train                   # a training job has no latencies: its serving cells are "—"


def test_every_shown_column_of_the_jobs_table_sorts() -> None:
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.jobs import JobsPanel, sort_value

    topology = {"gpus": 192, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 64,
                "gpus_per_building": 192, "nodes": 24, "racks": 12, "pods": 3, "buildings": 1}
    jobs = [{"name": "train", "kind": "training", "first_gpu": 0, "gpus": 64, "tp": 8, "dp": 8},
            {"name": "chat", "kind": "inference", "first_gpu": 64, "gpus": 64, "tp": 4, "dp": 16,
             "ttft_s": 0.25, "tpot_s": 0.03, "requests_per_s": 120.0},
            {"name": "agent", "kind": "inference", "first_gpu": 128, "gpus": 64, "tp": 4, "dp": 16,
             "ttft_s": 0.05, "tpot_s": 0.04, "requests_per_s": 30.0}]
    state = DisplayState({"type": "header", "topology": topology, "jobs": jobs, "sample_interval_s": 1.0})
    for name in ("train", "chat", "agent"):
        state.apply({"t": 0.0, "type": "job_start", "job": name})
    panel = JobsPanel()
    panel._many(state, 0.0, 200)
    shown = [key for _, _, key in panel._headers]
    assert set(shown) - {"state"} <= set(panel.sortable)
    assert {"TTFT", "TPOT", "requests/s", "step", "$/M tokens"} <= set(panel.sortable)
    by_ttft = sorted(state.jobs.values(), key=lambda j: sort_value(j, "TTFT", state, 0.0))
    assert [j.name for j in by_ttft] == ["agent", "chat", "train"]       # no latency: last
    by_rate = sorted(state.jobs.values(), key=lambda j: sort_value(j, "requests/s", state, 0.0))
    assert [j.name for j in by_rate] == ["train", "agent", "chat"]
