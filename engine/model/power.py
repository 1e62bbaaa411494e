"""Power: what a GPU draws in each phase, and what the site draws for it.

Per GPU, by phase and GPU type (engine/config/catalogs/gpus.toml):
- busy computing: its TDP (large GEMMs run at the board's power limit);
- memory-bound work (optimizer, decode): its memory-bound figure;
- waiting (on communication, in the pipeline bubble, on a checkpoint write, or with no job): its idle/waiting
  figure (the catalog's `idle_w`, measured on idle and waiting boards);
- failed: off (0 W): the GPU has fallen off the bus or its node is being drained.

Every GPU brings its server overhead (host CPUs, NICs, fans, PSU losses; `server_overhead_w` in the GPU
catalog, 575 W per H100 from shared/reference/hardware.toml [facility]), storage and network switches add 10%
of IT power, the optical transceivers of the fabric draw their own constant power (engine/config/optics.py:
counted from the topology, by link speed and kind), and cooling multiplies the lot by the PUE. A failed GPU's
host stays powered while it is drained and diagnosed.

A `power_swing` event is written when the site's load level changes at once by more than `swing_threshold_mw`:
5% of the site's power or 2 MW, whichever is smaller (the engine/sim/run.py docstring says what a level is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config.catalog import GPU
from ..config.cluster import Cluster
from ..config.facility import IT_OVERHEAD
from ..config.phases import CODE, PHASES

SWING_SHARE = 0.05               # a power swing: a sudden change of more than 5% of the site's power...
SWING_MW = 2.0                   # ...or of more than 2 MW (a large site), whichever is smaller

COMPUTE_PHASES = ("compute",)
MEMORY_PHASES = ("optimizer", "memory")
OFF_PHASES = ("failed",)


def phase_watts(gpu: GPU, phase: str) -> float:
    """What one GPU draws in a phase: TDP computing, its memory-bound figure, off when failed, else idle."""
    if phase in COMPUTE_PHASES:
        return gpu.tdp_w
    if phase in MEMORY_PHASES:
        return gpu.memory_bound_w
    return 0.0 if phase in OFF_PHASES else gpu.idle_w


def job_facility_w(gpu_watts: float, gpus: int, site_gpus: int, overhead_w_per_gpu: float, optics_w: float,
                   pue: float) -> float:
    """Facility watts of a job: its GPUs' draw, their servers, storage and switches, its share of the site's
    optics (its share of the GPUs), times PUE."""
    it = (gpu_watts + gpus * overhead_w_per_gpu) * (1.0 + IT_OVERHEAD) + optics_w * gpus / max(site_gpus, 1)
    return it * pue


@dataclass(frozen=True)
class PowerModel:
    phase_w: np.ndarray            # W per phase code (float64, indexed by engine.config.phases codes)
    overhead_w_per_gpu: float
    it_overhead: float
    pue: float
    budget_mw: float | None = None
    optics_w: float = 0.0          # the fabric's transceivers, always on

    @classmethod
    def of(cls, cluster: Cluster) -> PowerModel:
        gpu = cluster.gpu
        watts = np.array([phase_watts(gpu, name) for name in PHASES], dtype=np.float64)
        return cls(phase_w=watts, overhead_w_per_gpu=gpu.server_overhead(), it_overhead=IT_OVERHEAD,
                   pue=cluster.pue, budget_mw=cluster.site_power_budget_mw,
                   optics_w=cluster.transceivers.watts)

    @property
    def idle_w(self) -> float:
        return float(self.phase_w[CODE["idle"]])

    def site_mw(self, gpu_watts: float, gpus: int) -> float:
        """Site power in MW for a total GPU draw: plus server overhead, storage and switches, optics,
        times PUE."""
        it = (gpu_watts + gpus * self.overhead_w_per_gpu) * (1.0 + self.it_overhead) + self.optics_w
        return it * self.pue / 1e6

    def job_w(self, gpu_watts: float, gpus: int, site_gpus: int) -> float:
        """Facility watts of a job of `gpus` drawing `gpu_watts` on a site of `site_gpus` (job_facility_w)."""
        return job_facility_w(gpu_watts, gpus, site_gpus, self.overhead_w_per_gpu, self.optics_w, self.pue)

    def swing_threshold_mw(self, site_mw: float) -> float:
        """The smallest sudden change of the site's load that is a power swing."""
        return min(SWING_MW, SWING_SHARE * site_mw)

    def over_budget(self, site_mw: float) -> bool:
        return self.budget_mw is not None and site_mw > self.budget_mw

    def describe(self) -> dict[str, Any]:
        """The model's figures, for the recording header."""
        return {"phase_w": {name: float(self.phase_w[code]) for code, name in enumerate(PHASES)},
                "server_overhead_w_per_gpu": self.overhead_w_per_gpu, "it_overhead": self.it_overhead,
                "pue": self.pue, "site_power_budget_mw": self.budget_mw, "optics_w": round(self.optics_w, 1),
                "swing": {"share": SWING_SHARE, "mw": SWING_MW}}
