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
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import catalog, scenario, units
from ..config.cluster import Cluster, parse_cluster
from ..config.errors import UserError
from ..config.infile import read_capped
from ..config.job import Job
from ..stream import schema
from ..stream.recorder import Recorder
from . import dcgm, exposition, promjson
from .frames import FAST_GZIP, Frame, TelemetryStream, summary
from .http import FetchError, cancel, check_url, get
from .placement import HOST_LABELS, Placement, host_names, natural_key, no_match, some, without_port

Note = Callable[[str], None]
FAMILIES = (("GB200", "gb200"), ("B200", "b200-sxm-180gb"), ("H200", "h200-sxm-141gb"),
            ("H800", "h800-sxm-80gb"), ("H100", "h100-sxm-80gb"), ("A100", "a100-sxm-80gb"))


GRACE = 0.25            # seconds a round waits past its deadline for the requests the watchdog is ending
TICK = 0.05             # how often a waiting watcher looks whether it was told to stop


class Stop:
    """Set by a signal handler (a plain attribute: a handler takes no lock it could deadlock on) and looked
    at by the watcher every TICK while it waits; `signal` is the signal's number."""

    def __init__(self) -> None:
        self.signal = 0

    def __bool__(self) -> bool:
        return self.signal != 0


SCRAPED = "timestamp(up)"          # each target's last scrape time (a result's own time is the evaluation's)
DEFAULT_SCRAPE = 60.0              # Prometheus's default scrape interval, until a target's own is seen


@dataclass
class Poll:
    """One round's readings: (metric, labels, value) samples, the targets that failed and why."""

    samples: list[exposition.Sample] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    answered: int = 0
    portless: set[str] = field(default_factory=set)      # instances that answered with no GPU metric


def _wait(futures: list[Future[Any]], deadline: float, stop: Stop) -> bool:
    """Wait for the futures until `deadline` (monotonic); False when told to stop meanwhile. One future at a
    time, in slices of TICK: the cost is one wait per future, not one per future and tick."""
    for future in futures:
        while not future.done():
            left = deadline - time.monotonic()
            if stop or left <= 0:
                return not stop
            try:
                future.exception(timeout=min(TICK, left))
            except (TimeoutError, CancelledError):
                pass
    return not stop


GPU_BY = (*HOST_LABELS, "instance", "gpu")      # the labels that tell a GPU's series apart


class Exporters:
    """dcgm-exporter (and node_exporter) /metrics pages, fetched concurrently within one deadline for the
    round; each page's samples get the target's host:port as their `instance` label, as Prometheus would
    give them."""

    def __init__(self, urls: list[str], timeout: float, workers: int = 32) -> None:
        self.targets = urls
        self.timeout = timeout
        self.instances = [urllib.parse.urlsplit(u).netloc for u in urls]
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls))),
                                       thread_name_prefix="scrape")
        self.wanted = dcgm.METRICS

    def _one(self, k: int, deadline: float) -> list[exposition.Sample] | str:
        url = self.targets[k]
        try:
            page = get(url, self.timeout, accept="text/plain", deadline=deadline)
            samples = exposition.parse(page, self.wanted)
        except (FetchError, exposition.PageError) as exc:
            return str(exc)
        instance = self.instances[k]
        for _, labels, _ in samples:
            labels.setdefault("instance", instance)
        return samples

    def poll(self, stop: Stop | None = None) -> Poll | None:
        """Every target's page within `timeout` from now; None when told to stop meanwhile."""
        deadline = time.monotonic() + self.timeout
        futures = [self.pool.submit(self._one, k, deadline) for k in range(len(self.targets))]
        if not _wait(futures, deadline + GRACE, stop if stop is not None else Stop()):
            for f in futures:
                f.cancel()
            return None
        out = Poll()
        late = f"no complete answer within {units.seconds(self.timeout)}"
        for k, future in enumerate(futures):
            result = future.result() if future.done() and not future.cancelled() else late
            future.cancel()
            if isinstance(result, str):
                out.failures[self.targets[k]] = result
            else:
                out.answered += 1
                out.samples.extend(result)
                if not any(metric in dcgm.GPU_METRICS for metric, _, _ in result):
                    out.portless.add(self.instances[k])
        return out

    def models(self) -> list[str]:
        return []                 # the pages' samples carry modelName

    def hosts(self, first: Poll) -> list[tuple[str, ...]]:
        """The nodes, known from the URLs: each target's host and port, but for targets that answered the
        first round with no GPU metric (a node_exporter, whose ports go to its host's node)."""
        return [(netloc,) for netloc in self.instances if netloc not in first.portless]

    def warning(self) -> str | None:
        """Nothing to say at the end: pages carry no scrape time to age readings by."""
        return None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


