"""Checkpoints: what a job writes, how long training stops for it, and how often ("auto": Young/Daly).

The interval that minimises lost time depends on how often the job is interrupted: each cause of Llama 3 Table
5 (engine/config/catalogs/faults.toml) is a Poisson process per component (GPUs, hosts, links), so a job on
more GPUs expects proportionally more interruptions, plus the planned maintenance of the scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.catalog import DAY, causes
from ..config.job import Job
from ..config.scenario import Scenario
from .compute import total_params
from .kernels import BF16


def expected_count(gpus: int, gpus_per_node: int, seconds: float, rate_scale: float = 1.0) -> float:
    """Mean number of unexpected interruptions for a job on `gpus` GPUs over `seconds`."""
    n = {"gpu": gpus, "host": -(-gpus // gpus_per_node), "link": gpus}
    return rate_scale * seconds * sum(c.rate_per_s * n[c.component] for c in causes())


def expected_rate(gpus: int, gpus_per_node: int, rate_scale: float = 1.0,
                  planned_per_day: float = 0.0) -> float:
    """Interruptions per second a job on `gpus` GPUs expects: unexpected ones plus planned maintenance."""
    return expected_count(gpus, gpus_per_node, 1.0, rate_scale) + planned_per_day / DAY


def young_daly_interval(checkpoint_s: float, interruptions_per_s: float) -> float:
    """The checkpoint interval that minimises expected lost time: sqrt(2 C / rate) (Young 1974, Daly 2006)."""
    if interruptions_per_s <= 0:
        return float("inf")
    return float(np.sqrt(2.0 * checkpoint_s / interruptions_per_s))


# What a checkpoint holds per parameter: BF16 weights (2 bytes) and the FP32 master weights and two Adam
# moments (12 bytes), as engine/model/memory.py counts them. Gradients are not saved
# (they are recomputed after a restart).
CHECKPOINT_BYTES_PER_PARAM = BF16 + 12.0


@dataclass(frozen=True)
class CheckpointPlan:
    """How one job checkpoints: how much it writes, how long training stops, and how often."""

    mode: str                 # "sync" | "async"
    state_bytes: float        # model + optimizer state, one copy (every shard written once)
    write_s: float            # writing it at the storage bandwidth
    stall_s: float            # training stops this long: the write (sync) or the snapshot to host memory
                              # (async)
    interval_s: float         # from the end of one checkpoint (or a restart) to the next; inf: never


def checkpoint_plan(scenario: Scenario, job: Job) -> CheckpointPlan:
    """The scenario's checkpoint settings for one job; "auto" is the Young/Daly interval for its expected
    interruption rate (unexpected faults at the scenario's rate_scale, plus planned maintenance)."""
    ck, f = scenario.checkpoint, scenario.faults
    params = total_params(job.model)[0]
    state = CHECKPOINT_BYTES_PER_PARAM * params
    write = state / (ck.storage_tb_s * 1e12)
    if ck.mode == "async":
        # Each GPU copies its own shard to host memory over PCIe: its weights (sharded by TP, PP and EP) and
        # its optimizer shard (ZeRO shards it over the data-parallel ranks too). EP also divides dense weights
        # here: a small overestimate of the snapshot speed for MoE models,
        # whose parameters are mostly experts.
        model_shards = job.tp * job.pp * job.ep
        dp_shards = job.dp * job.cp if job.zero >= 1 else 1
        local = BF16 * params / model_shards + 12.0 * params / (model_shards * dp_shards)
        stall = local / (scenario.cluster.pcie.gb_s * 1e9)
    else:
        stall = write
    interval = ck.interval_s
    if interval == "auto":
        rate = expected_rate(job.gpus, scenario.cluster.gpus_per_node, f.rate_scale, f.planned_per_day)
        interval = young_daly_interval(stall, rate)
    return CheckpointPlan(ck.mode, state, write, stall, float(interval))
