"""`clustertop import prometheus`: range-query dumps of DCGM metrics into a recording of the event stream.

Dumps are first scanned (engine/telemetry/promjson.py) so that every file is known to be a matrix, with its
time span, before anything is written; then they are read in order of their first timestamp, one series at a
time, into the grid of the current window (steps x GPU slots, float32, NaN where nothing was reported). When
the next dump starts later than everything read so far, the window's steps are written out and dropped: memory
follows the window (the span of dumps that overlap), not the files' size. Steps are those of the range query
(the smallest step of the dumps); a step with no reading at all is still a sample, with every GPU missing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..config import scenario, units
from ..config.errors import UserError
from ..config.outfile import check_output
from ..stream import schema
from ..stream.recorder import Recorder
from . import dcgm, promjson
from .frames import FAST_GZIP, Frame, TelemetryStream
from .placement import Placement, host_names, no_match

Note = Callable[[str], None]


@dataclass
class ImportStats:
    samples: int = 0
    faults: int = 0
    series: int = 0
    hosts: int = 0
    gpus_reporting: int = 0
    gpus: int = 0                 # the cluster's
    start_unix: float = 0.0
    step_s: float = 0.0
    duration_s: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, why: str, count: int = 1, example: str | None = None) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + count
        seen = self.examples.setdefault(why, [])
        if example is not None and len(seen) < 3 and example not in seen:
            seen.append(example[:60])

    def warnings(self) -> list[str]:
        """One line per kind of thing skipped, with a few examples."""
        return [f"skipped {count:,} {why}" + (f" (such as {', '.join(self.examples[why])})"
                                              if self.examples.get(why) else "")
                for why, count in sorted(self.skipped.items())]


class _Hosts:
    """Temporary ids of hosts in order of appearance (their aliases learnt), before they are placed on nodes.
    Hosts with GPUs also get a column of the window's GPU grids, in their own order, so that hosts seen
    first with no GPU (node_exporter's NIC ports, a dump of them read before the DCGM dumps) take none."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[tuple[str, ...]] = []
        self.gpu: list[bool] = []
        self.column: list[int] = []       # per host: its GPU column (x gpus_per_node), -1 for none
        self.columns = 0

    def id_of(self, names: tuple[str, ...], gpu: bool) -> int:
        ids = self.ids
        for name in names:
            tid = ids.get(name)
            if tid is not None:
                break
        else:
            tid = len(self.names)
            self.names.append(names)
            self.gpu.append(False)
            self.column.append(-1)
        if gpu and not self.gpu[tid]:
            self.gpu[tid] = True
            self.column[tid] = self.columns
            self.columns += 1
            if names[0] != self.names[tid][0]:       # a GPU series' Hostname is the better name
                self.names[tid] = names + tuple(n for n in self.names[tid] if n not in names)
        for name in names:
            ids.setdefault(name, tid)
        return tid


class _Window:
    """Readings of the steps from k0 on that are not written yet: per GPU metric a grid of steps x GPU slots
    (GPU column of a temporary host x slot), per port metric steps x hosts (byte rates summed, ports
    counted)."""

    def __init__(self) -> None:
        self.k0 = 0
        self.gpu: dict[str, np.ndarray] = {}
        self.nic: dict[str, np.ndarray] = {}
        self.ports: dict[str, np.ndarray] = {}

    @staticmethod
    def grid(arrays: dict[str, np.ndarray], metric: str, rows: int, width: int, fill: float,
             dtype: type) -> np.ndarray:
        """The metric's array with room for `rows` steps and `width` columns (capacity doubles: amortized)."""
        a = arrays.get(metric)
        if a is not None and a.shape[0] >= rows and a.shape[1] >= width:
            return a
        old_rows, old_width = a.shape if a is not None else (0, 0)
        new = np.full((max(rows, 2 * old_rows if rows > old_rows else old_rows),
                       max(width, 2 * old_width if width > old_width else old_width)), fill, dtype=dtype)
        if a is not None:
            new[:old_rows, :old_width] = a
        arrays[metric] = new
        return new

    def drop(self, count: int) -> None:
        """Forget the first `count` steps (written)."""
        for arrays in (self.gpu, self.nic, self.ports):
            for metric, a in arrays.items():
                arrays[metric] = a[count:].copy()
        self.k0 += count


class Importer:
    """Reads dumps into windows and writes the recording (one per run)."""

    def __init__(self, paths: list[str], cluster_file: str, output: str, note: Note | None = None) -> None:
        self.name, self.cluster, self.jobs = scenario.load_cluster(cluster_file)
        self.cluster_file = cluster_file
        check_output(output)
        self.output = output
        self.note = note or (lambda text: None)
        self.infos = sorted((promjson.scan(p) for p in paths), key=lambda info: info.start)
        steps = [i.step for i in self.infos if i.step]
        if not steps:
            raise UserError("no series has two points: the step of the range query is unknown; expected "
                            "dumps of /api/v1/query_range with at least two steps", self.infos[0].path)
        self.step = min(steps)
        self.t0 = self.infos[0].start
        self.last = max(i.end for i in self.infos)
        per_node = self.cluster.gpus_per_node
        self.nodes = self.cluster.gpus // per_node
        self.placement = Placement(self.nodes, per_node, self.cluster.hosts)
        self.hosts = _Hosts()
        self.window = _Window()
        self.stats = ImportStats(start_unix=self.t0, step_s=self.step,
                                 duration_s=round(float(self.k(self.last)) * self.step, 6))
        self.recorder: Recorder | None = None
        self.stream: TelemetryStream | None = None
        self.written = 0                  # steps written
        self.seen_gpus = np.zeros(self.cluster.gpus, dtype=bool)
        self.unmatched: set[str] = set()  # GPU hosts of the dumps that cluster.hosts does not name
        for info in self.infos:
            if info.step and abs(info.step - self.step) > 1e-6 * self.step and \
                    abs(info.step / self.step - round(info.step / self.step)) < 1e-6:
                self.note(f"{info.path}: step {units.seconds(info.step)} where other dumps have "
                          f"{units.seconds(self.step)}: its GPUs show as missing on the steps in between")

    def k(self, unix: float | np.ndarray) -> np.ndarray:
        return np.rint((np.asarray(unix, dtype=np.float64) - self.t0) / self.step).astype(np.int64)

    # -- reading --------------------------------------------------------------------------------------------

    def run(self) -> ImportStats:
        try:
            for i, info in enumerate(self.infos):
                self.note(f"reading {info.path} ({info.series:,} series)")
                self._read(info.path)
                upto = (int(self.k(self.infos[i + 1].start)) if i + 1 < len(self.infos)
                        else int(self.k(self.last)) + 1)
                self._flush(upto)
            if self.stream is None:
                self._start()
            if self.recorder is not None:
                self.recorder.close()
        except BaseException:
            self._abort()
            raise
        warning = self.stream.bounds_warning() if self.stream else None
        if warning:
            self.note(f"warning: {warning}")
        self.stats.samples = self.stream.samples if self.stream else 0
        self.stats.faults = self.stream.faults if self.stream else 0
        self.stats.hosts = len(self.placement.order)
        self.stats.gpus_reporting = int(self.seen_gpus.sum())
        self.stats.gpus = self.cluster.gpus
        return self.stats

    def _abort(self) -> None:
        """A bad dump found midway:
        the partial recording is removed (a kill, not an error, leaves its prefix)."""
        if self.recorder is None:
            return
        try:
            self.recorder.close()
        except OSError:
            pass
        if self.output != "-":
            try:
                if stat.S_ISREG(os.stat(self.output).st_mode):
                    os.unlink(self.output)
            except OSError:
                pass

    def _read(self, path: str) -> None:
        wanted = frozenset(dcgm.METRICS)
        w, per_node, hosts = self.window, self.cluster.gpus_per_node, self.hosts
        for s in promjson.series(path):
            self.stats.series += 1
            name = s.labels.get("__name__", "")
            if name not in wanted:
                self.stats.skip("series of metrics clustertop does not read", example=name or "(no __name__)")
                continue
            names = host_names(s.labels)
            where = f"{path}: series {self.stats.series} ({name})"
            if not names:
                raise UserError('has no "Hostname" or "instance" label; expected the dcgm-exporter\'s labels',
                                where)
            is_gpu = name in dcgm.GPU_METRICS
            if self.placement.fixed and (self.placement.node_of(names) if is_gpu
                                         else self.placement.node_near(names)) is None:
                self.stats.skip("series from hosts not in cluster.hosts", example=names[0])
                if is_gpu and len(self.unmatched) < 1000:
                    self.unmatched.add(names[0])
                continue
            if s.t.size == 0:
                continue
            rows = self.k(s.t) - w.k0
            late = rows < 0
            if late.any():
                self.stats.skip("points of times already written (dumps that overlap in time)",
                                int(late.sum()))
                keep = ~late
                rows, s.t, s.v = rows[keep], s.t[keep], s.v[keep]
                if rows.size == 0:
                    continue
            if name in dcgm.GPU_METRICS:
                slot = s.labels.get("gpu")
                self.placement.check_slot(slot, where)
                assert slot is not None                  # check_slot raised otherwise
                col = hosts.column[hosts.id_of(names, gpu=True)]
                if col >= self.nodes and not self.placement.fixed:
                    raise UserError(f"more than the cluster's {self.nodes:,} nodes report GPUs (host "
                                    f"{names[0][:60]!r} is one too many); expected a [cluster] with as many "
                                    "nodes as hosts", self.cluster_file)
                grid = w.grid(w.gpu, name, int(rows.max()) + 1, self.nodes * per_node, np.nan, np.float32)
                grid[rows, col * per_node + int(slot)] = s.v
            else:
                tid = hosts.id_of(names, gpu=False)
                if rows.size < 2:
                    continue
                dt = np.diff(s.t)
                with np.errstate(invalid="ignore", divide="ignore"):
                    rate = np.diff(s.v) / dt
                ok = np.isfinite(rate) & (rate >= 0) & (dt > 0)      # a counter reset is no reading
                nic = w.grid(w.nic, name, int(rows.max()) + 1, len(hosts.names), 0.0, np.float64)
                ports = w.grid(w.ports, name, int(rows.max()) + 1, len(hosts.names), 0, np.int32)
                r = rows[1:][ok]
                np.add.at(nic[:, tid], r, rate[ok])
                np.add.at(ports[:, tid], r, 1)

    # -- writing --------------------------------------------------------------------------------------------

    def _start(self) -> None:
        """Place the first window's hosts, check there is something to write, open the output, the header."""
        self._place()
        if self.placement.fixed and self.unmatched and not any(self.hosts.gpu):
            raise UserError(no_match(list(self.cluster.hosts), list(self.unmatched), "the dumps' hosts"),
                            self.cluster_file)
        if not self.placement.order:
            found = "; ".join(self.stats.warnings()) or "no series"
            raise UserError(f"no DCGM GPU metric in the dumps ({found}); expected series such as "
                            f"{dcgm.GPU_UTIL}, {dcgm.SM_ACTIVE} or {dcgm.POWER} with gpu and Hostname labels",
                            self.infos[0].path)
        self.recorder = Recorder.open(self.output, level=FAST_GZIP)
        self.stream = TelemetryStream(self.recorder, name=self.name, cluster=self.cluster, jobs=self.jobs,
                                      source="prometheus", step_s=self.step, start_unix=self.t0,
                                      duration_s=self.stats.duration_s, path=self.cluster_file,
                                      hosts=list(self.placement.order))
        self.stream.write_header()

    def _place(self) -> list[str]:
        gpu_hosts = [names for names, gpu in zip(self.hosts.names, self.hosts.gpu) if gpu]
        return self.placement.place(gpu_hosts)

    def _flush(self, upto: int) -> None:
        """Write every step before `upto` (absolute step index) and drop it from the window."""
        if upto <= self.written:
            return
        if self.stream is None:
            self._start()
        else:
            placed = self._place()
            if placed:
                assert self.stream is not None
                first = len(self.placement.order) - len(placed)
                self.stream.event(self.written * self.step, schema.HOSTS_PLACED, hosts=placed,
                                  first_node=first)
        assert self.stream is not None
        w, gpus = self.window, self.cluster.gpus
        src, dst = self._columns()
        place = self.placement
        host_node = [(tid, place.node_of(names) if self.hosts.gpu[tid] else place.node_near(names))
                     for tid, names in enumerate(self.hosts.names)]
        nic_hosts = np.array([tid for tid, node in host_node if node is not None], dtype=np.int64)
        nic_nodes = np.array([node for _, node in host_node if node is not None], dtype=np.int64)
        for k in range(self.written, upto):
            row = k - w.k0
            frame = Frame.empty(k * self.step, gpus, self.nodes, tuple(w.gpu))
            for metric, grid in w.gpu.items():
                if row < grid.shape[0]:
                    frame.gpu[metric][dst] = grid[row, src]
            for metric, nic in w.nic.items():
                if row < nic.shape[0]:
                    keep = nic_hosts < nic.shape[1]
                    hosts, nodes = nic_hosts[keep], nic_nodes[keep]
                    frame.nic[metric] = np.bincount(nodes, nic[row, hosts], self.nodes)
                    frame.ports[metric] = np.bincount(nodes, w.ports[metric][row, hosts],
                                                      self.nodes).astype(np.int32)
            for values in frame.gpu.values():
                self.seen_gpus |= ~np.isnan(values)
            self.stream.write(frame)
        w.drop(upto - w.k0)
        self.written = upto

    def _columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Window columns (temporary host x slot) and the cluster GPUs they are, for placed hosts, in the
        order of the window's columns."""
        per_node = self.cluster.gpus_per_node
        src, dst = [], []
        for tid, names in enumerate(self.hosts.names):
            if not self.hosts.gpu[tid]:
                continue
            node = self.placement.node_of(names)
            if node is None:
                continue
            src.append(np.arange(per_node) + self.hosts.column[tid] * per_node)
            dst.append(np.arange(per_node) + node * per_node)
        if not src:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(src), np.concatenate(dst)


def import_prometheus(paths: list[str], cluster_file: str, output: str,
                      note: Note | None = None) -> ImportStats:
    """Convert range-query dumps into a recording at `output` (".gz": gzip; "-": stdout)."""
    if not paths:
        raise UserError("no dump given; expected one or more files of /api/v1/query_range JSON")
    return Importer(paths, cluster_file, output, note).run()