Answer = tuple[list[tuple[dict[str, str], float]], float | None]    # a query's samples, its evaluation time


class PrometheusQueries:
    """Instant queries to a Prometheus server's HTTP API, one per metric, all of a round in parallel within
    one deadline; GPU gauges reduced to the labels that place them (max by host labels, instance, gpu), port
    counters as they are. Each GPU gauge is asked twice: its values, and `timestamp()` of them, the time each
    reading was scraped, so a reading older than its target's limit (`limit`) is missing, not shown as
    current."""

    def __init__(self, url: str, timeout: float, interval: float = 5.0) -> None:
        self.base = url.rstrip("/")
        self.targets = [self.base]
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(max_workers=len(dcgm.METRICS) + len(dcgm.GPU_METRICS) + 2,
                                       thread_name_prefix="query")
        self.known: set[str] = set()       # instances that served DCGM or NIC series
        self.interval = interval           # the watch's
        self.scraped: dict[str, float] = {}              # instance -> its last scrape time seen
        self.scrape_interval: dict[str, float] = {}      # instance -> the shortest gap between its scrapes
        self.aged = 0                      # readings left out for their age (a warning at the end)

    def query(self, metric: str) -> str:
        if metric in dcgm.GPU_METRICS:
            return f"max by ({', '.join(GPU_BY)}) ({metric})"
        return metric

    @staticmethod
    def stamp_query(metric: str) -> str:
        """The scrape time of each of a GPU gauge's readings, by the labels its values are asked by (an
        instant query's own time is the evaluation's; `timestamp()` of a selector is its sample's)."""
        return f"max by ({', '.join(GPU_BY)}) (timestamp({metric}))"

    def _ask(self, query: str, deadline: float) -> Answer | str:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            body = get(url, self.timeout, accept="application/json", deadline=deadline)
            return promjson.vector(body, self.base), promjson.evaluated_at(body)
        except FetchError as exc:
            return str(exc)
        except UserError as exc:
            return str(exc).removeprefix(f"{self.base}: ")

    def limit(self, instance: str) -> float:
        """The age past which a target's readings are missing: twice the watch's interval, or twice the
        target's scrape interval when that is longer (learnt from its scrapes; a minute, Prometheus's
        default, until one is seen)."""
        return max(2 * self.interval, 2 * self.scrape_interval.get(instance, DEFAULT_SCRAPE))

    def poll(self, stop: Stop | None = None) -> Poll | None:
        """Every metric's query, each GPU gauge's scrape times, `up` and each target's last scrape, within
        `timeout` from now; None when told to stop meanwhile. A reading older than its target's limit is left
        out (`_fresh`); a target Prometheus finds down (`up` 0), or not scraped within its limit, that served
        DCGM or NIC series is a failure named by its instance, and its series are left out: its GPUs are
        missing, never its last values."""
        deadline = time.monotonic() + self.timeout
        queries = [*(self.query(m) for m in dcgm.METRICS), *(self.stamp_query(m) for m in dcgm.GPU_METRICS),
                   "up", SCRAPED]
        futures = [self.pool.submit(self._ask, q, deadline) for q in queries]
        if not _wait(futures, deadline + GRACE, stop if stop is not None else Stop()):
            for f in futures:
                f.cancel()
            return None
        out = Poll()
        errors = []
        late = f"no complete answer within {units.seconds(self.timeout)}"
        answers = [f.result() if f.done() and not f.cancelled() else late for f in futures]
        values, stamps = answers[:len(dcgm.METRICS)], answers[len(dcgm.METRICS):-2]
        up, scraped = (a if isinstance(a, str) else a[0] for a in answers[-2:])
        now = max((a[1] for a in answers if not isinstance(a, str) and a[1] is not None), default=None)
        for metric, answer in zip(dcgm.METRICS, values):
            if isinstance(answer, str):
                errors.append(answer)
                continue
            for labels, value in answer[0]:
                self.known.add(labels.get("instance", ""))
            out.samples.extend((metric, labels, value) for labels, value in self._fresh(metric, answer[0],
                                                                                         stamps, now))
        if len(errors) == len(dcgm.METRICS):
            out.failures[self.base] = errors[0]
            return out
        out.answered = 1
        if not isinstance(up, str):
            down = {labels.get("instance", "") for labels, value in up
                    if value == 0 and (labels.get("instance") in self.known
                                       or "dcgm" in labels.get("job", "").lower())}
            down.discard("")
            if down:
                for instance in sorted(down, key=natural_key):
                    out.failures[instance] = "down in Prometheus (up == 0: its last scrape failed)"
                out.samples = [s for s in out.samples if s[1].get("instance") not in down]
        if not isinstance(scraped, str) and now is not None:
            stale = self._stale(scraped, now)
            if stale:
                for instance, age in sorted(stale.items(), key=lambda item: natural_key(item[0])):
                    out.failures.setdefault(instance, f"no scrape for {units.seconds(round(age))} "
                                            "(Prometheus holds only older samples: restarted, or the "
                                            "target is gone)")
                out.samples = [s for s in out.samples if s[1].get("instance") not in stale]
        return out

    def _fresh(self, metric: str, readings: list[tuple[dict[str, str], float]], stamps: list[Answer | str],
               now: float | None) -> list[tuple[dict[str, str], float]]:
        """A GPU gauge's readings but those whose own scrape time (its `timestamp()` query) is older than
        their target's limit at `now`, Prometheus's evaluation time; all of them when that query failed. The
        test is one comparison a reading: only readings older than twice the interval look up their target's
        own limit."""
        if metric not in dcgm.GPU_METRICS or now is None:
            return readings
        answer = stamps[dcgm.GPU_METRICS.index(metric)]
        if isinstance(answer, str):
            return readings
        oldest = now - 2 * self.interval
        old = {_key(labels) for labels, t in answer[0]
               if t < oldest and now - t > self.limit(labels.get("instance", ""))}
        if not old:
            return readings
        kept = [(labels, value) for labels, value in readings if _key(labels) not in old]
        self.aged += len(readings) - len(kept)
        return kept

    def _stale(self, scraped: list[tuple[dict[str, str], float]], now: float) -> dict[str, float]:
        """Instances (that served DCGM or NIC series) whose last scrape is older than max(2 x the watch's
        interval, 2 x their scrape interval): their readings are missing, never the last ones held within
        Prometheus's lookback. A target's scrape interval is learnt from the gaps between its scrapes; until
        one is seen, Prometheus's default (1 minute) is assumed, so a slow scraper never blanks everything."""
        stale: dict[str, float] = {}
        for labels, t in scraped:
            instance = labels.get("instance", "")
            if not instance or np.isnan(t):
                continue
            last = self.scraped.get(instance)
            if last is not None and t > last:
                gap = t - last
                self.scrape_interval[instance] = min(gap, self.scrape_interval.get(instance, gap))
            self.scraped[instance] = t
            if now - t > self.limit(instance) and instance in self.known:
                stale[instance] = now - t
        return stale

    def hosts(self, first: Poll) -> list[tuple[str, ...]]:
        return []                 # known from the answers only

    def models(self) -> list[str]:
        """The GPU models the server knows (dcgm-exporter's modelName label),
        for a cluster inferred from it."""
        query = f"count by (modelName) ({dcgm.GPU_UTIL} or {dcgm.SM_ACTIVE} or {dcgm.POWER})"
        answer = self._ask(query, time.monotonic() + self.timeout)
        return [] if isinstance(answer, str) else [labels.get("modelName", "") for labels, _ in answer[0]]

    def warning(self) -> str | None:
        """One line counting the readings left out for their age, or None."""
        if not self.aged:
            return None
        return (f"{self.aged:,} readings older than twice the interval (or their target's scrape interval) "
                "taken as missing: Prometheus held them from an earlier scrape")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _key(labels: dict[str, str]) -> tuple[str, ...]:
    """What tells a GPU gauge's series apart once reduced by host labels, instance and gpu."""
    return tuple(labels.get(name, "") for name in GPU_BY)


