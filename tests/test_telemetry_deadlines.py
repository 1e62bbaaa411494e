"""Deadlines and cancellation (issue 27): a request ends within its deadline however slowly the server
answers (headers or body trickled a byte at a time, or nothing at all), a round of Prometheus queries costs
one deadline, not one per query, and SIGTERM, Ctrl-C or the end of the dashboard's pipe end `watch` within a
second, with no traceback. Every server is on 127.0.0.1 (tests/fakes/telemetry.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import http, watch


@pytest.mark.parametrize("kind", [{"headers": True}, {"headers": False}, {"hang": True}],
                         ids=["body trickled", "headers trickled", "hung"])
def test_a_request_ends_within_its_deadline_whatever_the_server_does(trickle: Any, kind: dict) -> None:
    server = trickle(gap=0.05, **kind)
    began = time.monotonic()
    with pytest.raises(http.FetchError, match=r"no complete answer within 0\.4 s"):
        http.get(f"{server.url}/metrics", 0.4)
    assert time.monotonic() - began < 0.8


def _timed_round(poller: Any) -> tuple[Any, float]:
    """One round of a poller, and the seconds it took; the poller closed after."""
    try:
        began = time.monotonic()
        poll = poller.poll()
        return poll, time.monotonic() - began
    finally:
        poller.close()


def test_a_round_of_exporters_ends_within_its_deadline(trickle: Any, exporters: Any) -> None:
    slow = trickle(gap=0.05)
    poll, took = _timed_round(watch.Exporters([exporters.urls[0], f"{slow.url}/metrics"], 0.4))
    assert poll is not None and took < 0.4 + watch.GRACE + 0.3
    assert poll.answered == 1 and poll.failures == {f"{slow.url}/metrics": "no complete answer within 0.4 s"}


def test_a_round_of_prometheus_queries_costs_one_deadline_not_one_per_query(trickle: Any) -> None:
    hung = trickle(hang=True)
    poll, took = _timed_round(watch.PrometheusQueries(hung.url, 0.3))
    assert poll is not None and poll.answered == 0
    assert poll.failures == {hung.url: "no complete answer within 0.3 s"}
    assert took < 0.3 + watch.GRACE + 0.3          # was 9 x 0.3 s: the queries ran one after another


def _start(args: list[str], out: Path, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "clustertop", "watch", *args, "-o", str(out)],
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.stat().st_size > 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    return proc


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_headless_watch_within_a_second_during_a_hung_request(
        trickle: Any, exporters: Any, tmp_path: Path, sig: int, code: int) -> None:
    hung, slow = trickle(hang=True), trickle(gap=0.05)
    out = tmp_path / "w.jsonl"
    proc = _start(["--exporter", f"{exporters.urls[0]},{hung.url}/metrics,{slow.url}/metrics",
                   "--interval", "3s", "--timeout", "3s"], out)
    time.sleep(0.5)                         # in the second round: requests hang
    began = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - began < 1.0
    assert proc.returncode == code and "Traceback" not in err, err
    assert Reader(str(out)).header["topology"]["gpus"] > 0     # a readable recording


def test_the_dashboards_child_ends_when_its_pipe_closes(trickle: Any, exporters: Any, tmp_path: Path) -> None:
    hung = trickle(hang=True)
    proc = subprocess.Popen([sys.executable, "-m", "clustertop", "watch", "--exporter",
                             f"{exporters.urls[0]},{hung.url}/metrics", "--interval", "3s", "--timeout",
                             "3s", "-o", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().startswith(b"{")          # the header: it runs
    time.sleep(0.3)
    began = time.monotonic()
    proc.stdin.close()                                       # the dashboard is gone
    proc.wait(timeout=10)
    assert time.monotonic() - began < 1.0
    assert b"Traceback" not in proc.stderr.read()


def test_watch_with_a_duration_ends_on_time_against_a_hung_endpoint(
        trickle: Any, exporters: Any, tmp_path: Path) -> None:
    hung = trickle(hang=True)
    out = tmp_path / "w.jsonl"
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "clustertop", "watch", "--exporter",
                           f"{exporters.urls[0]},{hung.url}/metrics", "--interval", "0.5s",
                           "--duration", "1s", "-o", str(out)], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 1.0 + 0.5 + 3.0       # the duration, a round's deadline, start-up
    events = list(Reader(str(out)).events())
    assert [e["t"] for e in events if e["type"] == "sample"] == [0.0, 0.5, 1.0]
    down = [e for e in events if e["type"] == "target_down"]
    assert down[0]["error"] == "no complete answer within 0.5 s"


def test_rounds_missed_are_written_as_samples_with_every_gpu_missing(exporters: Any, tmp_path: Path) -> None:
    out = tmp_path / "w.jsonl"
    poller = watch.Exporters(exporters.urls[:1], 0.2)
    watcher = watch.Watcher(poller, source="exporter", cluster_file=None, outputs=[str(out)], interval=0.2)
    try:
        assert watcher.start()
        watcher.started -= 1.0                   # a second lost (the machine was suspended): 4 rounds missed
        assert watcher.round()
    finally:
        watcher.close()
    got = [e for e in Reader(str(out)).events() if e["type"] == "sample"]
    assert [s["t"] for s in got] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    for s in got[1:5]:
        assert s["missing"]["util"] == {"v": [1], "n": [8]}
    assert "missing" not in got[5]


def test_a_timeout_longer_than_the_interval_and_one_file_twice_are_refused(
        exporters: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "w.jsonl")
    for extra, message in ((["--interval", "1s", "--timeout", "2s"],
                            "--timeout: 2s is longer than the interval"),
                           (["--record", out], "is also -o's file")):
        done = subprocess.run([sys.executable, "-m", "clustertop", "watch", "--exporter", exporters.urls[0],
                               *extra, "-o", out], capture_output=True, text=True, timeout=30,
                              check=False)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
