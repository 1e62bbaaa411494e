"""The software stack as job settings: each one changes what it should, and shows in the breakdown."""

from __future__ import annotations

import pytest
from clustertop.engine.config import catalog
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.fields import Context
from clustertop.engine.config.scenario import parse
from clustertop.engine.model.estimate import JobEstimate, estimate_job


def estimate(gpu: str = "h100-sxm-80gb", gpus: int = 64, **job: object) -> JobEstimate:
    spec: dict[str, object] = {"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 256, "micro_batch": 1,
                               "tp": 1, "pp": 1, "zero": 1, "recompute": "none"}
    spec.update(job)
    s = parse({"name": "stack", "cluster": {"gpu": gpu, "gpus": gpus, "scale_out": "ib-ndr-400g"},
               "jobs": [spec], "variability": {"straggler_sigma": 0.0}}, Context("stack.toml"), "")
    return estimate_job(s, s.jobs[0], plan=False)


def test_defaults_are_todays_megatron() -> None:
    s = parse({"name": "d", "cluster": {"gpu": "h100-sxm-80gb", "gpus": 8},
               "jobs": [{"model": "llama3.1-8b", "seq_len": 4096, "global_batch": 8}]}, Context("d.toml"), "")
    job = s.jobs[0]
    assert (job.overlap_grad_reduce, job.overlap_param_gather, job.tp_comm_overlap, job.grad_reduce_dtype,
            job.attention_kernel, job.overlap_p2p_comm, job.fused_kernels, job.dropout) == \
        (True, True, False, "fp32", "auto", True, True, 0.0)


def test_no_dp_overlap_exposes_the_gradient_reduction() -> None:
    overlapped = estimate()
    exposed = estimate(overlap_grad_reduce=False)
    assert exposed.breakdown_s["dp"] > overlapped.breakdown_s["dp"] + 0.01
    assert exposed.step_time_s > overlapped.step_time_s


def test_bf16_gradients_halve_the_reduction() -> None:
    fp32 = estimate(overlap_grad_reduce=False)
    bf16 = estimate(overlap_grad_reduce=False, grad_reduce_dtype="bf16")
    assert bf16.breakdown_s["dp"] == pytest.approx(fp32.breakdown_s["dp"] / 2, rel=0.1)
    assert bf16.memory_gb["gradients"] == pytest.approx(fp32.memory_gb["gradients"] / 2, rel=0.01)


def test_the_parameter_gather_ahead_or_exposed() -> None:
    ahead = estimate()
    exposed = estimate(overlap_param_gather=False)
    assert exposed.breakdown_s["dp"] > ahead.breakdown_s["dp"]


def test_fsdp_gathers_every_layer_behind_compute() -> None:
    fsdp = estimate(zero=3)
    exposed = estimate(zero=3, overlap_param_gather=False, overlap_grad_reduce=False)
    assert exposed.breakdown_s["dp"] > 3 * fsdp.breakdown_s.get("dp", 0.0)
    assert fsdp.memory_gb["weights"] < estimate().memory_gb["weights"] / 10


def test_tp_communication_overlap_hides_behind_the_gemms() -> None:
    plain = estimate(tp=8, gpus=64)
    overlapped = estimate(tp=8, gpus=64, tp_comm_overlap=True)
    assert overlapped.breakdown_s["tp"] < 0.5 * plain.breakdown_s["tp"]
    assert overlapped.step_time_s < plain.step_time_s


def test_attention_kernels() -> None:
    fa3 = estimate(attention_kernel="flash3")
    fa2 = estimate(attention_kernel="flash2")
    assert fa2.breakdown_s["compute"] > fa3.breakdown_s["compute"]
    fa1 = estimate(attention_kernel="flash1")
    assert fa1.breakdown_s["compute"] > fa2.breakdown_s["compute"]
    # the older kernel costs more where attention is more of the work: long sequences
    loss = {seq: estimate(attention_kernel="flash1", seq_len=seq, recompute="full").step_time_s /
            estimate(attention_kernel="flash2", seq_len=seq, recompute="full").step_time_s
            for seq in (1024, 8192)}
    assert 1.0 < loss[1024] < loss[8192]
    assert estimate(attention_kernel="auto").step_time_s == fa3.step_time_s          # Hopper: FA3 / cuDNN
    with pytest.raises(UserError, match="attention_kernel"):
        estimate(gpu="a100-sxm-80gb", attention_kernel="flash3")


