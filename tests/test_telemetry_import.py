"""`clustertop import prometheus`: a simulated run exported as Prometheus range-query dumps and imported back
gives the same per-GPU utilization and power; placement, gaps, XID faults, links, and bad dumps
as one line."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import dcgm

CLUSTER_ONLY = """\
name = "site"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 64
gpus_per_node = 8
gpus_per_rack = 16
racks_per_pod = 2
"""


def events(path: Path) -> list[dict]:
    reader = Reader(str(path))
    return [reader.header, *reader.events()]


def test_a_simulated_run_exported_and_imported_back_is_the_same(
        simulated_run: Any, telemetry: Any, tmp_path: Path, capsys: Any) -> None:
    scenario, data = simulated_run.scenario, simulated_run.frames
    names = telemetry.hosts(8)
    util = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, names, 8, shuffle=1)
    power = telemetry.range_dump(tmp_path / "power.json.gz", telemetry.POWER, data, names, 8, shuffle=2)
    power.write_bytes(gzip.compress(power.read_bytes()))             # a gzip dump reads the same
    out = tmp_path / "real.jsonl.gz"
    assert main(["import", "prometheus", str(power), str(util), "--cluster", scenario, "-o", str(out)]) == 0
    back = telemetry.frames(str(out))
    assert [t for t, _, _ in back] == [t for t, _, _ in data]
    for (_, u, p), (_, u2, p2) in zip(data, back):
        assert np.array_equal(u, u2) and np.array_equal(p, p2)
    header = Reader(str(out)).header
    assert header["sampling"] == "instant" and header["sample_interval_s"] == 1.0
    assert header["telemetry"]["start_unix"] == telemetry.T0 and header["duration_s"] == 10.0
    assert header["telemetry"]["hosts"] == names       # natural order: gpu-node-2 before gpu-node-10
    assert [j["name"] for j in header["jobs"]] == ["train"]  # the scenario's jobs say which GPUs run what
    assert all("missing" not in e for e in events(out)[1:])
    last = capsys.readouterr().err.splitlines()[-1]           # the README's summary line
    assert last == (f"clustertop: wrote {out} ({out.stat().st_size / 1e3:.3g} kB): 11 samples over 10 s (one "
                    "every 1 s), 8 hosts, 64 of 64 GPUs reporting, 0 faults"), last


def test_compare_opens_an_imported_recording_beside_its_scenario(
        simulated_run: Any, telemetry: Any, tmp_path: Path) -> None:
    from clustertop.commands.compare import open_side

    scenario, data = simulated_run.scenario, simulated_run.frames
    dump = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, telemetry.hosts(8), 8)
    out = tmp_path / "real.jsonl.gz"
    assert main(["import", "prometheus", str(dump), "--cluster", scenario, "-o", str(out)]) == 0
    side = open_side(str(out))
    state = side.state_at(5.0)
    assert state.mean("util") == pytest.approx(float(data[5][1].mean()) / 100, abs=1e-6)
    assert state.missing("power_w") is not None and state.missing("power_w").all()   # no power dump: missing
    assert state.mean("power_w") is None


def test_missing_series_and_gaps_are_missing_not_zero(
        simulated_run: Any, telemetry: Any, tmp_path: Path) -> None:
    data = simulated_run.frames
    names = telemetry.hosts(8)
    util = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, names, 8,
                                gaps=lambda gpu, t: (gpu < 8 and 3 <= t <= 5) or 7 <= t <= 8)
    power = telemetry.range_dump(tmp_path / "power.json", telemetry.POWER, data, names, 8,
                                 gaps=lambda gpu, t: 7 <= t <= 8)
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY)
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(util), str(power), "--cluster", str(cluster),
                 "-o", str(out)]) == 0
    samples = {e["t"]: e for e in events(out)[1:] if e["type"] == "sample"}
    assert sorted(samples) == [float(t) for t in range(11)]  # a time nobody reported is still a sample
    def missing(t: float) -> np.ndarray:
        flags = samples[t]["missing"]["util"]
        return np.repeat(flags["v"], flags["n"]).astype(bool)
    assert missing(4.0)[:8].all() and not missing(4.0)[8:].any()      # node 0's gap
    assert missing(7.0).all() and missing(8.0).all()                  # nobody: the whole cluster
    assert "util" not in samples[6.0].get("missing", {})
    assert "site_mw" in samples[6.0] and "site_mw" not in samples[7.0]    # no power reading: no site power
    assert samples[4.0]["util"]["v"][0] == 0                               # placeholder under the flag


def test_hosts_list_places_nodes_and_leaves_out_the_others(
        simulated_run: Any, telemetry: Any, tmp_path: Path, capsys) -> None:
    data = simulated_run.frames
    names = telemetry.hosts(8)
    util = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, names, 8)
    order = list(reversed(names[:6]))     # 6 hosts mapped (reversed); gpu-node-7 and -8 are not in the list
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("racks_per_pod = 2",
                                            f"racks_per_pod = 2\nhosts = {orjson.dumps(order).decode()}"))
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(util), "--cluster", str(cluster), "-o", str(out)]) == 0
    assert "skipped 16 series from hosts not in cluster.hosts" in capsys.readouterr().err
    back = telemetry.frames(str(out))
    _, u, _ = data[5]
    _, u2, _ = back[5]
    assert np.array_equal(u2[:8], u[5 * 8:6 * 8])       # node 0 is gpu-node-6 (the list's first)
    assert np.array_equal(u2[40:48], u[:8])             # node 5 is gpu-node-1
    assert (u2[48:] == 0).all()
    state = Reader(str(out)).fold()
    assert state.missing("util")[48:].all() and not state.missing("util")[:48].any()


@pytest.fixture
def series_of(telemetry: Any) -> Any:
    """`series_of(metric, labels, points)`: one series of a range dump, its points (t, value) from the dumps'
    start."""

    def series(metric: str, labels: dict[str, str], points: list[tuple[float, float]]) -> dict:
        return {"metric": {"__name__": metric, **labels},
                "values": [[telemetry.T0 + t, repr(v)] for t, v in points]}

    return series


def _dump(path: Path, series: list[dict]) -> Path:
    path.write_bytes(orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}))
    return path


def test_xid_errors_are_faults_with_the_code_named_and_links_come_from_nvlink_and_nic_counters(
        tmp_path: Path, series_of: Any) -> None:
    gpu = {"Hostname": "n1", "gpu": "3", "instance": "10.0.0.1:9400"}
    ticks = [float(t) for t in range(0, 60, 15)]
    series = [
        series_of(dcgm.GPU_UTIL, gpu, [(t, 90.0) for t in ticks]),
        series_of(dcgm.XID, gpu, [(0.0, 13.0), (15.0, 13.0), (30.0, 79.0), (45.0, 79.0)]),  # 13 was before
        series_of(dcgm.NVLINK_TX, gpu, [(t, 225e9) for t in ticks]),                  # half of NVLink 4's 450
        series_of(dcgm.NVLINK_RX, gpu, [(t, 45e9) for t in ticks]),
        series_of(dcgm.FB_USED, gpu, [(t, 40960.0) for t in ticks]),                   # 40 GiB in MiB
        # the node's NIC (node_exporter on port 9100): 12.5 GB/s of 50 GB/s after the first reading
        series_of(dcgm.IB_TX, {"instance": "10.0.0.1:9100", "device": "mlx5_0", "port": "1"},
                  [(t, 12.5e9 * t) for t in ticks]),
        series_of("node_cpu_seconds_total", {"instance": "10.0.0.1:9100"}, [(t, t) for t in ticks]),
    ]
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("gpus = 64", "gpus = 16"))
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(_dump(tmp_path / "d.json", series)), "--cluster", str(cluster),
                 "-o", str(out)]) == 0
    lines = events(out)
    faults = [e for e in lines if e["type"] == "fault"]
    assert len(faults) == 1 and faults[0]["t"] == 30.0 and faults[0]["gpu"] == 3 and faults[0]["host"] == "n1"
    assert faults[0]["cause"] == "XID 79: GPU has fallen off the bus" and faults[0]["xid"] == 79
    assert faults[0]["scope"] == "node"
    samples = [e for e in lines if e["type"] == "sample"]
    assert samples[2]["links"]["node"][0] == pytest.approx(0.5)  # the GPUs that report: the busier direction
    assert "leaf" not in samples[0]["links"] and samples[1]["links"]["leaf"][0] == pytest.approx(0.25)
    assert np.repeat(samples[2]["phase"]["v"], samples[2]["phase"]["n"])[3] == 10 - 0  # failed (code 10)
    state = Reader(str(out)).fold()
    assert state.memory_gb is not None and state.memory_gb[3] == pytest.approx(42.9, abs=0.05)
    assert not state.missing("memory_gb")[3] and state.missing("memory_gb")[4]


@pytest.mark.parametrize(("content", "message"), [
    (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "resultType is 'vector'; expected"),
    (b'{"status":"error","errorType":"bad_data","error":"parse error"}',
     "Prometheus error (bad_data): parse error"),
    (b"<html>nope</html>", "does not start with a JSON object"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"],[2,"x"]]}]}}',
     "has a point that is not [timestamp, \"value\"]"),
    ((b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL",'
      b'"gpu":"0"},"values":[[1,"2"],[2,"3"]]}]}}'), 'no "Hostname" or "instance" label'),
    ((b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"up","instance":"a"},'
      b'"values":[[1,"1"],[2,"1"]]}]}}'), "no DCGM GPU metric in the dumps"),
    ((b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL",'
      b'"gpu":"9","Hostname":"a"},"values":[[1,"2"],[2,"3"]]}]}}'),
     "gpu label '9' is not a slot of a node of 8"),
    ((b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL",'
      b'"gpu":"1","Hostname":"a"},"values":[[1,"2"],[2,"3"]]},{"metric": {"gpu": '), "is not valid JSON"),
])
def test_bad_dumps_are_one_line_and_write_nothing(tmp_path: Path, capsys, content: bytes,
                                                  message: str) -> None:
    dump = tmp_path / "dump.json"
    dump.write_bytes(content)
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY)
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(dump), "--cluster", str(cluster), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(dump) in err, err
    assert not out.exists()


def test_more_hosts_than_nodes_is_refused(simulated_run: Any, telemetry: Any, tmp_path: Path, capsys) -> None:
    data = simulated_run.frames
    util = telemetry.range_dump(tmp_path / "util.json", telemetry.UTIL, data, telemetry.hosts(8), 8)
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("gpus = 64", "gpus = 48"))
    assert main(["import", "prometheus", str(util), "--cluster", str(cluster),
                 "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "more than the cluster's 6 nodes report GPUs" in capsys.readouterr().err


def test_dumps_of_consecutive_windows_are_written_window_by_window(
        simulated_run: Any, telemetry: Any, tmp_path: Path) -> None:
    """Two dumps of 5 s each, given in reverse order: read by time, the first window written before the second
    is read (the window's grid is dropped once written), the same samples as one dump."""
    from clustertop.engine.telemetry import importer

    scenario, data = simulated_run.scenario, simulated_run.frames
    names = telemetry.hosts(8)
    early = telemetry.range_dump(tmp_path / "a.json", telemetry.UTIL, data[:6], names, 8)
    late = telemetry.range_dump(tmp_path / "b.json", telemetry.UTIL, data[6:], names, 8)
    out = tmp_path / "real.jsonl"
    job = importer.Importer([str(late), str(early)], scenario, str(out))
    written_before_second: list[int] = []
    read = job._read

    def spy(path: str) -> None:
        if path == str(late):
            written_before_second.append(job.written)
        read(path)

    job._read = spy       # type: ignore[method-assign]
    job.run()
    assert written_before_second == [6]
    back = telemetry.frames(str(out))
    assert [t for t, _, _ in back] == [t for t, _, _ in data]
    assert all(np.array_equal(u, u2) for (_, u, _), (_, u2, _) in zip(data, back))


def test_dumps_the_fast_path_does_not_take_read_the_same(tmp_path: Path, series_of: Any) -> None:
    """A label value holding `]]}`, an empty series, a NaN point and a pretty-printed file (ijson reads what
    orjson's slices do not take) give the same readings as the compact dump."""
    from clustertop.engine.telemetry import promjson

    gpu = {"Hostname": "n1", "gpu": "0"}
    series = [series_of(dcgm.GPU_UTIL, {**gpu, "gpu": str(k)}, [(0.0, 10.0 + k), (15.0, 20.0 + k)])
              for k in range(3)]
    series[1]["metric"]["note"] = 'odd "]]}" value'
    series[2]["values"][1][1] = "NaN"
    series.insert(2, {"metric": {"__name__": dcgm.GPU_UTIL, **gpu, "gpu": "5"}, "values": []})
    compact = _dump(tmp_path / "compact.json", series)
    pretty = tmp_path / "pretty.json"
    pretty.write_bytes(orjson.dumps(orjson.loads(compact.read_bytes()), option=orjson.OPT_INDENT_2))
    for path in (compact, pretty):
        got = list(promjson.series(str(path)))
        assert [s.labels["gpu"] for s in got] == ["0", "1", "5", "2"]
        assert got[1].labels["note"] == 'odd "]]}" value' and got[2].t.size == 0
        assert np.array_equal(got[0].v, [10.0, 20.0]) and got[3].v[0] == 12.0 and np.isnan(got[3].v[1])
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY)
    assert main(["import", "prometheus", str(pretty), "--cluster", str(cluster),
                 "-o", str(tmp_path / "o.jsonl")]) == 0
    state = Reader(str(tmp_path / "o.jsonl")).fold()
    assert state.util[:3].tolist() == pytest.approx([0.2, 0.21, 0.0]) and state.missing("util")[2]


