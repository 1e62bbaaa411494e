"""Real telemetry as the event stream: frames of per-GPU readings become samples, XID changes become faults.

A Frame holds what every GPU reported at one time, NaN where it reported nothing: a missing reading stays
missing (docs/events.md, `missing`), never zero. TelemetryStream writes the header (the cluster table placed
as a simulated cluster is, so the views by rack and pod work) and then one sample per frame, so a time with no
data at all is a sample whose GPUs are all missing: a gap shows as a gap. Vectorized over GPUs: no Python loop
over GPUs. The header, the lines and the sink are the stream's (engine/stream/); site power is the model's
formula (engine/model/power.py), the one a simulated run uses, optics included.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import units
from ..config.cluster import Cluster
from ..config.errors import escape
from ..config.geometry import Geometry
from ..config.job import Job
from ..config.phases import CODE, PHASES
from ..model.power import PowerModel
from ..stream import schema
from ..stream.header import header, job_entry
from ..stream.lines import line, sample_line, wire_time
from ..stream.recorder import Sink
from . import dcgm

BUSY_PERCENT = 50.0        # a GPU at least this utilized is "compute" in the phase view, below it "idle"
RUNNING_PERCENT = 5.0      # a job whose GPUs average this much is running
FAST_GZIP = 1              # zlib level of telemetry recordings:
#                            every GPU differs, level 6 costs 7x for 20% less


@dataclass
class Frame:
    """Readings at time `t` (seconds since the start): per GPU by DCGM metric, and per node the NIC ports'
    byte rates summed (`nic`) with the number of ports that reported (`ports`). NaN: no reading."""

    t: float
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    nic: dict[str, np.ndarray] = field(default_factory=dict)
    ports: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def empty(cls, t: float, gpus: int, nodes: int, metrics: tuple[str, ...] = dcgm.GPU_METRICS) -> Frame:
        frame = cls(t)
        for metric in metrics:
            frame.gpu[metric] = np.full(gpus, np.nan, dtype=np.float32)
        for metric in dcgm.PORT_METRICS:
            frame.nic[metric] = np.zeros(nodes, dtype=np.float64)
            frame.ports[metric] = np.zeros(nodes, dtype=np.int32)
        return frame


def _rle_flag(mask: np.ndarray) -> dict[str, list[Any]]:
    return schema.rle_encode(mask.astype(np.uint8))


class TelemetryStream:
    """Writes a recording of real telemetry to `sink` (engine/stream/recorder.py's Recorder)."""

    def __init__(self, sink: Sink, *, name: str, cluster: Cluster, jobs: tuple[Job, ...], source: str,
                 step_s: float | None, start_unix: float, duration_s: float | None, path: str = "",
                 hosts: list[str] | None = None) -> None:
        self.sink = sink
        self.name = name
        self.cluster = cluster
        self.jobs = jobs
        self.source = source
        self.step_s = step_s
        self.start_unix = start_unix
        self.duration_s = duration_s
        self.path = Path(path).name if path else ""
        self.hosts = [escape(h) for h in hosts] if hosts is not None else []
        self.topo = Geometry.of(cluster).summary()
        self.gpus = cluster.gpus
        self.per_pod = self.topo["gpus_per_pod"]
        self.pods = self.topo["pods"]
        self.nodes = self.topo["nodes"]
        self.nodes_per_pod = max(1, self.per_pod // cluster.gpus_per_node)
        self.pod_of_gpu = np.arange(self.gpus) // self.per_pod
        self.pod_of_node = np.arange(self.nodes) // self.nodes_per_pod
        self.nvlink_bps = cluster.node_link.gb_s * 1e9
        self.nic_bps = cluster.scale_out.gb_s * 1e9
        self.power = PowerModel.of(cluster)
        self.last_xid = np.full(self.gpus, np.nan, dtype=np.float32)
        self.failed = np.zeros(self.gpus, dtype=bool)
        self.samples = 0
        self.faults = 0
        self.events = 0
        gpu = cluster.gpu
        # Physical bounds per metric: a reading outside (dcgm-exporter's blank sentinels such as
        # 9223372036854775794, a broken sensor) is missing, and counted.
        self.bounds = {dcgm.SM_ACTIVE: (0.0, 1.0), dcgm.GR_ENGINE: (0.0, 1.0), dcgm.GPU_UTIL: (0.0, 100.0),
                       dcgm.POWER: (0.0, 2.0 * gpu.tdp_w), dcgm.FB_USED: (0.0, gpu.hbm_gb * 1024.0),
                       dcgm.NVLINK_TX: (0.0, 1.5 * self.nvlink_bps),
                       dcgm.NVLINK_RX: (0.0, 1.5 * self.nvlink_bps),
                       dcgm.NVLINK_TOTAL: (0.0, 1.5 * 2 * self.nvlink_bps / dcgm.MB),
                       dcgm.XID: (0.0, 65535.0)}
        self.out_of_bounds: dict[str, int] = {}

    # -- header ---------------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Line 1: the stream's header (engine/stream/header.py) with the telemetry table; readings are
        instants, a GPU busy enough is "compute"."""
        util = [0.0] * len(PHASES)
        util[CODE["compute"]] = 1.0
        power = self.power
        scenario = {"name": self.name, "cluster": dataclasses.asdict(self.cluster), "path": self.path}
        jobs = [job_entry(j, fits=True) for j in self.jobs]
        return header(scenario=scenario, topology=self.topo, jobs=jobs, seed=0,
                      sample_interval_s=self.step_s, duration_s=self.duration_s, sampling="instant",
                      phase_util=util,
                      power={"server_overhead_w_per_gpu": power.overhead_w_per_gpu,
                             "it_overhead": power.it_overhead, "pue": power.pue,
                             "site_power_budget_mw": power.budget_mw, "optics_w": round(power.optics_w, 1)},
                      telemetry={"source": self.source, "start_unix": self.start_unix, "hosts": self.hosts})

    def write_header(self) -> None:
        self.sink.write(line(self.header()))

    # -- events ---------------------------------------------------------------------------------------------

    def event(self, t: float, kind: str, **fields: Any) -> None:
        """A discrete event (target_down, target_up, hosts_placed...) at time t. Text from the network or a
        dump (host names, an HTTP reason) is escaped: a recording holds plain text only
        (engine/stream/checks.py)."""
        clean = {k: escape(v) if isinstance(v, str) else [escape(x) for x in v] if isinstance(v, list) else v
                 for k, v in fields.items()}
        self.sink.write(line({"t": wire_time(t), "type": kind, **clean}))
        self.events += 1

    def _faults(self, t: float, xid: np.ndarray, util: np.ndarray) -> None:
        """A fault for every GPU whose last-XID reading changed to a non-zero code (the first reading is
        history: the gauge keeps the last XID since the exporter started). A fatal XID marks the GPU failed
        until it works again (utilization above 0) or its XID reading goes back to 0; so does a fatal first
        reading on a GPU doing no work."""
        seen = ~np.isnan(xid)
        known = ~np.isnan(self.last_xid)
        changed = seen & known & (xid != self.last_xid) & (xid > 0)
        self.last_xid = np.where(seen, xid, self.last_xid)
        self.failed &= ~((seen & (xid == 0)) | (util > 0))
        # A first reading of a fatal code on a GPU that does no work: it is still down (failed from the
        # start; no fault event, as when it happened is not known). One that works was reset since.
        for gpu in np.flatnonzero(seen & ~known & (xid > 0) & (util <= 0)).tolist():
            if dcgm.xid(int(xid[gpu])).fatal:
                self.failed[gpu] = True
        for gpu in np.flatnonzero(changed).tolist():
            code = int(xid[gpu])
            fields = dcgm.fault_fields(code)
            node = gpu // self.cluster.gpus_per_node
            where: dict[str, Any] = {"gpu": gpu, "node": node}
            if node < len(self.hosts):
                where["host"] = self.hosts[node]          # escaped
            self.event(t, schema.FAULT, **fields, **where)
            self.faults += 1
            if dcgm.xid(code).fatal:
                self.failed[gpu] = True

    # -- samples --------------------------------------------------------------------------------------------

    def write(self, frame: Frame) -> None:
        """The frame's fault events, then its sample."""
        g = frame.gpu
        self._bound(g)
        nan = np.full(self.gpus, np.nan, dtype=np.float32)
        active = g.get(dcgm.SM_ACTIVE, nan)
        engine = g.get(dcgm.GR_ENGINE, nan)
        util = np.where(np.isnan(active),
                        np.where(np.isnan(engine), g.get(dcgm.GPU_UTIL, nan), engine * 100.0), active * 100.0)
        util_missing = np.isnan(util)
        util_filled = np.where(util_missing, 0.0, np.clip(util, 0.0, 100.0))
        self._faults(frame.t, g.get(dcgm.XID, nan), util_filled)
        power = g.get(dcgm.POWER, nan)
        power_missing = np.isnan(power)
        power_filled = np.where(power_missing, 0.0, np.maximum(power, 0.0))
        phase = np.where(util_filled >= BUSY_PERCENT, CODE["compute"], CODE["idle"]).astype(np.uint8)
        phase[self.failed] = CODE["failed"]
        missing: dict[str, Any] = {}
        if util_missing.any():
            missing["util"] = _rle_flag(util_missing)
        if power_missing.any():
            missing["power_w"] = _rle_flag(power_missing)
        memory_gb = None
        memory = g.get(dcgm.FB_USED)
        if memory is not None and not np.isnan(memory).all():
            memory_missing = np.isnan(memory)
            gb = np.where(memory_missing, 0.0,
                          np.round(np.maximum(memory.astype(np.float64), 0.0) * dcgm.MIB_GB, 1))
            memory_gb = schema.rle_encode(gb.astype(np.float64))
            if memory_missing.any():
                missing["memory_gb"] = _rle_flag(memory_missing)
        site_mw = None
        if not power_missing.all():
            present = int((~power_missing).sum())
            # the missing at the mean
            total = float(power_filled.sum(dtype=np.float64)) * self.gpus / present
            site_mw = self.power.site_mw(total, self.gpus)
        jobs = {j.name: {"running": self._running(util_filled, util_missing, j)} for j in self.jobs}
        self.sink.keyframe(sample_line(
            frame.t, util=schema.rle_encode(np.rint(util_filled).astype(np.int16)),
            power_w=schema.rle_encode(np.rint(power_filled).astype(np.int32)),
            phase=schema.rle_encode(phase),
            memory_gb=memory_gb, missing=missing or None, links=self._links(frame) or None,
            site_mw=round(site_mw, 4) if site_mw is not None else None,
            over_budget=site_mw is not None and self.power.over_budget(site_mw), jobs=jobs or None))
        self.samples += 1

    def _bound(self, readings: dict[str, np.ndarray]) -> None:
        """Readings outside their metric's physical bounds become missing (NaN), counted per metric."""
        for metric, values in readings.items():
            low, high = self.bounds.get(metric, (-np.inf, np.inf))
            with np.errstate(invalid="ignore"):
                bad = (values < low) | (values > high)
            if bad.any():
                values[bad] = np.nan
                self.out_of_bounds[metric] = self.out_of_bounds.get(metric, 0) + int(bad.sum())

    def bounds_warning(self) -> str | None:
        """One line counting the readings taken as missing for being out of bounds, or None."""
        if not self.out_of_bounds:
            return None
        total = sum(self.out_of_bounds.values())
        parts = ", ".join(f"{metric} {count:,}" for metric, count in sorted(self.out_of_bounds.items()))
        return (f"{total:,} readings outside their physical bounds (utilization 0-100%, power 0-2x TDP, "
                f"memory 0-capacity, blank sentinels) taken as missing: {parts}")

    def _running(self, util: np.ndarray, missing: np.ndarray, job: Job) -> bool:
        part = slice(job.first_gpu, job.first_gpu + job.gpus)
        seen = ~missing[part]
        return bool(seen.any() and float(util[part][seen].mean()) >= RUNNING_PERCENT)

    def _links(self, frame: Frame) -> dict[str, list[float]]:
        """NVLink (tier "node"): each GPU's busier direction over its line rate (a GPU with no byte counters
        but the total bandwidth: half of it, the mean of the two directions), averaged over the GPUs of a pod
        that reported; NICs (tier "leaf"): the pod's ports' bytes over their line rate. Tiers nobody
        reported are left out; a pod with no reading shows 0."""
        links: dict[str, list[float]] = {}
        busiest = _nvlink_busiest(frame.gpu)
        if busiest is not None:
            seen = ~np.isnan(busiest)
            if seen.any():
                load = np.clip(np.where(seen, busiest, 0.0) / self.nvlink_bps, 0.0, 1.0)
                links["node"] = _pod_mean(load, seen, self.pod_of_gpu, self.pods)
        ports = [frame.ports[m] for m in dcgm.PORT_METRICS if m in frame.ports]
        if ports and max(int(p.sum()) for p in ports) > 0:
            best = np.zeros(self.pods)
            for metric in dcgm.PORT_METRICS:
                count = np.bincount(self.pod_of_node, frame.ports[metric], self.pods)
                total = np.bincount(self.pod_of_node, frame.nic[metric], self.pods)
                with np.errstate(invalid="ignore", divide="ignore"):
                    load = np.where(count > 0, total / (count * self.nic_bps), 0.0)
                best = np.maximum(best, load)
            links["leaf"] = [round(float(x), 4) for x in np.clip(best, 0.0, 1.0)]
        return links


def _nvlink_busiest(gpu: dict[str, np.ndarray]) -> np.ndarray | None:
    """Each GPU's NVLink bytes per second in its busier direction (float32 as read; NaN: no reading): the
    PROF byte counters where it has either, else half its DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (MB/s, both
    directions together); None when the frame has none of them."""
    rates = [gpu[m] for m in (dcgm.NVLINK_TX, dcgm.NVLINK_RX) if m in gpu]
    total = gpu.get(dcgm.NVLINK_TOTAL)
    if not rates and total is None:
        return None
    busiest = np.full(len(next(iter(gpu.values()))), np.nan, dtype=np.float32)
    if rates:
        stacked = np.stack(rates)
        seen = ~np.isnan(stacked).all(axis=0)
        busiest[seen] = np.nanmax(stacked[:, seen], axis=0)
    if total is not None:
        fill = np.isnan(busiest)
        busiest[fill] = total[fill] * np.float32(dcgm.MB / 2)
    return busiest


def _pod_mean(values: np.ndarray, seen: np.ndarray, pod: np.ndarray, pods: int) -> list[float]:
    total = np.bincount(pod, np.where(seen, values, 0.0), pods)
    count = np.bincount(pod, seen.astype(np.float64), pods)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, 0.0)
    return [round(float(x), 4) for x in mean]


def summary(paths: list[str], *, samples: int, step_s: float, hosts: int, gpus_reporting: int, gpus: int,
            faults: int) -> str:
    """The one line `import` and `watch` end with: what was written, how big, and what it holds."""
    sizes = []
    for path in paths:
        try:
            size = float(os.path.getsize(path))
            scale, unit = next(((f, u) for f, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")) if size >= f),
                               (1.0, "bytes"))
            sizes.append(f"{path} ({size / scale:.3g} {unit})")
        except OSError:
            sizes.append(path)
    seconds = max(0, samples - 1) * step_s
    span = units.seconds(round(seconds, 3)) if seconds < 60 else units.format_duration(seconds)
    return (f"wrote {' and '.join(sizes)}: {units.count(samples, 'sample')} over {span} (one every "
            f"{units.seconds(step_s)}), {units.count(hosts, 'host')}, {gpus_reporting:,} of "
            f"{units.count(gpus, 'GPU')} reporting, {units.count(faults, 'fault')}")
