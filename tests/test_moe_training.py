"""Training an MoE model as its runs did: DeepSeek-V3's multi-token prediction module, the token dispatch
(NCCL's all-to-all or DeepEP's one copy per node), the local experts' GEMMs (a kernel each or one grouped
kernel), and MLA's recomputed up-projections."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.config import catalog, scenario
from clustertop.engine.model import calibration as cal
from clustertop.engine.model import chunks
from clustertop.engine.model import compute as cm
from clustertop.engine.model.estimate import estimate
from clustertop.engine.model.step import ep_network_share, shard

DSV3 = catalog.models()["deepseek-v3"]
NO_MTP = dataclasses.replace(DSV3, mtp_layers=0)


def _job(**settings: object) -> scenario.Scenario:
    """deepseek-v3-2048 with some job settings changed."""
    base = scenario.load("deepseek-v3-2048")
    job = dataclasses.replace(base.jobs[0], **settings)     # type: ignore[arg-type]
    return dataclasses.replace(base, jobs=[job])


def test_deepseek_v3_trains_with_one_mtp_module_after_its_last_layer() -> None:
    assert DSV3.mtp_layers == 1
    g = chunks.grid(DSV3, 16, 1)
    layout = g.spread(g.chunks)
    last = layout[-1][-1]
    assert last.output and last.mtp == 1
    assert sum(st.mtp for stage in layout for st in stage) == 1
    # the module takes a layer's place in the split: 61 layers and the module on 16 stages, the last lighter
    assert sum(st.layers for stage in layout for st in stage) == 61
    assert last.layers == 2 and layout[-2][-1].layers == 4
    assert chunks.grid(NO_MTP, 16, 1).layers[-1, -1] == 3


def test_the_mtp_module_holds_a_layer_a_projection_and_the_embedding() -> None:
    columns = [chunks.stage_columns(m, 1, 8, 16, 1) for m in (DSV3, NO_MTP)]
    with_mtp, without = (c.kinds[c.at[-1]] for c in columns)          # the last stage's
    h = DSV3.hidden
    layer = cm.layer_params_per_gpu(DSV3, True, 1, 8)
    # one layer fewer on the stage, the module's layer, projection and norms, and the embedding table
    assert with_mtp.params - without.params == pytest.approx(2 * h * h + 2 * h + DSV3.vocab * h)
    assert with_mtp.expert_params == pytest.approx(without.expert_params)      # a layer for a layer
    assert layer > 2 * h * h


def test_mtp_flops_per_token_match_the_published_counts() -> None:
    """Megatron-Bridge's table gives TFLOP/s and tokens/s per GPU: their ratio is its FLOPs per token, with
    MTP (the B200 row) and without (the GB200 rows). The model's own count moves by the same ratio."""
    bridge = cal.records(cal.tables()["megatron_bridge_2511"])
    ratios = {r["system"]: r["tflops"] * 1e12 / r["tok_s_gpu"] for r in bridge if r["model"] == "deepseek-v3"}
    published = ratios["b200"] / ratios["gb200"]
    ours = cm.model_flops_per_token(DSV3, 4096) / cm.model_flops_per_token(NO_MTP, 4096)
    assert ours == pytest.approx(published, rel=0.01)
    assert ratios["gb200"] < cal.MTP_FLOPS_SPLIT < ratios["b200"]


def test_a_job_can_train_without_the_mtp_module(tmp_path: Path) -> None:
    text = Path("scenarios/deepseek-v3-2048.toml").read_text()
    path = tmp_path / "no-mtp.toml"
    path.write_text(text.replace('\nschedule = "dualpipe"\n', '\nschedule = "dualpipe"\nmtp_layers = 0\n'))
    off = scenario.load(str(path))
    on = scenario.load("deepseek-v3-2048")
    assert off.jobs[0].model.mtp_layers == 0 and on.jobs[0].model.mtp_layers == 1
    fast, slow = estimate(off, plan=False).jobs[0], estimate(on, plan=False).jobs[0]
    assert fast.step_time_s < slow.step_time_s           # the last stage carries the module and a second head
    assert fast.memory_gb_per_gpu < slow.memory_gb_per_gpu


def test_deepep_sends_a_token_once_per_node_at_most_four() -> None:
    deepep = _job(ep_dispatch="deepep").jobs[0]
    nccl = _job(ep_dispatch="alltoall").jobs[0]
    # 8 routed experts on 8 nodes, at most 4 of them (DeepSeek-V3's node-limited routing): 4 copies of 8
    assert ep_network_share(deepep, 8) == pytest.approx(0.5)
    unlimited = dataclasses.replace(deepep, model=dataclasses.replace(DSV3, routed_nodes=0))
    assert ep_network_share(unlimited, 8) == pytest.approx(1 - (7 / 8) ** 8)
    assert ep_network_share(nccl, 8) == 1.0 and ep_network_share(deepep, 1) == 1.0
    fast = estimate(_job(ep_dispatch="deepep"), plan=False).jobs[0]
    slow = estimate(_job(ep_dispatch="alltoall"), plan=False).jobs[0]
    assert fast.breakdown_s["ep"] < slow.breakdown_s["ep"] / 2


