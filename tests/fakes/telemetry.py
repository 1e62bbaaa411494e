"""Real telemetry made from a simulated run, for the telemetry tests and benchmarks: Prometheus range-query
dumps and dcgm-exporter pages built from a recording's samples (utilization as DCGM_FI_DEV_GPU_UTIL percent,
power as DCGM_FI_DEV_POWER_USAGE watts), and standard-library HTTP servers on 127.0.0.1 that serve them (a
fake Prometheus and fake exporters), each in a thread of its own. The tests reach them through the fixtures of
tests/conftest.py (simulated_run, telemetry, exporters, prometheus, http_server)."""

from __future__ import annotations

import random
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, Self

import numpy as np
import orjson
from clustertop.engine.stream.reader import Reader
from clustertop.engine.stream.state import ClusterState

UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER = "DCGM_FI_DEV_POWER_USAGE"
T0 = 1_717_000_000.0            # unix time of the simulated run's t = 0 in the dumps


class SimulatedRun(NamedTuple):
    """A recorded simulation: its scenario file, its recording, and its frames (see `frames`)."""

    scenario: str
    recording: str
    frames: list[tuple[float, np.ndarray, np.ndarray]]


def simulate(directory: Path) -> SimulatedRun:
    """A 64-GPU simulated run (plan.py's SMALL: TP2 PP4 DP8, the fake cost model) sampled every second for
    10 s, written in `directory`."""
    import clustertop.engine.sim.run as engine_run
    from clustertop.cli import main

    from .plan import QUIET, SMALL, fake_planner, write_scenario

    engine_run.default_planner, saved = fake_planner, engine_run.default_planner
    recording = str(directory / "sim.jsonl")
    try:
        scenario = write_scenario(directory, SMALL + QUIET)
        assert main(["record", scenario, "-o", recording, "--duration", "10s", "--sample", "1s"]) == 0
    finally:
        engine_run.default_planner = saved
    return SimulatedRun(scenario, recording, frames(recording))


def hosts(nodes: int) -> list[str]:
    """Host names whose natural order is not their text order (gpu-node-2 before gpu-node-10)."""
    return [f"gpu-node-{i + 1}" for i in range(nodes)]


def frames(recording: str) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(t, utilization in percent, power in W) per GPU at every sample of a recording."""
    reader = Reader(recording)
    state = ClusterState(reader.header)
    out = []
    for event in reader.applied(state):
        if event["type"] == "sample":
            out.append((float(event["t"]), np.rint(state.util * 100).astype(np.int64),
                        state.power_w.astype(np.float64).copy()))
    return out


def labels(metric: str, host: str, node: int, slot: int) -> dict[str, str]:
    """dcgm-exporter's labels as Prometheus stores them (instance: the exporter's address)."""
    return {"__name__": metric, "DCGM_FI_DRIVER_VERSION": "550.54.15", "Hostname": host,
            "UUID": f"GPU-{node:04x}{slot:04x}-5e2f-4b7a-9c1d-3f6a8e0b2d71", "device": f"nvidia{slot}",
            "gpu": str(slot), "instance": f"10.1.{node // 250}.{node % 250 + 1}:9400", "job": "dcgm-exporter",
            "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"00000000:{0x18 + slot:02X}:00.0"}


def value_text(metric: str, value: float) -> str:
    return str(int(value)) if metric == UTIL else f"{value:.3f}"


def range_dump(path: Path, metric: str, data: list[tuple[float, np.ndarray, np.ndarray]], names: list[str],
               per_node: int, *, gaps: Callable[[int, float], bool] | None = None, shuffle: int = 0,
               t0: float = T0) -> Path:
    """The JSON of /api/v1/query_range for one metric over `data`; `gaps(gpu, t)` drops points, series are in
    a shuffled order (seeded) so placement cannot rely on the file's order."""
    column = 1 if metric == UTIL else 2
    order = list(range(len(names) * per_node))
    random.Random(shuffle).shuffle(order)
    with open(path, "wb") as f:
        f.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
        for k, gpu in enumerate(order):
            node, slot = divmod(gpu, per_node)
            values = [[round(t0 + t, 3), value_text(metric, float(row[column][gpu]))]
                      for row in data for t in (row[0],) if not (gaps and gaps(gpu, t))]
            if not values:
                continue
            f.write((b"," if k else b"") + orjson.dumps({"metric": labels(metric, names[node], node, slot),
                                                         "values": values}))
        f.write(b"]}}")
    return path


def exporter_page(values: dict[str, np.ndarray], host: str, node: int, per_node: int,
                  extra: str = "") -> bytes:
    """A dcgm-exporter /metrics page for one node: HELP and TYPE lines, then a sample per GPU per metric."""
    lines = []
    for metric, array in values.items():
        lines += [f"# HELP {metric} {metric} (fake).", f"# TYPE {metric} gauge"]
        for slot in range(per_node):
            lab = labels(metric, host, node, slot)
            del lab["__name__"], lab["instance"], lab["job"]      # Prometheus adds those when it scrapes
            text = ",".join(f'{k}="{v}"' for k, v in lab.items())
            lines.append(f"{metric}{{{text}}} {value_text(metric, float(array[node * per_node + slot]))}")
    return ("\n".join(lines) + "\n" + extra).encode()