def test_file_order_does_not_matter_nic_dumps_before_dcgm_dumps(tmp_path: Path, series_of: Any) -> None:
    """Every dump is read before any host is placed: InfiniBand dumps listed before the DCGM ones give the
    same recording, byte for byte, as the other order (they used to be all skipped)."""
    ticks = [float(t) for t in range(0, 60, 15)]
    gpu_series, nic_series = [], []
    for node in (2, 1):
        gpu = {"Hostname": f"n{node}", "gpu": "0", "instance": f"10.0.0.{node}:9400"}
        gpu_series.append(series_of(dcgm.GPU_UTIL, gpu, [(t, 40.0 * node) for t in ticks]))
        nic_series.append(series_of(dcgm.IB_TX, {"instance": f"10.0.0.{node}:9100", "device": "mlx5_0",
                                                 "port": "1"}, [(t, 12.5e9 * node * t) for t in ticks]))
    gpus = _dump(tmp_path / "dcgm.json", gpu_series)
    nics = _dump(tmp_path / "ib.json", nic_series)
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("gpus = 64", "gpus = 16").replace("gpus_per_rack = 16",
                                                                           "gpus_per_rack = 8")
                       .replace("racks_per_pod = 2", "racks_per_pod = 1"))             # a node a pod
    outs = []
    for order in ((gpus, nics), (nics, gpus)):
        out = tmp_path / f"real-{order[0].stem}.jsonl"
        args = ["import", "prometheus", *map(str, order), "--cluster", str(cluster), "-o", str(out)]
        assert main(args) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    samples = [e for e in events(tmp_path / "real-ib.jsonl") if e["type"] == "sample"]
    assert samples[1]["links"]["leaf"] == pytest.approx([0.25, 0.5])   # pod 0 is n1, pod 1 is n2


