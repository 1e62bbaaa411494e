"""What the header says about jobs and hardware, read defensively (older or newer recordings may lack
keys)."""

from __future__ import annotations

from typing import Any

from clustertop.engine.config import units
from clustertop.engine.config.errors import escape
from clustertop.engine.config.geometry import DIMS, JobGeometry
from clustertop.engine.stream.state import ClusterState, JobStatus


def job_of(state: ClusterState, gpu: int) -> JobStatus | None:
    for job in state.jobs.values():
        if job.first_gpu <= gpu < job.first_gpu + job.gpus:
            return job
    return None


def geometry(job: JobStatus) -> JobGeometry:
    """Where a job's ranks sit, as the engine places them (engine/config/geometry.py)."""
    return JobGeometry.from_entry({**job.info, "first_gpu": job.first_gpu, "gpus": job.gpus})


def ranks(job: JobStatus, gpu: int) -> dict[str, int]:
    """Parallel ranks of one GPU of a job."""
    return geometry(job).ranks(gpu)


def layout_text(job: JobStatus) -> str:
    return " ".join(f"{d.upper()}{int(job.info.get(d, 1) or 1)}" for d in DIMS
                    if d != "ep" or job.info.get("ep", 1) != 1)


def model_name(job: JobStatus) -> str:
    model = job.info.get("model", "")
    if isinstance(model, dict):
        return str(model.get("name", ""))
    return str(model)


def memory_gb(job: JobStatus, stage: int) -> float | None:
    """Memory per GPU when the header gives it: `memory_gb` as one number or one per pipeline stage."""
    mem: Any = job.info.get("memory_gb")
    if isinstance(mem, (int, float)):
        return float(mem)
    if isinstance(mem, list) and mem:
        return float(mem[min(stage, len(mem) - 1)])
    return None


def measured_memory_gb(state: ClusterState, gpu: int) -> float | None:
    """The memory a GPU reported in use (real telemetry's `memory_gb`), or None when there is no such
    reading."""
    memory = state.memory_gb
    if memory is None:
        return None
    missing = state.missing("memory_gb")
    return None if missing is not None and missing[gpu] else float(memory[gpu])


def hosts(state: ClusterState) -> list[Any]:
    """The header's host names of real telemetry (`telemetry.hosts`, one per node, unchecked), or []."""
    telemetry = state.header.get("telemetry")
    names = telemetry.get("hosts") if isinstance(telemetry, dict) else None
    return names if isinstance(names, list) else []


def host_of(state: ClusterState, node: int) -> str | None:
    """The host name of a node of real telemetry (the header's `telemetry.hosts`), or None."""
    names = hosts(state)
    if not 0 <= node < len(names):
        return None
    return escape(str(names[node]))[:80]           # a recording is untrusted text


def cluster(state: ClusterState) -> dict[str, Any]:
    return state.header.get("scenario", {}).get("cluster", {}) or {}


def gpu_spec(state: ClusterState) -> dict[str, Any]:
    gpu = cluster(state).get("gpu", {})
    return gpu if isinstance(gpu, dict) else {"name": str(gpu)}


def capacity_gb(state: ClusterState) -> float | None:
    """A GPU's memory in GB: the header's `hbm_gb` is the catalog's figure, in GiB as GPUs are sold (80 GiB is
    85.9 GB), so it is converted before it stands beside memory in use, which is in GB."""
    hbm = gpu_spec(state).get("hbm_gb")
    return units.gib_to_gb(float(hbm)) if isinstance(hbm, (int, float)) and hbm > 0 else None


def describe(state: ClusterState, source: str = "") -> str:
    """'run.jsonl.gz · llama3-405b-16k · 16,384 × h100-sxm-80gb': the source's name, then the scenario's
    unless the source is named after it (a live run), then the hardware."""
    name = str(state.header.get("scenario", {}).get("name", ""))
    gpu = gpu_spec(state).get("name", "GPU")
    parts = [p for p in (source, "" if name and name in source else name) if p]
    return " · ".join([*parts, f"{state.gpus:,} × {gpu}"])


SCALE_UP_KINDS = {"nvswitch": "NVSwitch", "nvl72": "NVL72", "xgmi-mesh": "xGMI mesh",
                  "roce-mesh": "RoCE mesh", "torus-2d": "2D torus", "torus-3d": "3D torus",
                  "pcie": "PCIe (host)"}


def scale_up_text(state: ClusterState) -> str:
    """'NVSwitch nvlink4 450 GB/s' or 'xGMI mesh 7 x 64 GB/s': the scale-up domain from the header's
    `scale_up` (a link to each peer on a mesh, so its links are named), '' when the header has none."""
    up = state.header.get("scale_up")
    if not isinstance(up, dict) or "kind" not in up:
        return ""
    kind = str(up["kind"])
    name = SCALE_UP_KINDS.get(kind, escape(kind)[:20])
    links, per_link = up.get("links_per_gpu"), up.get("gb_s_per_link")
    if isinstance(links, int) and isinstance(per_link, (int, float)):
        return f"{name} {links} x {per_link:g} GB/s"
    link, total = up.get("link"), up.get("gb_s_per_gpu")
    figure = f" {total:g} GB/s" if isinstance(total, (int, float)) else ""
    return f"{name} {escape(str(link or ''))[:20]}{figure}".replace("  ", " ")


SWITCHES = ("nvswitch", "nvl72")     # scale-up kinds where every GPU reaches any peer with all its links


def scale_up_links(state: ClusterState, switches: bool = True) -> list[str]:
    """What each job's TP group gets of a GPU's scale-up links (the job's name first when there are several),
    short enough for a folded panel at 80 columns. On a switchless mesh (a link to each peer): 'TP 4: 3 of 7
    links, 192 GB/s' (the group reaches its q - 1 peers over q - 1 links; the others go to GPUs outside it).
    Through a switch: 'TP 4: all links, 450 GB/s' (every GPU reaches any peer with all its bandwidth; with
    `switches` False: [], as it goes without saying but beside a mesh). [] for other scale-ups (PCIe through
    the host, tori) and jobs without TP inside the node."""
    from clustertop.engine.config.cluster import MESHES

    up = state.header.get("scale_up")
    kind = up.get("kind") if isinstance(up, dict) else None
    if not isinstance(up, dict) or kind not in (*MESHES, *(SWITCHES if switches else ())):
        return []

    def figure(key: str) -> float:
        """A positive number of the header's scale_up, else 0."""
        v = up.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0.0

    links = up.get("links_per_gpu")
    links = links if isinstance(links, int) and not isinstance(links, bool) and links > 0 else 0
    per_link, per_gpu = figure("gb_s_per_link"), figure("gb_s_per_gpu")
    if not (per_gpu if kind in SWITCHES else links and per_link):
        return []
    out = []
    for name, job in state.jobs.items():
        tp = int(job.info.get("tp", 1) or 1)
        tiers = job.info.get("tiers")
        if tp <= 1 or (isinstance(tiers, dict) and tiers.get("tp") not in (None, "node")):
            continue
        who = f"{escape(name)[:20]} " if len(state.jobs) > 1 else ""
        if kind in SWITCHES:
            out.append(f"{who}TP {tp}: all links, {per_gpu:g} GB/s")
            continue
        used = min(tp - 1, links)
        out.append(f"{who}TP {tp}: {used} of {links} links, {used * per_link:g} GB/s")
    return out