def exporter_urls(values: Iterable[str]) -> list[str]:
    """--exporter values: comma-separated URLs, or @FILE for a file of URLs (one a line, # comments)."""
    urls: list[str] = []
    for value in values:
        if value.startswith("@"):
            data = read_capped(value[1:], 16 << 20, "a file of exporter URLs, one a line")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = "\0"
            if len(data.translate(None, exposition.CONTROL)) != len(data) or "\0" in text:
                raise UserError("is binary data (not UTF-8 text); expected a file of exporter URLs, one a "
                                "line", value[1:])
            items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
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
    """Polls every `interval` seconds and writes each round to the outputs, until told to `stop`."""

    def __init__(self, poller: Exporters | PrometheusQueries, *, source: str, cluster_file: str | None,
                 outputs: list[str], interval: float, note: Note | None = None,
                 stop: Stop | None = None) -> None:
        self.poller = poller
        self.source = source
        self.cluster_file = cluster_file
        self.outputs = outputs
        self.interval = interval
        self.note = note or (lambda text: None)
        self.stop = stop if stop is not None else Stop()
        self.stream: TelemetryStream | None = None
        self.tee: _Tee | None = None
        self.down: dict[str, str] = {}
        self.counters: dict[tuple[str, int, str, str], tuple[float, float]] = {}
        self.hosts_cache: dict[tuple[str | None, str | None, str | None], tuple[str, ...]] = {}
        self.instance_of = (dict(zip(poller.targets, poller.instances)) if isinstance(poller, Exporters)
                            else {})
        self.rounds = 0
        self.waited = 0.0                   # seconds of rounds spent waiting for a first DCGM series
        self.skipped = 0
        self.started = 0.0

    # -- the first round: the cluster and the header ------------------------------------------------------

    def _first(self, duration: float | None) -> Poll | None:
        """The first round with GPU readings. A Prometheus server that answers with no DCGM series yet (a
        fresh server, or one whose first scrapes have not come) is waited for, a round every interval, with
        one note; None when told to stop, or when `duration` passes, meanwhile."""
        told = False
        while True:
            self.started = time.monotonic()
            first = self.poller.poll(self.stop)
            if first is None or first.answered == 0 or self.source != "prometheus" or \
                    any(metric in dcgm.GPU_METRICS for metric, _, _ in first.samples):
                return first
            if not told:
                self.note("Prometheus has no DCGM series yet (a fresh server, or dcgm-exporter not scraped "
                          f"yet): asking again every {units.seconds(self.interval)}")
                told = True
            due = self.started + self.interval
            self.waited += self.interval             # counted in the duration: watching ends on time
            if duration is not None and self.waited > duration + 1e-9:
                self.note("no DCGM series came while watching: nothing written")
                return None
            while not self.stop and time.monotonic() < due:
                time.sleep(min(TICK, max(0.0, due - time.monotonic())))
            if self.stop:
                return None

    def start(self, duration: float | None = None) -> bool:
        """The first round: UserError when nothing answers or nothing is a DCGM metric; then the header.
        False (nothing written) when told to stop first."""
        if self.cluster_file is not None:
            name, cluster, jobs = scenario.load_cluster(self.cluster_file)
        first = self._first(duration)
        if first is None:
            return False
        if first.answered == 0:
            target, reason = next(iter(first.failures.items()))
            more = (f" (and {len(first.failures) - 1:,} more targets failed)" if len(first.failures) > 1
                    else "")
            raise UserError(f"{reason}{more}; expected a reachable "
                            f"{'Prometheus server' if self.source == 'prometheus' else 'exporter'}", target)
        if not any(metric in dcgm.GPU_METRICS for metric, _, _ in first.samples):
            raise UserError(f"answered no DCGM GPU metric; expected {dcgm.GPU_UTIL}, {dcgm.SM_ACTIVE} or "
                            f"{dcgm.POWER} (dcgm-exporter's)", self.poller.targets[0])
        targets = self.poller.hosts(first)
        if self.cluster_file is None:
            name, cluster, jobs = inferred_cluster(first.samples, self.note, self.poller.models(), targets)
        self.cluster = cluster
        self.nodes = cluster.gpus // cluster.gpus_per_node
        self.placement = Placement(self.nodes, cluster.gpus_per_node, cluster.hosts)
        answering = self._gpu_hosts(first.samples)
        self.placement.place(targets or answering)
        unplaced = [names[0] for names in answering if self.placement.node_of(names) is None]
        if cluster.hosts and len(unplaced) == len(answering):
            raise UserError(no_match(list(cluster.hosts), [names[0] for names in answering],
                                     "the hosts that answered"), self.cluster_file)
        if not self.placement.order:
            raise UserError('no DCGM series has a "gpu" label and a host (hostname or instance) that fits '
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
        self.seen = np.zeros(cluster.gpus, dtype=bool)      # GPUs that reported at least once
        self._unplaced(0.0, unplaced)
        self._write(0.0, first)
        return True

    def _unplaced(self, t: float, hosts: list[str]) -> None:
        """Hosts that answer but have no node (not in cluster.hosts, or beyond the cluster's nodes): one
        warning line and a `hosts_unplaced` event, once per host."""
        new = sorted({h for h in hosts if h not in self.placement.unplaced_told}, key=natural_key)
        if not new:
            return
        self.placement.unplaced_told.update(new)
        why = "not in cluster.hosts" if self.placement.fixed else f"beyond the cluster's {self.nodes:,} nodes"
        self.note(f"warning: {units.count(len(new), 'host')} answering but not placed ({why}): {some(new)}")
        assert self.stream is not None
        self.stream.event(t, schema.HOSTS_UNPLACED, hosts=new, reason=why)

    def _target(self, target: str) -> dict[str, Any]:
        """What a target_down/up event names: for an exporter (its URL) or a target Prometheus finds down (its
        instance), the host: its host label when it served one, else its address and port, with its node and
        URL or instance; the Prometheus server itself by its URL. Only on changes: the lookup may scan."""
        instance = self.instance_of.get(target, target)
        if target == self.poller.targets[0] and self.source == "prometheus":
            return {"target": target}
        node = self.placement.node_of((instance,))
        if node is None:
            return {"target": instance} if instance == target else {"target": instance, "url": target}
        names = [n for n, k in self.placement.index.items() if k == node and without_port(n) == n]
        out: dict[str, Any] = {"target": names[0] if names else instance, "node": node}
        if instance != target:
            out["url"] = target                  # an exporter's
        elif out["target"] != instance:
            out["instance"] = instance           # a target Prometheus found down
        return out

    def _names(self, labels: dict[str, str]) -> tuple[str, ...]:
        key = (labels.get("Hostname"), labels.get("hostname"), labels.get("instance"))
        names = self.hosts_cache.get(key)
        if names is None:
            names = self.hosts_cache[key] = host_names(labels)
        return names

    def _gpu_hosts(self, samples: list[exposition.Sample]) -> list[tuple[str, ...]]:
        seen: dict[tuple[str, ...], None] = {}
        for metric, labels, _ in samples:
            if metric in dcgm.GPU_METRICS:
                names = self._names(labels)
                if names:
                    seen[names] = None
        return list(seen)

    # -- rounds -------------------------------------------------------------------------------------------

    def round(self, duration: float | None = None) -> bool:
        """Wait for the next round's time, poll, write; False (and nothing done) when that time is past
        `duration` seconds of watching or when told to stop. Rounds missed (the machine was suspended, or
        busy) are written as samples with every GPU missing: a gap shows as a gap."""
        rounds = self.rounds + 1
        due = self.started + rounds * self.interval
        now = time.monotonic()
        if now > due + self.interval:
            skipped = int((now - due) // self.interval)
            if duration is not None:
                skipped = min(skipped, max(0, int(duration / self.interval + 1e-9) - self.rounds))
            for k in range(skipped):
                t = round((self.rounds + 1 + k) * self.interval, 6)
                assert self.stream is not None
                self.stream.write(Frame.empty(t, self.cluster.gpus, self.nodes))
            self.skipped += skipped
            rounds += skipped
            due += skipped * self.interval
            if skipped:
                self.note(f"rounds missed their time ({units.seconds(self.interval)} apart): {skipped:,} "
                          "written with every GPU missing")
        if duration is not None and rounds * self.interval > duration + 1e-9:
            return False
        self.rounds = rounds
        while not self.stop and time.monotonic() < due:
            time.sleep(min(TICK, max(0.0, due - time.monotonic())))
        poll = self.poller.poll(self.stop) if not self.stop else None
        if poll is None:
            return False
        answering = self._gpu_hosts(poll.samples)
        placed = self.placement.place(answering)
        t = round(self.rounds * self.interval, 6)
        assert self.stream is not None
        if placed:
            self.stream.event(t, schema.HOSTS_PLACED, hosts=placed,
                              first_node=len(self.placement.order) - len(placed))
        self._unplaced(t, [names[0] for names in answering if self.placement.node_of(names) is None])
        self._write(t, poll)
        return True

    def _write(self, t: float, poll: Poll) -> None:
        stream = self.stream
        assert stream is not None
        for target, reason in poll.failures.items():
            if self.down.get(target) != reason:
                stream.event(t, schema.TARGET_DOWN, **self._target(target), error=reason)
            self.down[target] = reason
        for target in [t_ for t_ in self.down if t_ not in poll.failures]:
            del self.down[target]
            stream.event(t, schema.TARGET_UP, **self._target(target))
        frame = Frame.empty(t, self.cluster.gpus, self.nodes)
        gpu_of, names_of = self.placement.gpu_of, self._names
        node_near = self.placement.node_near
        now = self.started + t
        for metric, labels, value in poll.samples:
            if metric in dcgm.GPU_METRICS:
                gpu = gpu_of(names_of(labels), labels.get("gpu", ""))
                if gpu is not None:
                    frame.gpu[metric][gpu] = value
                continue
            node = node_near(names_of(labels))
            if node is None:
                continue
            key = (metric, node, labels.get("device", ""), labels.get("port", ""))
            last = self.counters.get(key)
            self.counters[key] = (now, value)
            if last is not None and now > last[0] and value >= last[1]:
                frame.nic[metric][node] += (value - last[1]) / (now - last[0])
                frame.ports[metric][node] += 1
        for values in frame.gpu.values():
            self.seen |= ~np.isnan(values)
        stream.write(frame)

    def summary(self) -> str | None:
        """The line watch ends with: the files written and what they hold; None when nothing was."""
        files = [path for path in self.outputs if path != "-"]
        if self.stream is None or not files:
            return None
        return summary(files, samples=self.stream.samples, step_s=self.interval,
                       hosts=len(self.placement.order), gpus_reporting=int(self.seen.sum()),
                       gpus=self.cluster.gpus, faults=self.stream.faults)

    def close(self) -> None:
        if self.stop:
            cancel()                # requests in flight end now: no thread keeps the process
        self.poller.close()
        warnings = [self.stream.bounds_warning() if self.stream else None,
                    self.poller.warning()]
        for warning in warnings:
            if warning:
                self.note(f"warning: {warning}")
        if self.tee is not None:
            self.tee.close()


def watch(poller: Exporters | PrometheusQueries, *, source: str, cluster_file: str | None, outputs: list[str],
          interval: float, duration: float | None = None, note: Note | None = None,
          stop: Stop | None = None) -> Watcher:
    """Watch until `duration` (seconds of watching) or until `stop` is set (a signal);
    the outputs are closed either way."""
    watcher = Watcher(poller, source=source, cluster_file=cluster_file, outputs=outputs, interval=interval,
                      note=note, stop=stop)
    try:
        if watcher.start(duration):
            while watcher.round(None if duration is None else duration - watcher.waited):
                pass
    finally:
        watcher.close()
    return watcher
