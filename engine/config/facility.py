"""Facility power: what one GPU costs the site at full load, and how many GPUs a power budget holds.

Per GPU: its TDP plus the server overhead (host CPUs, NICs, fans, PSU losses: 575 W per H100, scaled by TDP
for other GPUs unless the catalog gives a figure), plus 10% of IT power for storage and network, times the PUE
for cooling (shared/reference/hardware.toml [facility], from SemiAnalysis' "100,000 H100 Clusters").
"""

from __future__ import annotations

from .catalog import GPU

IT_OVERHEAD = 0.10        # hardware.toml [facility] it_overhead_storage_network


def it_w_per_gpu(gpu: GPU) -> float:
    """Critical IT power per GPU at full load (W): GPU, server share, storage and network."""
    return (gpu.tdp_w + gpu.server_overhead()) * (1.0 + IT_OVERHEAD)


def facility_w_per_gpu(gpu: GPU, pue: float) -> float:
    return it_w_per_gpu(gpu) * pue


def gpus_for_budget(budget_mw: float, gpu: GPU, pue: float, granularity: int) -> int:
    """The most GPUs, in whole multiples of `granularity` (a rack), that a site budget powers at full load."""
    per = facility_w_per_gpu(gpu, pue)
    return int(budget_mw * 1e6 // per) // granularity * granularity