Route = Callable[[str, dict[str, list[str]]], tuple[int, str, bytes]]


class _Server(ThreadingHTTPServer):
    # The stdlib's backlog of 5 drops connections of a round of parallel queries: their SYN is resent a
    # second later, past the round's deadline (real servers listen deeper).
    request_queue_size = 128
    daemon_threads = True


class FakeServer:
    """A ThreadingHTTPServer on a loopback address (a free port) answering GETs with `route(path, query)`."""

    def __init__(self, route: Route, host: str = "127.0.0.1") -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                status, kind, body = outer.route(parts.path, urllib.parse.parse_qs(parts.query))
                outer.requests += 1
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.route = route
        self.requests = 0
        self.server = _Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Replay:
    """A simulated run's frames played back: `frame()` is the one to show now, advanced by `advance()`."""

    def __init__(self, data: list[tuple[float, np.ndarray, np.ndarray]], names: list[str],
                 per_node: int) -> None:
        self.data = data
        self.names = names
        self.per_node = per_node
        self.k = 0

    def values(self) -> dict[str, np.ndarray]:
        _, util, power = self.data[min(self.k, len(self.data) - 1)]
        return {UTIL: util, POWER: power}

    def advance(self) -> None:
        self.k += 1


class Exporters:
    """One fake dcgm-exporter per node of the replay, each on a loopback address of its own (127.0.0.2, ...:
    every node a host, as in a cluster), serving that node's page of the replay's current frame at /metrics;
    `broken[node]` = (status, body) answers instead."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.broken: dict[int, tuple[int, bytes]] = {}
        self.servers = [FakeServer(self._route(node), f"127.0.0.{node + 2}")
                        for node in range(len(replay.names))]
        self.urls = [f"{server.url}/metrics" for server in self.servers]

    def _route(self, node: int) -> Route:
        def route(path: str, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
            if node in self.broken:
                status, body = self.broken[node]
                return status, "text/plain", body
            if path != "/metrics":
                return 404, "text/plain", b"404 page not found\n"
            page = exporter_page(self.replay.values(), self.replay.names[node], node, self.replay.per_node)
            return 200, "text/plain; version=0.0.4", page

        return route

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prometheus(replay: Replay) -> Route:
    """/api/v1/query for `max by (Hostname, instance, gpu) (METRIC)` (what clustertop asks) and plain metric
    names: a vector of the replay's current frame; `timestamp(METRIC)` in the query: each reading's scrape
    time, the evaluation's (fresh)."""

    def route(path: str, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        if path != "/api/v1/query":
            return 404, "text/plain", b"404 page not found"
        q = query.get("query", [""])[0]
        metric = q.rsplit("(", 1)[-1].rstrip(")").strip() if "(" in q else q
        result = []
        values = replay.values()
        if metric in values and "timestamp(" in q:            # scraped just now
            for gpu in range(len(values[metric])):
                node, slot = divmod(gpu, replay.per_node)
                lab = labels(metric, replay.names[node], node, slot)
                lab = {k: lab[k] for k in ("Hostname", "instance", "gpu")}
                result.append({"metric": lab, "value": [T0, repr(T0)]})
        elif metric in values:
            for gpu, value in enumerate(values[metric]):
                node, slot = divmod(gpu, replay.per_node)
                lab = labels(metric, replay.names[node], node, slot)
                lab = {k: lab[k] for k in ("Hostname", "instance", "gpu")}
                result.append({"metric": lab, "value": [T0, value_text(metric, float(value))]})
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    return route


class FakePrometheus(FakeServer):
    """A fake Prometheus on 127.0.0.1 answering instant queries with `replay`'s current frame (see
    `prometheus`)."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        super().__init__(prometheus(replay))


class Trickle:
    """A server on 127.0.0.1 that answers slowly: `headers` False sends its status line and headers a byte at
    a time, True sends them at once; then the body (`length` bytes promised) comes a byte every `gap`
    seconds, so no single read ever waits long. `hang` accepts and never sends anything."""

    def __init__(self, gap: float = 0.1, headers: bool = True, hang: bool = False,
                 length: int = 10_000) -> None:
        import socket

        self.gap, self.headers, self.hang, self.length = gap, headers, hang, length
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Any) -> None:
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                + str(self.length).encode() + b"\r\n\r\n")
        try:
            conn.recv(65536)
            if self.hang:
                self.closed.wait()
                return
            if self.headers:
                conn.sendall(head)
            else:
                for k in range(len(head)):
                    if self.closed.wait(self.gap):
                        return
                    conn.sendall(head[k:k + 1])
            for _ in range(self.length):
                if self.closed.wait(self.gap):
                    return
                conn.sendall(b"#")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
