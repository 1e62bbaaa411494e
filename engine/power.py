"""Power: what a GPU draws in each phase, and what the site draws for it.

Simple on purpose (issue 6 extends it): a GPU draws its TDP while computing, its memory-bound figure in
memory-bound phases (optimizer, decode) and its idle figure while it waits (communication, bubble,
checkpoint, failed or no job). Every GPU brings a server overhead (CPUs, NICs, fans, PSU losses; 575 W per
H100 from shared/reference/hardware.toml, scaled by TDP for other GPUs), storage and network add 10% of IT
power, and cooling multiplies the lot by the PUE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .phases import CODE, PHASES
from .scenario import Cluster

H100_TDP_W = 700.0
H100_SERVER_OVERHEAD_W = 575.0   # hardware.toml [facility] h100_server_overhead_w_per_gpu
IT_OVERHEAD = 0.10               # hardware.toml [facility] it_overhead_storage_network

COMPUTE_PHASES = ("compute",)
MEMORY_PHASES = ("optimizer", "memory")


@dataclass(frozen=True)
class PowerModel:
    phase_w: np.ndarray            # W per phase code (float64, indexed by engine.phases codes)
    overhead_w_per_gpu: float
    it_overhead: float
    pue: float

    @classmethod
    def of(cls, cluster: Cluster) -> PowerModel:
        gpu = cluster.gpu
        watts = np.full(len(PHASES), gpu.idle_w, dtype=np.float64)
        for name in COMPUTE_PHASES:
            watts[CODE[name]] = gpu.tdp_w
        for name in MEMORY_PHASES:
            watts[CODE[name]] = gpu.memory_bound_w
        return cls(phase_w=watts, overhead_w_per_gpu=H100_SERVER_OVERHEAD_W * gpu.tdp_w / H100_TDP_W,
                   it_overhead=IT_OVERHEAD, pue=cluster.pue)

    @property
    def idle_w(self) -> float:
        return float(self.phase_w[CODE["idle"]])

    def site_mw(self, gpu_watts: float, gpus: int) -> float:
        """Site power in MW for a total GPU draw: plus server overhead, storage and network, times PUE."""
        it = (gpu_watts + gpus * self.overhead_w_per_gpu) * (1.0 + self.it_overhead)
        return it * self.pue / 1e6

    def describe(self) -> dict[str, Any]:
        """The model's figures, for the recording header."""
        return {"phase_w": {name: float(self.phase_w[code]) for code, name in enumerate(PHASES)},
                "server_overhead_w_per_gpu": self.overhead_w_per_gpu, "it_overhead": self.it_overhead,
                "pue": self.pue}
