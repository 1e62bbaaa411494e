"""Host identity (issue 27): a host is its exporter's `Hostname` or `hostname` label, else its whole instance
(address and port); exporters behind one address are as many nodes as ports; node_exporter's ports join the
node at their address only when exactly one node is there; `cluster.hosts` that names none of the hosts is one
line and exit code 2, some of them a warning and an event. Servers on 127.0.0.1 only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from clustertop.cli import main
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import dcgm

CLUSTER = """\
name = "site"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 32
gpus_per_node = 8
gpus_per_rack = 16
"""


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustertop", "watch", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def page(util: float, host_label: str | None = None, host: str = "") -> bytes:
    lines = [f"# TYPE {dcgm.GPU_UTIL} gauge"]
    for slot in range(8):
        where = f',{host_label}="{host}"' if host_label else ""
        lines.append(f'{dcgm.GPU_UTIL}{{gpu="{slot}"{where}}} {util}')
    return ("\n".join(lines) + "\n").encode()


def test_two_exporters_on_one_address_are_two_nodes(http_server: Any, tmp_path: Path) -> None:
    a = http_server(lambda path, query: (200, "text/plain", page(10.0)))
    b = http_server(lambda path, query: (200, "text/plain", page(90.0)))
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", f"{a.url}/metrics,{b.url}/metrics", "--interval", "0.3s", "--duration", "0.1s",
                 "-o", str(out))
    assert done.returncode == 0, done.stderr
    reader = Reader(str(out))
    hosts = reader.header["telemetry"]["hosts"]
    assert reader.header["topology"]["gpus"] == 16
    assert sorted(hosts) == sorted([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
    util = reader.fold().util
    first = hosts.index(f"127.0.0.1:{a.port}")
    assert np.allclose(util[first * 8:first * 8 + 8], 0.1) and np.allclose(util[(1 - first) * 8:][:8], 0.9)


def test_the_lowercase_hostname_label_names_hosts_behind_one_address(
        http_server: Any, tmp_path: Path) -> None:
    """dcgm-exporter since May 2026 writes `hostname`; two such hosts behind one address (a proxy)."""

    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        result = []
        if dcgm.GPU_UTIL in query.get("query", [""])[0]:
            for n, (host, port) in enumerate((("dgx-b", 9401), ("dgx-a", 9400))):
                result += [{"metric": {"hostname": host, "instance": f"10.0.0.1:{port}", "gpu": str(g)},
                            "value": [1.0, str(10 + 50 * n)]} for g in range(8)]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    server = http_server(route)
    out = tmp_path / "p.jsonl"
    done = watch("--prometheus", server.url, "--interval", "0.3s", "--duration", "0.1s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    reader = Reader(str(out))
    assert reader.header["telemetry"]["hosts"] == ["dgx-a", "dgx-b"]
    util = reader.fold().util
    assert np.allclose(util[:8], 0.6) and np.allclose(util[8:], 0.1)


def _dump(path: Path, series: list[dict]) -> Path:
    path.write_bytes(orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}))
    return path


def _series(metric: str, labels: dict[str, str], values: list[float]) -> dict:
    return {"metric": {"__name__": metric, **labels},
            "values": [[1_717_000_000 + 15 * k, repr(v)] for k, v in enumerate(values)]}


def test_the_import_keeps_hosts_behind_one_address_apart(tmp_path: Path) -> None:
    series = [_series(dcgm.GPU_UTIL, {"instance": f"10.0.0.1:{port}", "gpu": str(g)}, [10.0 + g, 20.0])
              for port in (9400, 9401) for g in range(8)]
    series += [_series(dcgm.XID, {"instance": f"10.0.0.1:{port}", "gpu": "0"}, [0.0, 13.0 * (port - 9399)])
               for port in (9400, 9401)]
    # node_exporter at the shared address: which node it serves is not known, so its ports are not placed
    series.append(_series(dcgm.IB_TX, {"instance": "10.0.0.1:9100", "device": "mlx5_0", "port": "1"},
                          [0.0, 15e9]))
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER)
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(_dump(tmp_path / "d.json", series)), "--cluster", str(cluster),
                 "-o", str(out)]) == 0
    reader = Reader(str(out))
    assert reader.header["telemetry"]["hosts"] == ["10.0.0.1:9400", "10.0.0.1:9401"]
    events = list(reader.events())
    samples = [e for e in events if e["type"] == "sample"]
    missing = np.repeat(samples[0]["missing"]["util"]["v"], samples[0]["missing"]["util"]["n"]).astype(bool)
    assert not missing[:16].any() and missing[16:].all()                # 16 of 32 GPUs report
    faults = [(e["node"], e["xid"]) for e in events if e["type"] == "fault"]
    assert faults == [(0, 13), (1, 26)]                                  # each on its own node
    assert "leaf" not in (samples[1].get("links") or {})


def test_cluster_hosts_matching_no_host_is_one_line_with_a_domain_hint(
        exporters: Any, simulated_run: Any, telemetry: Any, tmp_path: Path) -> None:
    names = [f"{h}.cluster.example.com" for h in telemetry.hosts(8)]
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER.replace("gpus = 32", f"gpus = 64\nhosts = {orjson.dumps(names).decode()}"))
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", ",".join(exporters.urls), "--cluster", str(cluster), "--interval", "0.3s",
                 "-o", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "gpu-node-1.cluster.example.com" in done.stderr and "'gpu-node-1'" in done.stderr
    assert "drop the domain" in done.stderr and not out.exists()
    dump = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, simulated_run.frames,
                                telemetry.hosts(8), 8)
    assert main(["import", "prometheus", str(dump), "--cluster", str(cluster), "-o", str(out)]) == 2
    assert not out.exists()


def test_cluster_hosts_naming_some_hosts_is_a_warning_and_an_event(
        exporters: Any, telemetry: Any, tmp_path: Path) -> None:
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER.replace("gpus = 32", f"gpus = 48\nhosts = "
                                                    f"{orjson.dumps(telemetry.hosts(6)).decode()}"))
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", ",".join(exporters.urls), "--cluster", str(cluster), "--interval", "0.3s",
                 "--duration", "0.3s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "warning: 2 hosts answering but not placed (not in cluster.hosts)" in done.stderr
    unplaced = [e for e in Reader(str(out)).events() if e["type"] == "hosts_unplaced"]
    assert len(unplaced) == 1 and unplaced[0]["hosts"] == ["gpu-node-7", "gpu-node-8"]


def test_a_target_prometheus_finds_down_is_an_event_and_its_gpus_no_data(
        http_server: Any, tmp_path: Path) -> None:
    """After its first round, host b's exporter stops answering Prometheus (`up` 0) while its last values
    are still within the lookback: an event naming its instance, and its GPUs missing, not stale."""
    asked = {"up": 0}

    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        q = query.get("query", [""])[0]
        result = []
        if q == "up":
            asked["up"] += 1
            result = [{"metric": {"instance": f"10.0.0.{n}:9400", "job": "gpu"},
                       "value": [1.0, "0" if n == 2 and asked["up"] > 1 else "1"]} for n in (1, 2)]
        elif dcgm.GPU_UTIL in q and "timestamp(" not in q:
            result = [{"metric": {"Hostname": f"dgx-{n}", "instance": f"10.0.0.{n}:9400", "gpu": str(g)},
                       "value": [1.0, "40"]} for n in (1, 2) for g in range(8)]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    server = http_server(route)
    out = tmp_path / "p.jsonl"
    done = watch("--prometheus", server.url, "--interval", "0.3s", "--duration", "0.3s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    events = list(Reader(str(out)).events())
    down = [e for e in events if e["type"] == "target_down"]
    assert len(down) == 1 and down[0]["target"] == "dgx-2" and "up == 0" in down[0]["error"]
    assert down[0]["instance"] == "10.0.0.2:9400" and down[0]["node"] == 1
    samples = [e for e in events if e["type"] == "sample"]
    assert "util" not in samples[0]["missing"]              # no power served: power is missing
    missing = np.repeat(samples[1]["missing"]["util"]["v"], samples[1]["missing"]["util"]["n"]).astype(bool)
    assert not missing[:8].any() and missing[8:].all()


def test_events_of_an_exporter_name_its_host_not_its_url(http_server: Any, tmp_path: Path) -> None:
    """An exporter that served its host label, then fails: target_down and target_up name the host (dgx-b),
    with its node and URL."""
    served = {"b": 0}

    def route_b(path: str, query: dict) -> tuple[int, str, bytes]:
        served["b"] += 1
        return (500, "text/plain", b"oops") if served["b"] == 2 else (200, "text/plain",
                                                                        page(50.0, "Hostname", "dgx-b"))

    a = http_server(lambda path, query: (200, "text/plain", page(10.0, "Hostname", "dgx-a")))
    b = http_server(route_b)
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", f"{a.url}/metrics,{b.url}/metrics", "--interval", "0.2s", "--timeout", "0.2s",
                 "--duration", "0.4s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    events = [e for e in Reader(str(out)).events() if e["type"] in ("target_down", "target_up")]
    assert [(e["type"], e["target"], e["url"]) for e in events] == [
        ("target_down", "dgx-b", f"{b.url}/metrics"), ("target_up", "dgx-b", f"{b.url}/metrics")], events


def test_readings_prometheus_holds_from_an_old_scrape_are_missing(http_server: Any, tmp_path: Path) -> None:
    """After a restart Prometheus answers a target's last values for up to its 5-minute lookback: the
    target's last scrape (`timestamp(up)`; a result's own time is the evaluation's) 500 s before the
    evaluation is an event and its GPUs missing; a target scraped 2 s before is read."""

    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        q = query.get("query", [""])[0]
        now = 1_700_000_000.0
        result = []
        if q == "timestamp(up)":
            result = [{"metric": {"instance": f"10.0.0.{n}:9400", "job": "gpu"},
                       "value": [now, repr(now - (500.0 if n == 2 else 2.0))]} for n in (1, 2)]
        elif q == "up":
            result = [{"metric": {"instance": f"10.0.0.{n}:9400", "job": "gpu"}, "value": [now, "1"]}
                      for n in (1, 2)]
        elif dcgm.GPU_UTIL in q and "timestamp(" not in q:
            result = [{"metric": {"Hostname": f"dgx-{n}", "instance": f"10.0.0.{n}:9400", "gpu": str(g)},
                       "value": [now, "40"]} for n in (1, 2) for g in range(8)]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    server = http_server(route)
    out = tmp_path / "p.jsonl"
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER.replace("gpus = 32", "gpus = 16"))
    done = watch("--prometheus", server.url, "--cluster", str(cluster), "--interval", "0.3s", "--duration",
                 "0.3s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    reader = Reader(str(out))
    events = list(reader.events())
    down = [e for e in events if e["type"] == "target_down"]
    assert len(down) == 1 and down[0]["target"] == "10.0.0.2:9400", down    # stale from the start: no node
    assert down[0]["error"].startswith("no scrape for 500 s")
    node = reader.header["telemetry"]["hosts"].index("dgx-1")
    for sample in (e for e in events if e["type"] == "sample"):
        missing = np.repeat(sample["missing"]["util"]["v"], sample["missing"]["util"]["n"]).astype(bool)
        assert not missing[node * 8:node * 8 + 8].any() and missing.sum() == 8


def test_a_targets_scrape_interval_is_learnt_so_a_slow_scraper_is_not_stale() -> None:
    """Scrapes every 30 s watched every 5 s: a reading 40 s old is within 2 x 30 s, one 70 s old is not;
    before any gap is seen, a minute (Prometheus's default interval) is assumed."""
    from clustertop.engine.telemetry.watch import PrometheusQueries

    poller = PrometheusQueries("http://127.0.0.1:9", 1.0, interval=5.0)
    poller.known.add("a:9400")
    labels = {"instance": "a:9400"}
    assert poller._stale([(labels, 1000.0)], 1100.0) == {}                 # 100 s < 2 x 60 s (not known)
    assert poller._stale([(labels, 1030.0)], 1080.0) == {}                 # a gap of 30 s: limit 60 s
    assert poller._stale([(labels, 1030.0)], 1100.0) == {"a:9400": 70.0}
    poller.close()


def test_a_reading_whose_own_scrape_is_old_is_missing_though_its_target_is_fresh(
        http_server: Any, tmp_path: Path) -> None:
    """Readings carry their own age (`timestamp()` of each series, asked with its values): GPU 3's
    utilization last scraped 500 s ago (a series a federation or remote-write path stopped updating) is
    missing, while its power and its target, scraped 2 s ago, are read; one warning counts them, no event."""

    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        q = query.get("query", [""])[0]
        now = 1_700_000_000.0
        result = []
        targets = [{"instance": "10.0.0.1:9400", "job": "gpu"}]
        gpus = [{"Hostname": "dgx-1", "instance": "10.0.0.1:9400", "gpu": str(g)} for g in range(8)]
        if q == "timestamp(up)":
            result = [{"metric": m, "value": [now, repr(now - 2.0)]} for m in targets]
        elif q == "up":
            result = [{"metric": m, "value": [now, "1"]} for m in targets]
        elif "timestamp(" in q and (dcgm.GPU_UTIL in q or dcgm.POWER in q):
            old = dcgm.GPU_UTIL in q
            result = [{"metric": m, "value": [now, repr(now - (500.0 if old and g == 3 else 2.0))]}
                      for g, m in enumerate(gpus)]
        elif dcgm.GPU_UTIL in q or dcgm.POWER in q:
            result = [{"metric": m, "value": [now, "40"]} for m in gpus]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    server = http_server(route)
    out = tmp_path / "p.jsonl"
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER.replace("gpus = 32", "gpus = 8").replace("rack = 16", "rack = 8"))
    done = watch("--prometheus", server.url, "--cluster", str(cluster), "--interval", "0.3s", "--duration",
                 "0.3s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "warning: 2 readings older than twice the interval" in done.stderr, done.stderr
    events = list(Reader(str(out)).events())
    assert not [e for e in events if e["type"] in ("target_down", "target_up")]
    samples = [e for e in events if e["type"] == "sample"]
    assert len(samples) == 2
    for sample in samples:
        util = np.repeat(sample["missing"]["util"]["v"], sample["missing"]["util"]["n"]).astype(bool)
        assert util.tolist() == [False] * 3 + [True] + [False] * 4
        assert "power_w" not in sample["missing"]
