"""Watching a real cluster: scrape DCGM exporters (and node_exporters) directly, or ask a Prometheus server,
every interval, and write each round as a sample of the event stream (engine/telemetry/frames.py).

Exporters are fetched concurrently by a pool of threads, each within a deadline; a target that fails is a
`target_down` event (and its GPUs missing) until it answers again (`target_up`). Nodes are placed as the
import places them (engine/telemetry/placement.py): by `cluster.hosts`; else exporters' nodes are their URLs'
hosts in natural order (known before anything answers; a host's dcgm-exporter and node_exporter are one node),
and a Prometheus server's are the hosts of its first answers. Without a cluster file the cluster is the first
round's: its hosts, the most GPUs a host reports, the GPU type from the exporter's modelName label.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..config import catalog, scenario, units
from ..config.cluster import Cluster, parse_cluster
from ..config.errors import UserError
from ..config.infile import read_capped
from ..config.job import Job
from ..stream import schema
from ..stream.recorder import Recorder
from . import dcgm, exposition, promjson
from .frames import FAST_GZIP, Frame, TelemetryStream
from .http import FetchError, check_url, get
from .placement import Placement, host_names

Note = Callable[[str], None]
FAMILIES = (("GB200", "gb200"), ("B200", "b200-sxm-180gb"), ("H200", "h200-sxm-141gb"),
            ("H800", "h800-sxm-80gb"), ("H100", "h100-sxm-80gb"), ("A100", "a100-sxm-80gb"))


@dataclass
class Poll:
    """One round's readings: (metric, labels, value) samples, the targets that failed and why."""

    samples: list[exposition.Sample] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    answered: int = 0


class Exporters:
    """dcgm-exporter (and node_exporter) /metrics pages, fetched concurrently; each page's samples get the
    target's host:port as their `instance` label, as Prometheus would give them."""

    def __init__(self, urls: list[str], timeout: float, workers: int = 32) -> None:
        self.targets = urls
        self.timeout = timeout
        self.instances = [urllib.parse.urlsplit(u).netloc for u in urls]
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls))),
                                       thread_name_prefix="scrape")
        self.wanted = dcgm.METRICS

    def _one(self, k: int) -> tuple[int, list[exposition.Sample] | str]:
        url = self.targets[k]
        try:
            page = get(url, self.timeout, accept="text/plain")
            samples = exposition.parse(page, self.wanted)
        except (FetchError, exposition.PageError) as exc:
            return k, str(exc)
        instance = self.instances[k]
        for _, labels, _ in samples:
            labels.setdefault("instance", instance)
        return k, samples

    def poll(self) -> Poll:
        out = Poll()
        for k, result in self.pool.map(self._one, range(len(self.targets))):
            if isinstance(result, str):
                out.failures[self.targets[k]] = result
            else:
                out.answered += 1
                out.samples.extend(result)
        return out

    def models(self) -> list[str]:
        return []                 # the pages' samples carry modelName

    def hosts(self) -> list[tuple[str, ...]]:
        """Each target's host (the URL's, without port, then with it): the nodes, known before any answer. A
        node's dcgm-exporter and node_exporter share a host, so they are one node."""
        return [host_names({"instance": netloc}) for netloc in self.instances]

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class PrometheusQueries:
    """Instant queries to a Prometheus server's HTTP API, one per metric; GPU gauges reduced to the labels
    that place them (max by Hostname, instance, gpu), port counters as they are."""

    def __init__(self, url: str, timeout: float) -> None:
        self.base = url.rstrip("/")
        self.targets = [self.base]
        self.timeout = timeout

    def query(self, metric: str) -> str:
        if metric in dcgm.GPU_METRICS:
            return f"max by (Hostname, instance, gpu) ({metric})"
        return metric

    def poll(self) -> Poll:
        out = Poll()
        errors = []
        for metric in dcgm.METRICS:
            url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": self.query(metric)})
            try:
                body = get(url, self.timeout, accept="application/json")
                for labels, value in promjson.vector(body, self.base):
                    out.samples.append((metric, labels, value))
            except FetchError as exc:
                errors.append(str(exc))
            except UserError as exc:
                errors.append(exc.args[0] if exc.args else str(exc))
        if len(errors) == len(dcgm.METRICS):
            out.failures[self.base] = errors[0]
        else:
            out.answered = 1
        return out

    def hosts(self) -> list[tuple[str, ...]]:
        return []                 # known from the answers only

    def models(self) -> list[str]:
        """The GPU models the server knows (dcgm-exporter's modelName label),
        for a cluster inferred from it."""
        query = f"count by (modelName) ({dcgm.GPU_UTIL} or {dcgm.SM_ACTIVE} or {dcgm.POWER})"
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            return [labels.get("modelName", "")
                    for labels, _ in promjson.vector(get(url, self.timeout), self.base)]
        except (FetchError, UserError):
            return []

    def close(self) -> None:
        pass


