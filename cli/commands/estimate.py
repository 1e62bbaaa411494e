"""`clustertop estimate`: what one training step of each job costs, as a table or one JSON object."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from clustertop.engine.config import scenario, units
from clustertop.engine.config.phases import PHASE_LABELS

if TYPE_CHECKING:
    from clustertop.engine.model.estimate import JobEstimate, ScenarioEstimate
    from clustertop.engine.model.uncertainty import Band



def main(args: argparse.Namespace) -> int:
    scen = scenario.load(args.scenario)
    # numpy and the model are imported once the file is known to be good: a refusal stays quick
    from clustertop.engine.model.estimate import estimate, to_json

    est = estimate(scen)
    if args.json:
        print(json.dumps(to_json(est)))
    else:
        print(render(est, scen.description))
    return 0


SCALE_UP_NAMES = {"nvswitch": "NVSwitch", "nvl72": "an NVL72 NVLink domain (a rack)",
                  "xgmi-mesh": "an Infinity Fabric mesh (no switch: a link to each peer)",
                  "roce-mesh": "an on-chip RoCE mesh (no switch: links to each peer)",
                  "torus-2d": "2D torus", "torus-3d": "3D torus", "pcie": "PCIe through the host CPU"}


def render(est: ScenarioEstimate, description: str = "") -> str:
    """The human-readable table: the cluster, its scale-up domain and optics, then one block per job."""
    c = est.cluster
    where = (f"cluster     {units.count(c['gpus'], 'GPU')}, {units.count(c['nodes'], 'node')}, "
             f"{units.count(c['pods'], 'pod')}, "
             f"{units.count(c['buildings'], 'building')}; IT power {units.power(c['it_power_mw'])}, "
             f"facility {units.power(c['facility_power_mw'])}")
    lines = [f"{est.scenario}" + (f": {description}" if description else ""), where, _scale_up(c["scale_up"])]
    tiers = ", ".join(f"{tier} {n:,}" for tier, n in c["transceivers_by_tier"].items())
    lines.append(f"optics      {c['transceivers']:,} {c['optics']} transceivers"
                 + (f" ({tiers})" if tiers else "") + f": {units.power(c['optics_mw'])}"
                 if c["transceivers"] else "optics      none (no optical links)")
    for job in est.jobs:
        lines.append("")
        lines.extend(_job_lines(job))
    return "\n".join(lines)


def _scale_up(s: dict[str, Any]) -> str:
    """'scale-up    nodes of 8 GPUs on NVSwitch (nvlink4: 450 GB/s per GPU per direction, busbw 370 GB/s)'"""
    name = SCALE_UP_NAMES.get(str(s["kind"]), str(s["kind"]))
    if "torus" in s:
        name = "a " + " x ".join(map(str, s["torus"])) + " " + name
    links = f" over {s['links_per_gpu']} links of {s['gb_s_per_link']:g}" if "links_per_gpu" in s else ""
    return (f"scale-up    nodes of {s['gpus']:,} GPUs on {name} "
            f"({s['link']}: {s['gb_s_per_gpu']:g} GB/s per GPU per direction{links}, "
            f"busbw {s['busbw_gb_s']:g} GB/s)")


def _energy_lines(e: JobEstimate) -> list[str]:
    """Power, energy per step and per token, dollars per million tokens, a 54-day run."""
    x = e.economics
    if x.get("energy_j_per_token") is None:
        return []
    step = f"{x['energy_j_per_step'] / 1e6:,.1f} MJ per step, " if e.kind == "training" else ""
    return [(f"  energy      {units.power(x['power_mw'])} (facility); "
             f"{step}{x['energy_j_per_token']:.2f} J per token, "
             f"{x['tokens_per_s_per_mw']:,.0f} tokens/s per MW"),
            (f"  cost        {units.usd(x['usd_per_mtoken'])} per million tokens "
             f"({units.usd(x['usd_per_hour'])} per hour)"),
            (f"  54 days     {units.energy(x['run_54d_mwh'])}, {units.usd(x['run_54d_usd'])} "
             "(steady state, no interruptions)")]


def _job_lines(e: JobEstimate) -> list[str]:
    if e.kind == "inference":
        return _inference_lines(e)
    j = e.job
    first = j.first_gpu
    head = (f"job {e.name}: {j.model.name} on {units.count(e.gpus, 'GPU')} "
            f"({first:,}-{first + e.gpus - 1:,}), "
            f"seq {j.seq_len:,}, global batch {j.global_batch:,} sequences")
    out = [head]
    dims = []
    for d in ("tp", "cp", "pp", "dp", "ep"):
        tier = e.tiers.get(d)
        dims.append(f"{d.upper()} {getattr(j, d)}" + (f" ({tier})" if tier else ""))
    out.append("  layout      " + "  ".join(dims) + "   (tier each dimension crosses)")

    def setting(key: str) -> str:
        value = getattr(j, key)
        return f"{key} {value}" + (" (auto)" if key in e.chosen else "")

    out.append("  settings    "
               + ", ".join(setting(k) for k in ("micro_batch", "virtual_stages", "recompute"))
               + f", zero {j.zero}, {j.precision}, {j.schedule}"
               + (", sequence parallel" if j.sequence_parallel and j.tp > 1 else "")
               + f"; {e.microbatches} microbatches per replica")
    if e.stack:
        out.append("  stack       " + _stack(e.stack))
    if e.fits and e.step_time_s is not None:
        out.append(f"  step        {e.step_time_s:,.3f} s   {units.si(e.tokens_per_s or 0)} tokens/s")
        band = e.step_time_range_s()
        if band is not None and e.band is not None:
            out.append(f"  likely      {band[0]:,.2f}-{band[1]:,.2f} s per step: " + _trust(e.band))
        out.append(f"  model       {e.model_tflops_per_gpu:,.1f} TFLOP/s per GPU   "
                   f"MFU {100 * (e.mfu or 0):.1f}%")
        out.append(f"  hardware    {e.hardware_tflops_per_gpu:,.1f} TFLOP/s per GPU (counting recomputation)")
        if e.contention:
            out.append("  neighbours  " + _contention(e.contention))
        step = e.step_time_s
        parts = [f"{PHASE_LABELS.get(k, k)} {v:,.3f} s ({100 * v / step:.1f}%)"
                 for k, v in e.breakdown_s.items()]
        out.append("  time        " + parts[0])
        out.extend("              " + p for p in parts[1:])
        if e.output_layer_s:
            out.append(f"  output      {e.output_layer_s:,.3f} s per step on the last stage (in computing): "
                       f"the logits GEMM over {j.model.vocab:,} tokens of vocabulary and the loss"
                       + ("" if e.stack.get("cross_entropy_fusion") else ", op by op"))
        out.extend(_energy_lines(e))
    else:
        out.append("  step        - (does not fit in GPU memory)")
    return out + _memory_lines(e)


def _contention(c: dict[str, Any]) -> str:
    """What the jobs sharing its tiers cost a job: its step alone, the slowdown, where, its share there."""
    shares = ", ".join(f"{tier} {100 * share:.0f}%" for tier, share in c["contention_shares"].items())
    where = f" on the {c['contention_tier']} tier" if c["contention_tier"] else ""
    return (f"alone {c['step_time_alone_s']:.3f} s, "
            f"x{c['contention_slowdown']:.3f} with the other jobs{where}"
            + (f"; its share of the busiest shared block: {shares}" if shares else "; shares no tier"))


def _memory_lines(e: JobEstimate) -> list[str]:
    """Memory per GPU, its parts, fits or not, and the hint when there is one (training and inference)."""
    verdict = "fits" if e.fits else "OUT OF MEMORY"
    out = [f"  memory      {units.memory(e.memory_gb_per_gpu, e.capacity_gb)} per GPU: {verdict}",
           "              " + ", ".join(f"{k} {units.gb(v, 2)}" for k, v in e.memory_gb.items())]
    if e.note:
        out.append(f"  hint        {e.note}")
    return out


def _inference_lines(e: JobEstimate) -> list[str]:
    j, s = e.job, e.serving
    first = j.first_gpu
    rate = ("every request at once (offline)" if j.request_rate == "max"
            else f"{float(j.request_rate):,g} requests/s")
    spread = f", lengths spread {j.length_spread:g}" if j.length_spread else ", fixed lengths"
    out = [(f"job {e.name} (inference): {j.model.name} on {units.count(e.gpus, 'GPU')} "
            f"({first:,}-{first + e.gpus - 1:,}), {rate}, prompts ~{j.prompt_tokens:,} tokens, "
            f"answers ~{j.output_tokens:,}{spread}")]
    out.append(f"  layout      TP {j.tp}  PP {j.pp}  replicas {j.dp:,}" + (f"  EP {j.ep}" if j.ep > 1 else "")
               + f"; {j.precision}, in-flight batching of up to {j.max_batch:,} requests and "
               f"{j.max_tokens_per_step:,} tokens per iteration (chunked prefill)")
    if e.tokens_per_s is None:
        return out + _memory_lines(e)
    state = "SATURATED: the replicas serve less than is offered" if s["saturated"] else "keeps up"
    out.append(f"  serving     {units.si(e.tokens_per_s)} tokens/s out, "
               f"{s['requests_per_s']:,.1f} requests/s; " + state)
    band = e.tokens_per_s_range()
    if band is not None and e.band is not None:
        out.append(f"  likely      {units.si(band[0])}-{units.si(band[1])} tokens/s out: " + _trust(e.band))
    for label, key, median in (("TTFT", "ttft", e.ttft_s), ("TPOT", "tpot", e.tpot_s)):
        out.append(f"  {label}        {units.latency(median)} median, "
                   f"{units.latency(s[key + '_mean_s'])} mean, {units.latency(s[key + '_p99_s'])} p99")
    out.append(f"  batch       mean {s['mean_batch']:,.1f} decoding, at most {s['batch_limit']:,} "
               f"(the K/V cache: {s['kv_cache_tokens']:,} tokens in {s['kv_cache_dtype']}); "
               f"busy {100 * s['busy']:.0f}%"
               + (f"; {s['preemptions']:,} preemptions" if s["preemptions"] else "")
               + (f"; {s['rejected']:,} requests longer than the cache refused" if s["rejected"] else ""))
    step = e.step_time_s or 1.0
    parts = [f"{SERVING_PARTS.get(k, k)} {100 * v / step:.1f}%" for k, v in e.breakdown_s.items()]
    out.append("  time        " + ", ".join(parts))
    out.append(f"  model       {e.model_tflops_per_gpu:,.1f} TFLOP/s per GPU   MFU {100 * (e.mfu or 0):.1f}%")
    out.extend(_energy_lines(e))
    return out + _memory_lines(e)


# an iteration's parts (engine/model/serving_cost.py) as the time line says them
SERVING_PARTS = {"gemm": "GEMMs and weights", "decode_attention": "K/V reads",
                 "prefill_attention": "prefill attention", "elementwise": "elementwise",
                 "communication": "TP/EP comm", "output": "logits",
                 "overhead": "engine overhead", "idle": "idle"}


def _stack(stack: dict[str, object]) -> str:
    """The software stack in a line: attention kernel, fusion, what overlaps, the gradients' type, dropout."""
    overlaps = [name for key, name in (("overlap_grad_reduce", "DP reduce"),
                                       ("overlap_param_gather", "param gather"),
                                       ("tp_comm_overlap", "TP comm"), ("overlap_p2p_comm", "PP sends"))
                if stack.get(key)]
    parts = [f"attention {stack['attention_kernel']}",
             "fused kernels" if stack.get("fused_kernels") else "eager kernels",
             "overlapped: " + (", ".join(overlaps) if overlaps else "nothing"),
             f"gradients reduced in {str(stack['grad_reduce_dtype']).upper()}"]
    if stack.get("dropout"):
        parts.append(f"dropout {stack['dropout']}")
    if "ep_dispatch" in stack:
        gemms = "a GEMM per expert" if stack["expert_gemm"] == "per_expert" else "grouped expert GEMMs"
        parts.append(f"MoE dispatch {stack['ep_dispatch']}, {gemms}")
    if stack.get("mtp_layers"):
        parts.append(f"{stack['mtp_layers']} MTP module{'s' if stack['mtp_layers'] != 1 else ''}")
    return "; ".join(parts)


def _trust(band: Band) -> str:
    """Where a band comes from: "90% of 32 published runs (every training run; held out of the fit) came
    within 14.4%"."""
    from clustertop.engine.model.uncertainty import COVERAGE

    return (f"{100 * COVERAGE:.0f}% of {band.runs} published runs ({band.alike}; held out of the fit) came "
            f"within {100 * band.uncertainty:.1f}% (clustertop validate)")
