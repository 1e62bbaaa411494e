"""What a GPU is doing: the phase codes shared by the cost model, the event stream and the dashboard.

Codes are small integers so per-GPU phase arrays are uint8 and run-length encode well. The order is part of
the event schema (schema_version 1): append, never renumber.
"""

from __future__ import annotations

PHASES = (
    "idle",        # 0: no job on the GPU
    "compute",     # 1: GEMMs and the rest of forward/backward/recompute
    "tp",          # 2: waiting on tensor-parallel collectives
    "pp",          # 3: waiting on pipeline point-to-point transfers
    "dp",          # 4: waiting on data-parallel gradient reduction (exposed part)
    "cp",          # 5: waiting on context-parallel K/V exchange
    "ep",          # 6: waiting on expert-parallel all-to-all
    "bubble",      # 7: pipeline bubble (stage has no microbatch to work on)
    "optimizer",   # 8: optimizer step (memory-bound)
    "checkpoint",  # 9: writing a checkpoint
    "failed",      # 10: failed hardware or job down (detection, restart)
    "memory",      # 11: memory-bound work (inference decode)
)
CODE = {name: code for code, name in enumerate(PHASES)}

# How a person reads a phase: the dashboard's legend, inspector and help, and `estimate`'s time breakdown.
PHASE_LABELS = {
    "idle": "idle", "compute": "computing", "tp": "wait TP", "pp": "wait PP", "dp": "wait DP",
    "cp": "wait CP", "ep": "wait EP", "bubble": "bubble", "optimizer": "optimizer",
    "checkpoint": "checkpoint", "failed": "failed", "memory": "memory-bound",
}
# The same in a few letters, for narrow table cells.
PHASE_SHORT = {
    "idle": "idle", "compute": "cmp", "tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "ep": "EP",
    "bubble": "bub", "optimizer": "opt", "checkpoint": "ckpt", "failed": "FAIL", "memory": "mem",
}