def exporter_urls(values: Iterable[str]) -> list[str]:
    """--exporter values: comma-separated URLs, or @FILE for a file of URLs (one a line, # comments)."""
    urls: list[str] = []
    for value in values:
        if value.startswith("@"):
            data = read_capped(value[1:], 16 << 20, "a file of exporter URLs, one a line")
            items = [line.split("#", 1)[0].strip() for line in data.decode(errors="replace").splitlines()]
        else:
            items = [item.strip() for item in value.split(",")]
        for item in items:
            if item:
                try:
                    urls.append(check_url(item))
                except ValueError as exc:
                    raise UserError(f"{exc}; expected exporter URLs such as http://node1:9400/metrics",
                                    "--exporter") from None
    if not urls:
        raise UserError("no URL given; expected http://HOST:9400/metrics[,...] or @FILE", "--exporter")
    if len(set(urls)) != len(urls):
        twice = next(u for u in urls if urls.count(u) > 1)
        raise UserError(f"{twice[:200]} is given twice; expected each exporter once", "--exporter")
    return urls


def inferred_cluster(samples: list[exposition.Sample], note: Note, known_models: list[str] | None = None,
                     targets: list[tuple[str, ...]] | None = None) -> tuple[str, Cluster, tuple[Job, ...]]:
    """A cluster for telemetry with no cluster file: the hosts that report GPUs (or the exporters' hosts), the
    most GPUs one reports, the GPU type named by the modelName label (H100 when unknown)."""
    hosts: set[str] = set()
    slots, models = 0, set(known_models or ())
    for metric, labels, _ in samples:
        if metric in dcgm.GPU_METRICS and labels.get("gpu", "").isdigit():
            names = host_names(labels)
            if names:
                hosts.add(names[0])
                slots = max(slots, int(labels["gpu"]) + 1)
                if "modelName" in labels:
                    models.add(labels["modelName"])
    if not hosts:
        raise UserError("no DCGM GPU metric with gpu and Hostname (or instance) labels in the first answers; "
                        f"expected {dcgm.GPU_UTIL}, {dcgm.SM_ACTIVE} or {dcgm.POWER} from dcgm-exporter")
    gpu = next((name for model in sorted(models) for family, name in FAMILIES if family in model.upper()),
               None)
    if gpu is None:
        gpu = "h100-sxm-80gb"
        model = min(models)[:60] if models else "(no modelName label)"
        note(f"GPU type {model!r} unknown: drawn as {gpu}; pass --cluster to say what the cluster is")
    per_node = min(slots, catalog.gpus()[gpu].scale_up_domain)
    nodes = len({names[0] for names in targets}) if targets else len(hosts)
    table = {"gpu": gpu, "gpus": nodes * per_node, "gpus_per_node": per_node,
             "gpus_per_rack": max(1, 16 // per_node) * per_node}
    cluster = parse_cluster(table, "(the cluster of the first answers)")
    return "watched cluster", cluster, ()


class _Tee:
    """Every line to every recorder (the dashboard's pipe and --record's file)."""

    def __init__(self, recorders: list[Recorder]) -> None:
        self.recorders = recorders

    def write(self, line: bytes) -> None:
        for r in self.recorders:
            r.write(line)

    def keyframe(self, line: bytes) -> None:
        for r in self.recorders:
            r.keyframe(line)

    def close(self) -> None:
        errors = []
        for r in self.recorders:
            try:
                r.close()
            except (OSError, UserError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


class Watcher:
    """Polls every `interval` seconds and writes each round to the outputs."""

    def __init__(self, poller: Exporters | PrometheusQueries, *, source: str, cluster_file: str | None,
                 outputs: list[str], interval: float, note: Note | None = None) -> None:
        self.poller = poller
        self.source = source
        self.cluster_file = cluster_file
        self.outputs = outputs
        self.interval = interval
        self.note = note or (lambda text: None)
        self.stream: TelemetryStream | None = None
        self.tee: _Tee | None = None
        self.down: dict[str, str] = {}
        self.counters: dict[tuple[str, int, str, str], tuple[float, float]] = {}
        self.hosts_cache: dict[tuple[str | None, str | None], tuple[str, ...]] = {}
        self.rounds = 0
        self.started = 0.0

    # -- the first round: the cluster and the header ------------------------------------------------------

    def start(self) -> None:
        """The first round: UserError when nothing answers or nothing is a DCGM metric; then the header."""
        if self.cluster_file is not None:
            name, cluster, jobs = scenario.load_cluster(self.cluster_file)
        self.started = time.monotonic()
        first = self.poller.poll()
        if first.answered == 0:
            target, reason = next(iter(first.failures.items()))
            more = (f" (and {len(first.failures) - 1:,} more targets failed)" if len(first.failures) > 1
                    else "")
            raise UserError(f"{reason}{more}; expected a reachable "
                            f"{'Prometheus server' if self.source == 'prometheus' else 'exporter'}", target)
        if not any(metric in dcgm.GPU_METRICS for metric, _, _ in first.samples):
            raise UserError(f"answered no DCGM GPU metric; expected {dcgm.GPU_UTIL}, {dcgm.SM_ACTIVE} or "
                            f"{dcgm.POWER} (dcgm-exporter's)", self.poller.targets[0])
        if self.cluster_file is None:
            name, cluster, jobs = inferred_cluster(first.samples, self.note, self.poller.models(),
                                                   self.poller.hosts())
        self.cluster = cluster
        self.nodes = cluster.gpus // cluster.gpus_per_node
        self.placement = Placement(self.nodes, cluster.gpus_per_node, cluster.hosts)
        self.placement.place(self.poller.hosts() or self._gpu_hosts(first.samples))
        if not self.placement.order:
            raise UserError('no DCGM series has a "gpu" label and a host (Hostname or instance) that fits '
                            "the cluster; expected the dcgm-exporter's labels", self.poller.targets[0])
        recorders: list[Recorder] = []
        try:
            for path in self.outputs:
                recorders.append(Recorder.open(path, level=FAST_GZIP))
        except BaseException:
            for r in recorders:
                r.close()
            raise
        self.tee = _Tee(recorders)
        self.stream = TelemetryStream(self.tee, name=name, cluster=cluster, jobs=jobs, source=self.source,
                                      step_s=self.interval, start_unix=round(time.time(), 3), duration_s=None,
                                      path=self.cluster_file or "", hosts=list(self.placement.order))
        self.stream.write_header()
        self._write(0.0, first)

    def _names(self, labels: dict[str, str]) -> tuple[str, ...]:
        key = (labels.get("Hostname"), labels.get("instance"))
        names = self.hosts_cache.get(key)
        if names is None:
            names = self.hosts_cache[key] = host_names(labels)
        return names

    def _gpu_hosts(self, samples: list[exposition.Sample]) -> list[tuple[str, ...]]:
        seen: dict[tuple[str, ...], None] = {}
        for metric, labels, _ in samples:
            if metric in dcgm.GPU_METRICS:
                seen[self._names(labels)] = None
        return list(seen)

    # -- rounds -------------------------------------------------------------------------------------------

    def round(self, duration: float | None = None) -> bool:
        """Wait for the next round's time, poll, write; False (and nothing done) when that time is past
        `duration` seconds of watching."""
        rounds = self.rounds + 1
        due = self.started + rounds * self.interval
        now = time.monotonic()
        if now > due + self.interval:                    # polling is slower than the interval: skip rounds
            skipped = int((now - due) // self.interval)
            rounds += skipped
            due += skipped * self.interval
            self.note(f"a round took longer than the interval ({units.seconds(self.interval)}): "
                      f"{skipped:,} skipped")
        if duration is not None and rounds * self.interval > duration + 1e-9:
            return False
        self.rounds = rounds
        if due > now:
            time.sleep(due - now)
        poll = self.poller.poll()
        placed = self.placement.place(self._gpu_hosts(poll.samples))
        t = round(self.rounds * self.interval, 6)
        assert self.stream is not None
        if placed:
            self.stream.event(t, schema.HOSTS_PLACED, hosts=placed,
                              first_node=len(self.placement.order) - len(placed))
        self._write(t, poll)
        return True

    def _write(self, t: float, poll: Poll) -> None:
        stream = self.stream
        assert stream is not None
        for target, reason in poll.failures.items():
            if self.down.get(target) != reason:
                stream.event(t, schema.TARGET_DOWN, target=target, error=reason)
            self.down[target] = reason
        for target in [t_ for t_ in self.down if t_ not in poll.failures]:
            del self.down[target]
            stream.event(t, schema.TARGET_UP, target=target)
        frame = Frame.empty(t, self.cluster.gpus, self.nodes)
        gpu_of, names_of = self.placement.gpu_of, self._names
        node_of = self.placement.node_of
        now = self.started + t
        for metric, labels, value in poll.samples:
            if metric in dcgm.GPU_METRICS:
                gpu = gpu_of(names_of(labels), labels.get("gpu", ""))
                if gpu is not None:
                    frame.gpu[metric][gpu] = value
                continue
            node = node_of(names_of(labels))
            if node is None:
                continue
            key = (metric, node, labels.get("device", ""), labels.get("port", ""))
            last = self.counters.get(key)
            self.counters[key] = (now, value)
            if last is not None and now > last[0] and value >= last[1]:
                frame.nic[metric][node] += (value - last[1]) / (now - last[0])
                frame.ports[metric][node] += 1
        stream.write(frame)

    def close(self) -> None:
        self.poller.close()
        if self.tee is not None:
            self.tee.close()


def watch(poller: Exporters | PrometheusQueries, *, source: str, cluster_file: str | None, outputs: list[str],
          interval: float, duration: float | None = None, note: Note | None = None) -> Watcher:
    """Watch until `duration` (seconds of watching) or until interrupted;
    the outputs are closed either way."""
    watcher = Watcher(poller, source=source, cluster_file=cluster_file, outputs=outputs, interval=interval,
                      note=note)
    try:
        watcher.start()
        while watcher.round(duration):
            pass
    finally:
        watcher.close()
    return watcher
