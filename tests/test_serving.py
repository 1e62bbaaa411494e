"""The serving model (docs/performance-model.md 12): the scheduler's chunked prefill and paged K/V cache, the
iteration's cost, the job settings and their bad values, and what `estimate` and `record` report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.fields import Context
from clustertop.engine.config.scenario import Scenario, parse
from clustertop.engine.model.estimate import estimate_job
from clustertop.engine.model.inference import serve
from clustertop.engine.model.serving_cost import Iteration, IterationCost, touched_experts
from clustertop.engine.model.serving_engine import Engine, Requests
from clustertop.engine.model.serving_memory import serving_memory


def scenario(gpu: str = "h100-sxm-80gb", gpus: int = 1, **job: Any) -> Scenario:
    """One replica of Llama 3.1 8B (unless `job` says otherwise) on an HGX node, no faults."""
    base = {"name": "serve", "kind": "inference", "model": "llama3.1-8b", "tp": gpus, "dp": 1,
            "precision": "fp8", "request_rate": 4.0, "prompt_tokens": 512, "output_tokens": 128}
    cluster = {"gpu": gpu, "gpus": gpus, "gpus_per_node": max(gpus, 8) if gpus >= 8 else gpus,
               "scale_up": "nvswitch", "gpus_per_rack": gpus}
    return parse({"name": "t", "description": "t", "cluster": cluster, "jobs": [{**base, **job}],
                  "faults": {"enabled": False}}, Context("t"), "t")


def served(**job: Any) -> Any:
    s = scenario(**job)
    return serve(s, s.jobs[0])


# ---- the scheduler ---------------------------------------------------------------------------------------


class Flat(IterationCost):
    """An iteration costs 1 ms plus 1 us per token: easy to count."""

    def __init__(self) -> None:
        self.per_context = 0.0

    def seconds(self, it: Iteration) -> float:
        return 1e-3 + 1e-6 * (it.decode + it.prefill)

    def fixed(self, tokens: int, sampled: int) -> float:
        return 1e-3 + 1e-6 * tokens


def requests(n: int, prompt: int, output: int, every: float = 0.0) -> Requests:
    return Requests(np.arange(n) * every, np.full(n, prompt), np.full(n, output))


def test_a_long_prompt_is_prefilled_in_chunks_of_the_budget() -> None:
    out = Engine(Flat(), kv_tokens=100_000, budget=1000, max_batch=64).run(requests(1, 2500, 4))
    prefills = [p for _, _, _, _, p, _, _ in out.trace if p]
    assert prefills == [1000, 1000, 500]                   # 2,500 tokens in three iterations
    assert out.first[0] == pytest.approx(sum(s for _, s, _, _, p, _, _ in out.trace if p))
    assert out.done[0] > out.first[0]


def test_prefill_never_stalls_decode() -> None:
    # one request decoding, then a long prompt arrives: every iteration keeps the decode token
    req = Requests(np.array([0.0, 0.002]), np.array([10, 5000]), np.array([200, 2]))
    out = Engine(Flat(), kv_tokens=100_000, budget=1000, max_batch=64).run(req)
    mixed = [(n, p) for _, _, _, n, p, _, _ in out.trace if p and n]
    assert mixed and all(n == 1 and p == 999 for n, p in mixed[:4])   # the budget less the decode token


def test_the_cache_admits_only_what_it_can_hold_to_the_end() -> None:
    # 10 requests of 1,000 + 1,000 tokens at once, a cache of 5,000 tokens: two at a time
    out = Engine(Flat(), kv_tokens=5_000, budget=8192, max_batch=64).run(requests(10, 1000, 1000))
    assert np.isfinite(out.done).all() and out.preemptions == 0
    assert max(n for _, _, _, n, _, _, _ in out.trace) == 2


def test_a_request_longer_than_the_whole_cache_is_refused_and_the_others_served() -> None:
    req = Requests(np.array([0.0, 0.0, 0.5]), np.array([200, 200, 300]), np.array([100, 7000, 50]))
    out = Engine(Flat(), kv_tokens=6_000, budget=8192, max_batch=64).run(req)
    assert out.rejected == 1
    assert np.isnan(out.done[1]) and np.isfinite(out.done[[0, 2]]).all()


def test_a_job_whose_every_request_is_longer_than_the_cache_is_a_user_error() -> None:
    s = scenario(prompt_tokens=2_000_000, output_tokens=10, length_spread=0.0)
    with pytest.raises(UserError, match="do not fit a replica.s K/V cache"):
        estimate_job(s, s.jobs[0])


def test_the_frontend_adds_its_latency_to_every_first_token_and_nothing_else() -> None:
    direct, served_ = served(frontend_latency_ms=0.0), served(frontend_latency_ms=20.0)
    assert served_.ttft.median - direct.ttft.median == pytest.approx(0.020)
    assert served_.ttft.p99 - direct.ttft.p99 == pytest.approx(0.020)
    assert served_.tpot == direct.tpot and served_.tokens_per_s == direct.tokens_per_s


def test_the_same_requests_give_the_same_outcome() -> None:
    a, b = served(length_spread=0.7), served(length_spread=0.7)
    assert a == b


# ---- memory and cost -------------------------------------------------------------------------------------


def test_fp8_k_v_holds_twice_the_tokens() -> None:
    bf16 = scenario(kv_cache_dtype="bf16")
    fp8 = scenario(kv_cache_dtype="fp8")
    m16, m8 = serving_memory(bf16.cluster, bf16.jobs[0]), serving_memory(fp8.cluster, fp8.jobs[0])
    assert m8.kv_tokens == pytest.approx(2 * m16.kv_tokens, rel=0.01)
    assert m16.kv_cache == pytest.approx(m8.kv_cache)       # the same bytes, half as many per token


def test_the_cache_is_the_share_of_what_weights_and_activations_leave() -> None:
    s = scenario(kv_cache_fraction=0.5)
    m = serving_memory(s.cluster, s.jobs[0])
    free = m.capacity - m.weights - m.activations - m.reserve
    assert m.kv_cache == pytest.approx(0.5 * free, rel=1e-6)
    # requests of 640 tokens, each wasting half a 64-token block: as many as fit, at most max_batch
    assert m.batch_limit(640, 100_000) == m.kv_tokens // 672
    assert m.batch_limit(640, 8) == 8


def test_decode_gemms_read_the_weights_and_large_batches_are_compute_bound() -> None:
    s = scenario()
    cost = IterationCost(s.cluster, s.jobs[0])
    one, many = cost.parts(Iteration(1, 500)), cost.parts(Iteration(4096, 500 * 4096))
    weights = 8.03e9                                         # FP8: a byte per parameter, read once
    assert one["gemm"] == pytest.approx(weights / (3.35e12 * 0.8), rel=0.25)
    assert many["gemm"] > 10 * one["gemm"]                  # 4,096 tokens: the tensor cores decide
    assert many["decode_attention"] > 100 * one["decode_attention"]


def test_an_moe_batch_touches_more_experts_as_it_grows() -> None:
    assert touched_experts(128, 8, 1) == pytest.approx(8)
    assert 40 < touched_experts(128, 8, 8) < 60
    assert touched_experts(128, 8, 4096) == pytest.approx(128, rel=1e-3)


def test_moe_serving_with_expert_parallelism() -> None:
    dense = served(model="mixtral-8x7b", gpus=8, tp=8, precision="fp8")
    ep = served(model="mixtral-8x7b", gpus=8, tp=1, dp=8, ep=8, precision="fp8")
    assert dense.tokens_per_s > 0 and ep.tokens_per_s > 0
    assert not dense.saturated


# ---- load ------------------------------------------------------------------------------------------------


def test_latency_grows_with_the_load_and_the_replica_saturates() -> None:
    light, busy = served(request_rate=2.0), served(request_rate=60.0)
    assert busy.itl_mean_s > light.itl_mean_s and busy.mean_batch > 4 * light.mean_batch
    assert not light.saturated and light.requests_per_s == pytest.approx(2.0, rel=0.1)
    flood = served(request_rate=5000.0)
    assert flood.saturated and flood.requests_per_s < 5000 * 0.5
    assert flood.ttft.median > 10 * light.ttft.median


def test_an_offline_benchmark_fills_the_batch_and_a_larger_batch_serves_more() -> None:
    small, large = (served(request_rate="max", requests=1000, max_batch=b, length_spread=0.0)
                    for b in (64, 256))
    assert small.saturated and small.mean_batch > 0.9 * 64 and large.mean_batch > 0.9 * 256
    assert large.tokens_per_s > 1.3 * small.tokens_per_s     # decode reads the weights once for the batch
    assert large.itl_mean_s > small.itl_mean_s               # ... at a longer iteration


# ---- estimate, record and bad input on the command line ----------------------------------------------------


def write(tmp_path: Path, **job: Any) -> str:
    lines = ['name = "t"', 'description = "t"', "[cluster]", 'gpu = "h100-sxm-80gb"', "gpus = 8",
             "gpus_per_node = 8", "[faults]", "enabled = false", "[[jobs]]"]
    settings = {"name": "chat", "kind": "inference", "model": "llama3.1-8b", "tp": 1, "dp": 8,
                "request_rate": 40.0, **job}
    lines += [f"{k} = {orjson.dumps(v).decode()}" for k, v in settings.items()]
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_estimate_json_reports_the_serving_figures(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", write(tmp_path), "--json"]) == 0
    job = orjson.loads(capsys.readouterr().out)["jobs"][0]
    keys = {"tokens_per_s", "requests_per_s", "ttft_s", "tpot_s", "ttft_mean_s", "tpot_mean_s", "ttft_p99_s",
            "tpot_p99_s", "batch_limit", "mean_batch", "saturated"}
    assert keys <= set(job)
    assert job["saturated"] is False and job["requests_per_s"] == pytest.approx(40.0, rel=0.1)
    assert job["ttft_s"] <= job["ttft_p99_s"] and job["tpot_s"] <= job["tpot_p99_s"]
    assert job["tokens_per_s"] == pytest.approx(job["requests_per_s"] * 256, rel=0.15)


@pytest.mark.parametrize("job, expected", [
    ({"length_spread": -0.5}, "length_spread"),
    ({"kv_cache_fraction": 1.5}, "kv_cache_fraction"),
    ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
    ({"request_rate": "lots"}, "request_rate"),
    ({"frontend_latency_ms": -1}, "frontend_latency_ms"),
    ({"model": "llama3.1-405b", "precision": "bf16"}, "leaving no room for a K/V cache"),
])
def test_bad_serving_settings_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              job: dict[str, Any], expected: str) -> None:
    assert main(["estimate", write(tmp_path, **job)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err


def test_training_settings_refuse_serving_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\ndescription = "t"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n[[jobs]]\n'
                    'name = "pre"\nmodel = "llama3.1-8b"\nseq_len = 8192\nglobal_batch = 64\n'
                    'max_tokens_per_step = 4096\n')
    assert main(["estimate", str(path)]) == 2
    assert "inference" in capsys.readouterr().err


def test_record_counts_an_inference_jobs_tokens_and_requests(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path)
    assert main(["estimate", base, "--json"]) == 0
    est = orjson.loads(capsys.readouterr().out)["jobs"][0]
    assert main(["record", base, "--duration", "10m", "--json", "-o", str(tmp_path / "r.jsonl")]) == 0
    job = orjson.loads(capsys.readouterr().out)["jobs"]["chat"]
    assert job["tokens"] == pytest.approx(est["tokens_per_s"] * 600, rel=0.05)
    assert job["requests"] == pytest.approx(est["requests_per_s"] * 600, rel=0.05)


def test_site_serving_jobs_keep_up() -> None:
    from clustertop.engine.config import scenario as sc

    for name in ("prometheus-1gw", "hyperion-5gw", "inference-serving"):
        s = sc.load(name)
        for job in s.jobs:
            if job.kind == "inference":
                e = estimate_job(s, job, plan=False, hints=False)
                assert e.serving["saturated"] is False, (name, job.name)
                assert e.serving["requests_per_s"] == pytest.approx(float(job.request_rate), rel=0.05)
                assert math.isfinite(e.serving["ttft_p99_s"]) and e.serving["ttft_p99_s"] < 10


# ---- what a review found ---------------------------------------------------------------------------------


def test_pipeline_stages_add_up_in_every_iteration() -> None:
    # TP 1 x PP 8 at batch 1 reads all 70 GB of FP8 weights per token, stage after stage: slower than TP 8
    tp8 = served(gpus=8, model="llama3.1-70b", request_rate=0.5, length_spread=0.0, tp=8)
    pp8 = served(gpus=8, model="llama3.1-70b", request_rate=0.5, length_spread=0.0, tp=1, pp=8)
    assert pp8.tpot.median > 2 * tp8.tpot.median
    gpu = scenario().cluster.gpu
    assert pp8.tpot.median > 70e9 / (gpu.hbm_tb_s * 1e12 * gpu.hbm_efficiency)


def test_an_overloaded_replica_still_reports_what_it_serves() -> None:
    flooded = served(request_rate=1e9, length_spread=0.0)
    offline = served(request_rate="max", length_spread=0.0)
    assert flooded.saturated and flooded.tokens_per_s == pytest.approx(offline.tokens_per_s, rel=0.15)


def test_a_benchmark_of_n_requests_offered_too_fast_is_saturated() -> None:
    light = served(request_rate=2.0, requests=300, length_spread=0.0)
    heavy = served(request_rate=100_000.0, requests=300, length_spread=0.0)
    assert not light.saturated and heavy.saturated


def test_prefill_that_would_take_millions_of_iterations_is_refused() -> None:
    s = scenario(prompt_tokens=100_000, max_tokens_per_step=1, length_spread=0.0)
    with pytest.raises(UserError, match="max_tokens_per_step"):
        serve(s, s.jobs[0])


def test_one_token_answers_have_no_tpot_and_the_json_stays_json(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", write(tmp_path, output_tokens=1, length_spread=0.0), "--json"]) == 0
    job = orjson.loads(capsys.readouterr().out)["jobs"][0]         # orjson refuses NaN
    assert job["tpot_s"] is None and job["tpot_p99_s"] is None and job["itl_mean_s"] is None
    assert job["ttft_s"] > 0


def test_a_cache_that_refuses_most_requests_is_a_user_error() -> None:
    s = scenario(kv_cache_fraction=0.0005, prompt_tokens=2048, output_tokens=512)
    with pytest.raises(UserError, match="kv_cache_fraction"):
        serve(s, s.jobs[0])


def test_an_slo_reads_a_null_latency_as_none_had_it_and_a_missing_one_as_unknown() -> None:
    from clustertop.engine.sweep.results import facts, parse_slo

    job = {"name": "chat", "kind": "inference", "fits": True, "gpus": 8, "step_time_s": 1.0,
           "tokens_per_s": 1000.0, "memory_gb_per_gpu": 40.0, "saturated": False, "ttft_p99_s": 0.5}
    slo = parse_slo("ttft=1s,tpot=50ms")
    one_token = facts({"index": 0, "jobs": [{**job, "tpot_p99_s": None}]})
    old_record = facts({"index": 1, "jobs": [job]})
    assert slo.met(one_token) and not slo.met(old_record)


@pytest.mark.parametrize("text", ["", "ttft=1s,ttft=2s", "ttft=2", "latency=1s"])
def test_an_slo_that_does_not_parse_is_one_line_and_exit_2(text: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "serve-405b", "--vary", "jobs[0].tp=8,16", "--slo", text]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--slo" in err