def test_a_gpu_already_at_a_fatal_xid_at_the_first_reading_shows_failed(
        tmp_path: Path, series_of: Any) -> None:
    """XID 79 from the first reading, the GPU idle: failed from the start, with no fault event (when it fell
    off the bus is not known); the same history on a GPU that works (it was reset) is compute."""
    ticks = [0.0, 15.0, 30.0]
    series = []
    for slot, util in ((0, 0.0), (1, 90.0)):
        gpu = {"Hostname": "n1", "gpu": str(slot)}
        series.append(series_of(dcgm.GPU_UTIL, gpu, [(t, util) for t in ticks]))
        series.append(series_of(dcgm.XID, gpu, [(t, 79.0) for t in ticks]))
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("gpus = 64", "gpus = 8"))
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(_dump(tmp_path / "d.json", series)), "--cluster", str(cluster),
                 "-o", str(out)]) == 0
    lines = events(out)
    assert not [e for e in lines if e["type"] == "fault"]
    for sample in (e for e in lines if e["type"] == "sample"):
        phase = np.repeat(sample["phase"]["v"], sample["phase"]["n"])
        assert phase[0] == 10 and phase[1] != 10                        # failed (code 10); compute


def test_site_power_and_links_are_missing_not_held_while_nothing_reports(
        tmp_path: Path, series_of: Any) -> None:
    """Power and NVLink report at 0 s and 15 s, then only utilization: at 30 s the state has no site power
    (NaN, the power panel says "no data") and no NVLink tier, not the values of 15 s."""
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.power import power_text

    gpu = {"Hostname": "n1", "gpu": "0"}
    series = [series_of(dcgm.GPU_UTIL, gpu, [(t, 90.0) for t in (0.0, 15.0, 30.0)]),
              series_of(dcgm.POWER, gpu, [(t, 500.0) for t in (0.0, 15.0)]),
              series_of(dcgm.NVLINK_TX, gpu, [(t, 225e9) for t in (0.0, 15.0)])]
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER_ONLY.replace("gpus = 64", "gpus = 8")
                       .replace("racks_per_pod = 2", "racks_per_pod = 2\nsite_power_budget_mw = 1.0"))
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(_dump(tmp_path / "d.json", series)), "--cluster", str(cluster),
                 "-o", str(out)]) == 0
    reader = Reader(str(out))
    state = reader.fold(until=15.0)
    assert state.site_mw > 0 and state.links["node"][0] == pytest.approx(0.5)
    state = Reader(str(out)).fold()
    assert np.isnan(state.site_mw) and "node" not in state.links
    display = DisplayState(Reader(str(out)).header)
    display.fold(Reader(str(out)).events())
    assert "no data" in power_text(display, 40).plain
