"""Published serving runs as scenarios: TensorRT-LLM's offline throughput tables and online serving
measurements (engine/config/catalogs/serving_runs.toml, with sources), for `clustertop validate`.

Each run is written as it ran: one TP group of a DGX/HGX node, the source's precision (FP8 weights and K/V
cache on H100 and H200, FP16 on A100: the same cost as BF16), the source's batch limits (4,096 sequences and
8,192 tokens per iteration for trtllm-bench) and K/V share (95% of the free memory), fixed request lengths,
and the benchmark's request count measured whole (ramp-up and drain included, as trtllm-bench reports it). The
online table (release 0.14, Triton backend, BF16) sends 500 requests at a rate; the load the server saw is the
rate the benchmark achieved (its client sent fewer than asked at the higher rates), so that is the scenario's
`request_rate`, and at "inf" every request is sent at once (`request_rate = "max"`). A run is saturated when
its mean TTFT passes a second (requests queue) or every request is sent at once; its TTFT is compared below
saturation only (above, it grows with the queue, i.e. with the benchmark's length) and its throughput at
saturation only (below, it is the offered rate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from .calibration import Row, catalog_tables, records

if TYPE_CHECKING:
    from .estimate import JobEstimate

SERVING_FILE = "serving_runs.toml"
OUTPUT = "output tokens/s"        # the measures of `validate --json` rows
TTFT = "ttft ms"
ITL = "itl ms"
GPUS = {"h100": "h100-sxm-80gb", "h200": "h200-sxm-141gb", "a100": "a100-sxm-80gb"}
SERVING_TOLERANCE = 0.75          # a row further off than this is a miss (docs/performance-model.md 12)
# trtllm-bench's request counts per (input, output) lengths (serving_runs.toml's notes)
OFFLINE_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (2048, 128): 3000, (1000, 1000): 3000,
                    (500, 2000): 3000, (128, 4096): 1500, (2048, 2048): 1500, (5000, 500): 1500,
                    (1000, 2000): 1500, (20000, 2000): 1000}
ONLINE_REQUESTS = 500
ONLINE_MAX_BATCH = 2048           # trtllm-build's default max_batch_size (release 0.14)
SATURATED_TTFT_MS = 1000.0        # an online run whose mean TTFT passes a second is queueing: saturated


def tables() -> dict[str, Any]:
    return catalog_tables(SERVING_FILE)


def _scenario(name: str, gpu: str, tp: int, job: dict[str, Any]) -> dict[str, Any]:
    """One TP group of an NVSwitch node serving, no faults."""
    cluster = {"gpu": GPUS[gpu], "gpus": tp, "gpus_per_node": tp, "scale_up": "nvswitch", "gpus_per_rack": tp}
    base = {"name": "serve", "kind": "inference", "tp": tp, "dp": 1, "length_spread": 0.0}
    return {"name": name, "description": name, "cluster": cluster, "jobs": [{**base, **job}],
            "faults": {"enabled": False}}


def _offline() -> Iterator[Row]:
    """trtllm-bench throughput (release 0.17): every request queued at once."""
    for r in records(tables()["trtllm_v017_offline"]):
        isl, osl = r["isl"], r["osl"]
        name = f"{r['model']} {r['gpu']} {r['precision']} tp{r['tp']} {isl}/{osl} offline"
        job = {"model": r["model"], "precision": r["precision"], "request_rate": "max",
               "requests": OFFLINE_REQUESTS[(isl, osl)], "prompt_tokens": isl, "output_tokens": osl,
               "max_batch": 4096, "max_tokens_per_step": 8192, "kv_cache_fraction": 0.95,
               "frontend_latency_ms": 0.0}
        yield Row("trtllm_offline", name, _scenario(name, r["gpu"], r["tp"], job), r["output_tokens_per_s"],
                  OUTPUT, tolerance=SERVING_TOLERANCE)


def _online() -> Iterator[Row]:
    """Triton's TensorRT-LLM backend (release 0.14, BF16): 500 requests at a rate, or all at once ("inf")."""
    for i, r in enumerate(records(tables()["trtllm_v014_online"])):
        isl, osl, qps = r["isl"], r["osl"], r["qps"]
        saturated = qps == "inf" or r["mean_ttft_ms"] > SATURATED_TTFT_MS
        name = f"{r['model']} {r['gpu']} tp{r['tp']} {isl}/{osl} at {qps} qps"
        rate = "max" if qps == "inf" else float(r["requests_per_s"])
        job = {"model": r["model"], "precision": "bf16", "request_rate": rate,
               "requests": ONLINE_REQUESTS, "prompt_tokens": isl, "output_tokens": osl,
               "max_batch": ONLINE_MAX_BATCH}
        scenario = _scenario(name, r["gpu"], r["tp"], job)
        fit = i % 2 == 0                     # every other run fits the serving constants (both its rows)
        yield Row("trtllm_online", f"{name}: ITL", scenario, r["mean_itl_ms"], ITL, fit, SERVING_TOLERANCE)
        if saturated:
            yield Row("trtllm_online", f"{name}: throughput", scenario, r["output_tokens_per_s"], OUTPUT, fit,
                      SERVING_TOLERANCE)
        else:
            yield Row("trtllm_online", f"{name}: TTFT", scenario, r["mean_ttft_ms"], TTFT, fit,
                      SERVING_TOLERANCE)


@cache
def rows() -> tuple[Row, ...]:
    """Every serving row; every other row of each table fits the serving constants, the rest are held out."""
    offline = [row if i % 2 else dataclasses.replace(row, fit=True) for i, row in enumerate(_offline())]
    return tuple(offline + list(_online()))


def measure_of(measure: str, est: JobEstimate) -> float | None:
    """A serving estimate in a row's measure."""
    if not est.fits or est.tokens_per_s is None:
        return None
    if measure == OUTPUT:
        return est.tokens_per_s
    if measure == TTFT:
        return float(est.serving["ttft_mean_s"]) * 1000
    if measure == ITL:
        return float(est.serving["itl_mean_s"]) * 1000
    raise ValueError(f"unknown measure {measure!r}")
