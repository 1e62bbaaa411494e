"""`clustertop watch`: fake dcgm-exporters (one per loopback address) and a fake Prometheus serving a
simulated run, watched headless and in the dashboard (Textual's run_test); what fails is one line, or an event
while watching. Exporter pages are read the same by the fast path and prometheus-client's parser."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import dcgm, exposition
from prometheus_client.parser import text_string_to_metric_families


def watch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustertop", "watch", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def samples(path: Path) -> list[dict]:
    return [e for e in Reader(str(path)).events() if e["type"] == "sample"]


def decode(rle: dict) -> np.ndarray:
    return np.repeat(rle["v"], rle["n"])


def test_exporters_watched_headless_give_the_run_and_a_target_down_event(
        simulated_run: Any, exporters: Any, tmp_path: Path) -> None:
    scenario, data = simulated_run.scenario, simulated_run.frames
    exporters.replay.k = 5
    exporters.broken[2] = (500, b"oops")
    urls = exporters.urls[:4], exporters.urls[4:]          # two --exporter flags, comma-separated lists
    out, record = tmp_path / "w.jsonl", tmp_path / "rec.jsonl.gz"
    done = watch("--exporter", ",".join(urls[0]), "--exporter", ",".join(urls[1]), "--cluster", scenario,
                 "--interval", "0.5s", "--timeout", "0.5s", "--duration", "1s", "-o", str(out),
                 "--record", str(record))
    assert done.returncode == 0, done.stderr
    got = samples(out)
    assert [s["t"] for s in got] == [0.0, 0.5, 1.0]
    util = decode(got[0]["util"])
    missing = decode(got[0]["missing"]["util"]).astype(bool)
    assert missing[16:24].all() and missing.sum() == 8               # node 2 (127.0.0.4) answered 500
    assert np.array_equal(util[~missing], data[5][1][~missing])
    assert np.array_equal(decode(got[0]["power_w"])[~missing], np.rint(data[5][2][~missing]))
    down = [e for e in Reader(str(out)).events() if e["type"] == "target_down"]
    assert (len(down) == 1 and down[0]["target"] == exporters.urls[2].split("/")[2]   # no host label seen
            and down[0]["url"] == exporters.urls[2] and down[0]["node"] == 2
            and down[0]["error"] == "HTTP 500 Internal Server Error")
    assert Reader(str(record)).header["telemetry"]["source"] == "exporter"
    assert [s["t"] for s in samples(record)] == [0.0, 0.5, 1.0]      # --record got the same stream
    last = done.stderr.splitlines()[-1]                               # the README's summary line
    assert last.startswith(f"clustertop: wrote {out} (") and f" and {record} (" in last, last
    assert last.endswith("): 3 samples over 1 s (one every 0.5 s), 8 hosts, 56 of 64 GPUs reporting, "
                         "0 faults"), last


def test_prometheus_watched_headless_without_a_cluster_file(
        simulated_run: Any, prometheus: Any, telemetry: Any, tmp_path: Path) -> None:
    data = simulated_run.frames
    prometheus.replay.k = 7
    out = tmp_path / "p.jsonl"
    done = watch("--prometheus", prometheus.url, "--interval", "0.5s", "--duration", "0.5s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    header = Reader(str(out)).header
    assert header["topology"]["gpus"] == 64 and header["telemetry"]["hosts"] == telemetry.hosts(8)
    assert "drawn as h100-sxm-80gb" in done.stderr               # no modelName: said, and H100 assumed
    got = samples(out)
    assert len(got) == 2 and "missing" not in got[0]
    assert np.array_equal(decode(got[0]["util"]), data[7][1])


@pytest.mark.parametrize(("make", "message"), [
    (lambda url: ["--exporter", "http://127.0.0.1:9/metrics"],
     "http://127.0.0.1:9/metrics: connection refused"),
    (lambda url: ["--exporter", f"{url}/nothing"], "HTTP 404 Not Found"),
    (lambda url: ["--exporter", f"{url}/html"], "answered HTML; expected a Prometheus metrics page"),
    (lambda url: ["--exporter", f"{url}/other"], "answered no DCGM GPU metric"),
    (lambda url: ["--exporter", f"{url}/slow", "--timeout", "0.3s"], "no complete answer within 0.3 s"),
    (lambda url: ["--prometheus", f"{url}/html"], "answer is not JSON"),
    (lambda url: ["--prometheus", f"{url}/matrix"], "resultType is 'matrix'; expected \"vector\""),
    (lambda url: ["--exporter", "file:///etc/passwd"], "is not an http:// or https:// URL"),
    (lambda url: ["--exporter", f"{url}/metrics", "--interval", "0.01s"], "expected 0.05 s to 86,400 s"),
])
def test_what_does_not_answer_right_is_one_line(tmp_path: Path, http_server: Any, make, message: str) -> None:
    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        if path == "/slow":
            time.sleep(1.0)
        if path.startswith("/html"):
            return 200, "text/html", b"<html><body>sign in</body></html>"
        if path == "/other":
            return 200, "text/plain", b"# TYPE up gauge\nup 1\nnode_load1 0.5\n"
        if path.startswith("/matrix"):
            return 200, "application/json", b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
        return 404, "text/plain", b"404 page not found"

    out = tmp_path / "w.jsonl"
    server = http_server(route)
    done = watch("--interval", "1s", *make(server.url), "-o", str(out), timeout=30)
    assert done.returncode == 2
    assert (done.stderr.count("\n") == 1 and message in done.stderr
            and "Traceback" not in done.stderr), done.stderr
    assert not out.exists()


def test_the_dashboard_watches_exporters(simulated_run: Any, exporters: Any) -> None:
    """The app over a WatchSource (the child `clustertop watch ... -o -`): the heatmap shows the node that
    does not answer as no data, the legend counts it, the inspector names the host, the event log the dead
    exporter."""
    from clustertop.tui.app import ClusterTopApp
    from clustertop.tui.sources.watch import WatchSource
    from clustertop.tui.widgets.event_log import EventLog
    from clustertop.tui.widgets.heatmap import Heatmap
    from clustertop.tui.widgets.inspector import Inspector
    from clustertop.tui.widgets.legend import Legend

    exporters.replay.k = 4
    exporters.broken[0] = (503, b"down for maintenance")
    source = WatchSource("8 exporters", ["--exporter", ",".join(exporters.urls), "--cluster",
                                         simulated_run.scenario, "--interval", "1s", "--timeout", "1s"])
    # a second for each round: the seven live exporters on 127.0.0.1 answer in milliseconds even on a loaded
    # machine (0.3 s was not always enough there, and a late one showed as missing too)

    async def run() -> None:
        app = ClusterTopApp([source])
        async with app.run_test(size=(160, 45)) as pilot:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and source.index.keyframe_count() < 2:
                await pilot.pause(0.1)
            await pilot.pause(0.3)
            app.frame()
            state = app.states[0]
            assert state.missing("util") is not None and state.missing("util")[:8].all()
            heatmap = app.screen.query_one(Heatmap)
            colours = heatmap.pixel_colours(heatmap.layout_info)
            from clustertop.tui import palette
            assert (colours[:8] == palette.NODATA).all() and (colours[8:] != palette.NODATA).all()
            assert "no data 8 GPUs" in str(app.screen.query_one(Legend)._shown)
            inspected = str(app.screen.query_one(Inspector)._shown)
            assert "host 127.0.0.2" in inspected
            assert "phase no data" in inspected and "idle" not in inspected    # not "idle 100%"
            assert "503 Service Unavailable" in str(app.screen.query_one(EventLog)._shown)
            assert "watch 8 exporters" in app.sub_title
            if app.playback.follow:                    # at the live edge the clock is the wall's
                speed = app.playback.speed
                await pilot.press("plus")
                assert app.playback.speed == speed

    try:
        asyncio.run(run())
    finally:
        source.close()


def test_fast_exporter_parse_is_the_librarys(telemetry: Any) -> None:
    """Plain lines (fast path), escaped label values, spaces and a timestamp (prometheus-client's path), other
    metrics and comments: the same samples as prometheus-client's parser gives."""
    values = {telemetry.UTIL: np.array([87.0] * 8), telemetry.POWER: np.array([512.25] * 8)}
    page = telemetry.exporter_page(values, "dgx-01", 0, 8, extra=(
        '# HELP node_load1 load\nnode_load1 3.5\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="dgx \\"01\\"",note="a\\\\b"} 40960 1717000000000\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1", Hostname="dgx-01"} 79\n'
        'DCGM_FI_DEV_POWER_USAGE_AVG{gpu="1"} 3\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="2",Hostname="dgx-01"} NaN\n'))
    ours = exposition.parse(page, dcgm.METRICS)
    theirs = [(s.name, dict(s.labels), float(s.value)) for f in text_string_to_metric_families(page.decode())
              for s in f.samples if s.name in dcgm.METRICS]
    key = lambda s: (s[0], sorted(s[1].items()), repr(s[2]))   # NaN compares by its text
    assert sorted(map(key, ours)) == sorted(map(key, theirs))
    assert len(ours) == 19
    assert ("DCGM_FI_DEV_FB_USED", {"gpu": "0", "Hostname": 'dgx "01"', "note": "a\\b"}, 40960.0) in ours


def test_a_fresh_prometheus_with_no_data_yet_is_waited_for(http_server: Any, tmp_path: Path) -> None:
    """A server that answers, but with no DCGM series yet (not scraped yet): one note, asked again every
    interval, and watching starts when data comes; not exit code 2."""
    import orjson

    rounds = {"util": 0}

    def route(path: str, query: dict) -> tuple[int, str, bytes]:
        q = query.get("query", [""])[0]
        result = []
        values = dcgm.GPU_UTIL in q and not q.startswith("count") and "timestamp(" not in q
        if values:
            rounds["util"] += 1
        if values and rounds["util"] >= 2:
            result = [{"metric": {"Hostname": "dgx-1", "instance": "10.0.0.1:9400", "gpu": str(g)},
                       "value": [1.0, "40"]} for g in range(8)]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", orjson.dumps(body)

    server = http_server(route)
    out = tmp_path / "p.jsonl"
    done = watch("--prometheus", server.url, "--interval", "0.2s", "--duration", "0.4s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no DCGM series yet") == 1, done.stderr
    assert Reader(str(out)).header["telemetry"]["hosts"] == ["dgx-1"]
    assert len(samples(out)) == 2 and decode(samples(out)[0]["util"])[0] == 40


def test_the_dashboards_watcher_runs_at_a_lower_priority_than_the_dashboard() -> None:
    """The child `watch ... -o -` yields the cores to the dashboard (nice + 10, at most 19): its rounds of
    parsing come due every interval, a frame every 33 ms, and they meet when a sample arrives."""
    import os

    from clustertop.tui.sources.watch import NICE, WatchSource

    recording = Path(__file__).parent.parent / "recordings" / "serving-64.jsonl.gz"
    code = "import sys, time; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); sys.stdout.flush(); " \
           "time.sleep(30)"
    command = [sys.executable, "-c", code, str(recording)]
    source = WatchSource("stand-in", [], command=command)
    try:
        assert NICE == 10
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, source.proc.pid) == min(19, mine + NICE)
    finally:
        source.close()
