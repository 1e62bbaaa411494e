"""The DCGM exporter's metrics and what they become in the event stream, and the XID error codes by name.

Names are those of NVIDIA's dcgm-exporter (default counters, `DCGM_FI_*`) and of node_exporter's InfiniBand
collector (`node_infiniband_*`, RoCE ports included). docs/telemetry.md has the table with units and limits.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per-GPU gauges (labels: gpu, and Hostname or instance).
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"            # ratio 0..1 of cycles an SM had a warp resident
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"     # ratio 0..1 of time the graphics engine was busy
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"               # percent of time a kernel ran (coarser: one busy SM counts)
POWER = "DCGM_FI_DEV_POWER_USAGE"               # W
FB_USED = "DCGM_FI_DEV_FB_USED"                 # MiB of frame buffer in use
NVLINK_TX = "DCGM_FI_PROF_NVLINK_TX_BYTES"      # B/s sent over NVLink (a rate, not a counter)
NVLINK_RX = "DCGM_FI_PROF_NVLINK_RX_BYTES"      # B/s received
NVLINK_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"   # MB/s over all links, sent and received together
#                            (dcgm-exporter's default counters; taken as a rate: docs/telemetry.md says why)
XID = "DCGM_FI_DEV_XID_ERRORS"                  # the code of the GPU's last XID error (0: none since start)
# Per-port counters of a node's InfiniBand / RoCE NICs (labels: device, port, instance).
IB_TX = "node_infiniband_port_data_transmitted_bytes_total"
IB_RX = "node_infiniband_port_data_received_bytes_total"

GPU_METRICS = (SM_ACTIVE, GR_ENGINE, GPU_UTIL, POWER, FB_USED, NVLINK_TX, NVLINK_RX, NVLINK_TOTAL, XID)
PORT_METRICS = (IB_TX, IB_RX)
METRICS = GPU_METRICS + PORT_METRICS

MIB_GB = 1024 * 1024 / 1e9                      # FB_USED is in MiB; the stream's memory is in GB (1e9 bytes)
MB = 1e6                                        # NVLINK_TOTAL is in MB/s


@dataclass(frozen=True)
class Xid:
    """One XID code: what it means, the fault category it belongs to and whether the GPU needs a reset or
    replacement (`fatal`: the node is taken out) or only the job died (an application error)."""

    code: int
    meaning: str
    category: str
    fatal: bool


# The XIDs an operator meets most (NVIDIA's "XID Errors" catalog); categories follow Llama 3's Table 5
# taxonomy (engine/config/catalogs/faults.toml) where one fits.
XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(8, "GPU stopped processing (timeout)", "GPU", False),
    Xid(13, "graphics engine exception (an illegal access by the application)", "Dependency/software", False),
    Xid(31, "GPU memory page fault (the application read or wrote a bad address)", "Dependency/software",
        False),
    Xid(32, "invalid or corrupted push buffer stream", "Host", False),
    Xid(38, "driver firmware error", "GPU", True),
    Xid(43, "GPU stopped processing (the channel was reset; the application faulted)", "Dependency/software",
        False),
    Xid(45, "preemptive cleanup after an earlier error (the driver ended the process)", "Dependency/software",
        False),
    Xid(48, "double-bit ECC error in GPU memory", "GPU", True),
    Xid(61, "internal micro-controller breakpoint or warning", "GPU", False),
    Xid(62, "internal micro-controller halt", "GPU", True),
    Xid(63, "ECC page retirement or row remapping recorded", "GPU", False),
    Xid(64, "ECC page retirement or row remapping failed", "GPU", True),
    Xid(69, "graphics engine class error", "GPU", True),
    Xid(74, "NVLink error", "Network", True),
    Xid(79, "GPU has fallen off the bus", "GPU", True),
    Xid(92, "high single-bit ECC error rate", "GPU", False),
    Xid(94, "contained ECC error (the affected application was stopped)", "GPU", False),
    Xid(95, "uncontained ECC error (every application on the GPU was stopped; reset it)", "GPU", True),
    Xid(109, "context switch timeout", "GPU", False),
    Xid(119, "GSP (GPU system processor) RPC timeout", "GPU", True),
    Xid(120, "GSP (GPU system processor) error", "GPU", True),
    Xid(140, "unrecovered ECC error", "GPU", True),
)}


def xid(code: int) -> Xid:
    """The named XID, or an unnamed one (operators look those up in NVIDIA's catalog)."""
    return XIDS.get(code) or Xid(code, "see NVIDIA's XID catalog", "GPU", False)


def fault_fields(code: int) -> dict[str, object]:
    """The fault event fields of an XID (docs/events.md, `fault`): cause names the code and its meaning."""
    x = xid(code)
    return {"cause": f"XID {code}: {x.meaning}", "category": x.category, "component": "gpu",
            "scope": "node" if x.fatal else "job", "xid": code}