def test_unfused_attention_stores_and_moves_the_scores() -> None:
    short = {"gpu": "a100-sxm-80gb", "seq_len": 2048}
    fused = estimate(attention_kernel="flash2", **short)
    unfused = estimate(attention_kernel="unfused", **short)
    assert unfused.step_time_s > 1.05 * fused.step_time_s    # the scores written and read back
                                                             # (at seq 2048: +8%)
    assert unfused.memory_gb["activations"] > fused.memory_gb["activations"] + 1
    selective = estimate(attention_kernel="unfused", recompute="selective", **short)
    assert selective.memory_gb["activations"] < unfused.memory_gb["activations"]    # scores recomputed


def test_one_fused_softmax_kernel_passes_over_the_scores_once_op_by_op_three_times() -> None:
    from clustertop.engine.model.compute import SOFTMAX_BYTES

    short = {"gpu": "a100-sxm-80gb", "seq_len": 4096, "recompute": "full"}
    flash, fused, op_by_op = (estimate(attention_kernel=k, **short).breakdown_s["compute"]
                              for k in ("flash2", "fused_softmax", "unfused"))
    assert flash < fused < op_by_op
    # the difference is the elementwise passes alone: the same GEMMs, more bytes per score
    assert SOFTMAX_BYTES["unfused"][0] > 3 * SOFTMAX_BYTES["fused_softmax"][0]
    assert estimate(attention_kernel="fused_softmax", **short).stack["attention_kernel"] == "fused_softmax"


def test_dropout_keeps_masks() -> None:
    assert estimate(dropout=0.1).memory_gb["activations"] > estimate().memory_gb["activations"]


def test_blocking_pipeline_sends_wait() -> None:
    asynchronous = estimate(pp=4, micro_batch=1, virtual_stages=2)
    blocking = estimate(pp=4, micro_batch=1, virtual_stages=2, overlap_p2p_comm=False)
    assert blocking.breakdown_s["pp"] > asynchronous.breakdown_s.get("pp", 0.0)
    assert blocking.step_time_s > asynchronous.step_time_s


def test_a_non_interleaved_pipeline_always_waits_for_its_sends() -> None:
    # Megatron overlaps pipeline sends with compute only in the interleaved schedule; 1F1B without virtual
    # stages (and DeepSpeed's pipeline engine) sends and receives blocking, whatever overlap_p2p_comm says
    said = estimate(pp=4, micro_batch=1, virtual_stages=1, overlap_p2p_comm=True)
    blocking = estimate(pp=4, micro_batch=1, virtual_stages=1, overlap_p2p_comm=False)
    assert said.step_time_s == blocking.step_time_s and said.breakdown_s["pp"] > 0


def test_eager_pytorch_moves_more_bytes_for_rmsnorm_models() -> None:
    # Llama (RMSNorm, SwiGLU, rotary) unfused in eager PyTorch is slower; MPT (LayerNorm, GELU, ALiBi) hardly
    assert estimate(fused_kernels=False).step_time_s > 1.05 * estimate().step_time_s
    mpt = {"model": "mpt-7b", "seq_len": 2048}
    assert estimate(fused_kernels=False, **mpt).step_time_s < 1.05 * estimate(**mpt).step_time_s


