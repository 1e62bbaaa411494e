"""Recording and replaying the flagship (llama3-405b-16k): the event stream's speed and size targets.

- record_flagship_6h_s: 6 simulated hours at the default interval (5 s), to .jsonl.gz; target < 20 s.
- record_flagship_54d_s: 54 simulated days (default interval 20 min), to .jsonl.gz; target <= 2 s (issue 26).
  record_flagship_54d_cpu_s: its CPU time, the gzip thread's included (the wall time on a shared machine says
  little: compare this too).
- recording_flagship_54d_mb: its size; target < 100.
- replay_vs_parse: folding the 54-day recording into a ClusterState, divided by only reading and parsing its
  lines with orjson (same decompression and line splitting); target <= 1.2. Per-GPU arrays are decoded lazily,
  when read (as the dashboard does at its frame rate); replay_decode_vs_parse also decodes every sample. The
  fold checks every line but parses only those it keeps (engine/stream/skipping.py): nine lines in ten are
  steps that the next step of their job replaces.
- seek_index_54d_s: reading the 54-day file into the dashboard's seek index (tui/index.py, what
  `clustertop replay` does before the first frame), and seek_54d_ms: the mean of its state_at at 20 random
  times.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from clustertop.engine.config import scenario
from clustertop.engine.sim.run import Run
from clustertop.engine.stream.reader import Reader
from clustertop.engine.stream.recorder import Recorder
from clustertop.engine.stream.state import ClusterState
from clustertop.tui.index import EventIndex


def _record(path: Path, duration_s: float) -> tuple[float, float]:
    """Wall and CPU seconds (the process's: the gzip thread's included)."""
    start, cpu = time.perf_counter(), time.process_time()
    run = Run(scenario.load("llama3-405b-16k"), duration_s=duration_s)
    sink = Recorder.open(str(path))
    run.run(sink)
    sink.close()
    return time.perf_counter() - start, time.process_time() - cpu


def _parse_only(path: Path) -> float:
    start = time.perf_counter()
    reader = Reader(str(path))
    loads = orjson.loads
    for batch in reader._all_batches():
        for line in batch:
            loads(line)
    reader.close()
    return time.perf_counter() - start


def _fold(path: Path) -> float:
    start = time.perf_counter()
    Reader(str(path)).fold()
    return time.perf_counter() - start


def _fold_decoding(path: Path) -> float:
    start = time.perf_counter()
    reader = Reader(str(path))
    state = ClusterState(reader.header)

    def decoding(events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for event in events:
            yield event
            if event["type"] == "sample":               # folded by now: decode its arrays
                _ = (state.util, state.power_w, state.phase)

    state.fold(decoding(reader.events()))
    return time.perf_counter() - start


def _interleaved(path: Path, repeats: int = 3) -> tuple[float, float, float]:
    """Best of `repeats` for parse, fold and fold-with-decoding, interleaved so that load on a shared
    machine hits all three alike."""
    parse, fold, decode = [], [], []
    for _ in range(repeats):
        parse.append(_parse_only(path))
        fold.append(_fold(path))
        decode.append(_fold_decoding(path))
    return min(parse), min(fold), min(decode)


def run() -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        short, long = Path(tmp) / "6h.jsonl.gz", Path(tmp) / "54d.jsonl.gz"
        out["record_flagship_6h_s"] = round(_record(short, 6 * 3600.0)[0], 3)
        out["recording_flagship_6h_mb"] = round(short.stat().st_size / 1e6, 3)
        wall, cpu = _record(long, 54 * 86400.0)
        out["record_flagship_54d_s"] = round(wall, 3)
        out["record_flagship_54d_cpu_s"] = round(cpu, 3)
        out["recording_flagship_54d_mb"] = round(long.stat().st_size / 1e6, 3)
        parse, fold, decode = _interleaved(long)
        out["parse_flagship_54d_s"] = round(parse, 3)
        out["replay_flagship_54d_s"] = round(fold, 3)
        out["replay_vs_parse"] = round(fold / parse, 3)
        out["replay_decode_vs_parse"] = round(decode / parse, 3)
        parse_6h, fold_6h, _ = _interleaved(short)
        out["replay_vs_parse_6h"] = round(fold_6h / parse_6h, 3)
        start = time.perf_counter()
        index = EventIndex.of_file(str(long))
        out["seek_index_54d_s"] = round(time.perf_counter() - start, 3)
        rng = random.Random(1)
        times = [rng.uniform(0, 54 * 86400.0) for _ in range(20)]
        start = time.perf_counter()
        for t in times:
            index.state_at(t)
        out["seek_54d_ms"] = round((time.perf_counter() - start) / len(times) * 1000, 2)
    return out