def test_deepseek_v3_on_h800_near_its_published_rate() -> None:
    """180K H800 GPU hours per trillion tokens (DeepSeek-V3 report, table 1): 1,543 tokens/s per GPU."""
    est = estimate(scenario.load("deepseek-v3-2048"), plan=False).jobs[0]
    assert est.tokens_per_s / 2048 == pytest.approx(1e12 / (180e3 * 3600), rel=0.05)


def test_a_kernel_per_expert_loses_to_one_grouped_kernel_with_few_tokens_each() -> None:
    gpu = catalog.gpus()["b200-sxm-180gb"]
    run = cal.scenario(next(r for r in cal.rows() if "deepseek-v3 fp8-mx b200" in r.name)).jobs[0]
    sh = shard(run, 1)
    per_expert = cm.layer_cost(gpu, DSV3, True, sh, "none")
    grouped = cm.layer_cost(gpu, DSV3, True, dataclasses.replace(sh, expert_gemm="grouped"), "none")
    assert per_expert.fwd.compute_s > grouped.fwd.compute_s
    assert per_expert.bwd.compute_s > grouped.bwd.compute_s
    assert per_expert.fwd.flops == grouped.fwd.flops
    # a dense layer has no experts: the same either way
    dense = [cm.layer_cost(gpu, DSV3, False, dataclasses.replace(sh, expert_gemm=g), "none").fwd.compute_s
             for g in ("per_expert", "grouped")]
    assert dense[0] == dense[1]


def test_selective_recompute_runs_mla_up_projections_again() -> None:
    gpu = catalog.gpus()["h800-sxm-80gb"]
    sh = shard(scenario.load("deepseek-v3-2048").jobs[0], 1)
    rec = cm.layer_cost(gpu, DSV3, True, sh, "selective").recompute
    assert rec is not None
    h = DSV3.heads
    d_qk, d_v, _ = cm.attention_dims(DSV3)
    up = 2.0 * sh.tokens * (h * d_qk * DSV3.q_lora_rank + h * (DSV3.dim_head + d_v) * DSV3.kv_lora_rank)
    assert rec.flops == pytest.approx(up)
    assert rec.compute_s > cm.gemm_time(gpu, sh.precision, sh.tokens, h * d_qk, DSV3.q_lora_rank)
    llama = catalog.models()["llama3.1-405b"]         # no MLA: only memory-bound work recomputed
    assert cm.layer_cost(gpu, llama, False, sh, "selective").recompute.flops == 0.0  # type: ignore[union-attr]


@pytest.mark.parametrize(("line", "key"), [("mtp_layers = -1", "mtp_layers"),
                                           ('ep_dispatch = "nccl"', "ep_dispatch"),
                                           ("expert_gemm = 3", "expert_gemm")])
def test_bad_moe_settings_are_one_line_with_exit_2(tmp_path: Path, line: str, key: str) -> None:
    text = Path("scenarios/deepseek-v3-2048.toml").read_text()
    for own in ('ep_dispatch = "deepep"\n', 'expert_gemm = "grouped"\n'):
        text = text.replace(own, "")         # the scenario's own settings out: the bad one is the only one
    path = tmp_path / "bad.toml"
    path.write_text(text.replace('\nschedule = "dualpipe"\n', f'\nschedule = "dualpipe"\n{line}\n'))
    done = subprocess.run([sys.executable, "-m", "clustertop", "estimate", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and key in done.stderr and str(path) in done.stderr


def test_estimate_names_how_the_moe_layers_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "deepseek-v3-2048", "--json"]) == 0
    stack = orjson.loads(capsys.readouterr().out)["jobs"][0]["stack"]
    assert (stack["ep_dispatch"], stack["expert_gemm"], stack["mtp_layers"]) == ("deepep", "grouped", 1)
    assert main(["estimate", "deepseek-v3-2048"]) == 0
    assert "MoE dispatch deepep, grouped expert GEMMs; 1 MTP module" in capsys.readouterr().out
    assert main(["estimate", "llama3-405b-16k", "--json"]) == 0       # a dense model: no MoE entries
    assert not {"ep_dispatch", "expert_gemm", "mtp_layers"} & set(
        orjson.loads(capsys.readouterr().out)["jobs"][0]["stack"])