def test_2021_megatron_is_expressible() -> None:
    """Megatron-LM as Narayanan et al. ran it: no DP overlap, FP32 all-reduce, no FlashAttention, dropout,
    blocking pipeline sends."""
    old = estimate(gpu="a100-sxm-80gb", tp=8, pp=2, zero=0, dropout=0.1, attention_kernel="unfused",
                   overlap_grad_reduce=False, overlap_param_gather=False, overlap_p2p_comm=False,
                   grad_reduce_dtype="fp32", recompute="full", model="gpt3-20b", seq_len=2048, gpus=128)
    assert old.fits and old.breakdown_s["dp"] > 0 and old.breakdown_s["pp"] > 0


def test_the_loss_over_a_large_vocabulary_costs_what_its_kernels_move() -> None:
    from clustertop.engine.model.compute import CROSS_ENTROPY

    # Llama 3.1 8B: a 128K vocabulary on 4,096 hidden; op by op, Megatron's vocab-parallel loss passes over
    # the FP32 logits six times forward and twice back, the fused kernel once each way
    fused = estimate(cross_entropy_fusion=True)
    op_by_op = estimate(cross_entropy_fusion=False)
    eager = estimate(fused_kernels=False)
    assert fused.step_time_s < op_by_op.step_time_s and fused.step_time_s < eager.step_time_s
    logits = 256 * 4096 * 128256 / 64                    # logits per GPU per step (TP 1)
    extra = sum(CROSS_ENTROPY["vocab_parallel"][:2]) - sum(CROSS_ENTROPY["fused"][:2])
    gpu = catalog.gpus()["h100-sxm-80gb"]
    moved = logits * extra / (gpu.hbm_tb_s * 1e12 * gpu.hbm_efficiency)
    assert op_by_op.breakdown_s["compute"] - fused.breakdown_s["compute"] == pytest.approx(moved, rel=0.05)
    assert op_by_op.stack["cross_entropy_fusion"] is False and fused.stack["cross_entropy_fusion"] is True


def test_the_output_layer_is_its_own_figure_and_grows_with_the_loss_it_runs() -> None:
    fused, op_by_op = estimate(cross_entropy_fusion=True), estimate(cross_entropy_fusion=False)
    assert fused.output_layer_s is not None and op_by_op.output_layer_s is not None
    assert 0 < fused.output_layer_s < fused.breakdown_s["compute"]
    # the whole difference in compute is the output layer's
    assert op_by_op.output_layer_s - fused.output_layer_s == pytest.approx(
        op_by_op.breakdown_s["compute"] - fused.breakdown_s["compute"], rel=0.02)
    # Llama 3.1 8B, TP 1: the logits GEMM alone is 2 x 4,096 x 128,256 FLOPs per token of 2 x 7.5B
    assert 0.05 < fused.output_layer_s / fused.breakdown_s["compute"] < 0.25


def test_offload_moves_memory_to_the_host_and_costs_what_the_host_link_cannot_hide() -> None:
    big = {"model": "llama3.1-70b", "tp": 8, "seq_len": 2048, "global_batch": 64, "micro_batch": 1}
    none = estimate(**big)
    acts = estimate(offload="activations", **big)
    opt = estimate(offload="optimizer", **big)
    assert acts.memory_gb["activations"] < 0.25 * none.memory_gb["activations"]
    assert opt.memory_gb["optimizer"] == 0 and none.memory_gb["optimizer"] > 0
    assert acts.step_time_s >= none.step_time_s and opt.step_time_s > none.step_time_s
    # Adam on the CPU: the shard's gradients down, weights back (PCIe), 34 bytes per parameter in host memory
    gpu = catalog.gpus()["h100-sxm-80gb"]
    shard = 70.6e9 / 8 / 8                                  # TP 8, DP 8: this GPU's parameters
    host = shard * (4 + 2) / (gpu.host_link_gb_s * 1e9) + shard * 34 / (gpu.host_memory_gb_s * 1e9)
    assert opt.breakdown_s["optimizer"] == pytest.approx(host, rel=0.05)
    # a slower host link exposes more of the activations' copies
    slow = estimate(gpu="a100-sxm-80gb", offload="activations", **big)
    fast = estimate(gpu="a100-sxm-80gb", **big)
    assert slow.breakdown_s["compute"] > fast.breakdown_s["compute"]
