"""Facility power: what one GPU costs the site at full load, and how many GPUs a power budget holds.

Per GPU: its TDP plus the server overhead (host CPUs, NICs, fans, PSU losses: 575 W per H100, scaled by TDP
for other GPUs unless the catalog gives a figure), plus 10% of IT power for storage and network switches,
times the PUE for cooling (shared/reference/hardware.toml [facility], from SemiAnalysis' "100,000 H100
Clusters"). The site's optical transceivers add their own power (engine/config/optics.py), counted from the
topology: the 10% is kept for storage and switches (hardware.toml's derived 1.5 kW of critical IT per H100 is
above the 1,402 W the 10% gives: the transceivers, ~20 W per GPU on a 3-tier 400G fabric, close part of
that gap).
"""

from __future__ import annotations

from collections.abc import Callable

from .catalog import GPU

IT_OVERHEAD = 0.10        # hardware.toml [facility] it_overhead_storage_network


def it_w_per_gpu(gpu: GPU) -> float:
    """Critical IT power per GPU at full load (W): GPU, server share, storage and network."""
    return (gpu.tdp_w + gpu.server_overhead()) * (1.0 + IT_OVERHEAD)


def facility_w_per_gpu(gpu: GPU, pue: float) -> float:
    return it_w_per_gpu(gpu) * pue


def gpus_for_budget(budget_mw: float, gpu: GPU, pue: float, granularity: int,
                    optics_w: Callable[[int], float] | None = None) -> int:
    """The most GPUs, in whole multiples of `granularity` (a rack), that a site budget powers at full load,
    with the watts of the optics a site of n GPUs needs (`optics_w(n)`)."""
    per = facility_w_per_gpu(gpu, pue)

    def site_w(n: int) -> float:
        return n * per + (optics_w(n) * pue if optics_w is not None and n > 0 else 0.0)

    budget = budget_mw * 1e6
    n = int(budget // per) // granularity * granularity
    for _ in range(4):                      # the optics per GPU barely move with n: a few rounds settle it
        if n <= 0 or site_w(n) <= budget:
            break
        n = int(budget // (site_w(n) / n)) // granularity * granularity
    while n > 0 and site_w(n) > budget:
        n -= granularity
    return max(n, 0)
