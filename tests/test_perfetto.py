"""`clustertop export --format perfetto`: Chrome Trace Event JSON with the structure the Perfetto UI reads."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.sim.run import Run
from clustertop.engine.stream.recorder import Recorder


@pytest.fixture
def trace(tmp_path: Path, scenario_file: Any, texts: Any, planner: Any, checkpoint: Any) -> dict[str, Any]:
    run = Run(scenario.load(scenario_file(texts.mixed)), planner=planner, duration_s=12.0, sample_s=0.25)

    def later(run: Run) -> Any:
        yield run.env.timeout(5.0)
        run.emit("fault", gpu=70, cause="GPU HBM3 memory")      # a cluster-wide instant
        run.interrupt(run.tracks[0], checkpoint(1.0))

    run.add_process(later)
    recording = tmp_path / "r.jsonl.gz"
    sink = Recorder(open(recording, "wb"), compress=True)  # noqa: SIM115 (closed by sink.close)
    run.run(sink)
    sink.close()
    out = tmp_path / "trace.json"
    assert main(["export", str(recording), "--format", "perfetto", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_trace_structure(trace: dict[str, Any]) -> None:
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms" and isinstance(events, list)
    phases = Counter(e["ph"] for e in events)
    assert {"M", "C", "X", "B", "E", "i"} <= set(phases)
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["name"], str) and e["name"]
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] > 0 and isinstance(e["tid"], int)
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")


def test_names_are_metadata(trace: dict[str, Any]) -> None:
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    used = {e["pid"] for e in events if e["ph"] != "M"}
    assert used <= set(processes)
    assert {(e["pid"], e["tid"]) for e in events if "tid" in e and e["ph"] != "M"} <= set(threads)
    assert any("Cluster" in name for name in processes.values())
    assert any(name.startswith("job train") for name in processes.values())
    assert any(name.startswith("job too-big") for name in processes.values())


def test_counters_per_stage_pod_tier_and_power(trace: dict[str, Any]) -> None:
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert {f"train stage {s:02d}" for s in range(4)} <= names
    assert {"pod 0", "pod 1", "pod 2"} <= names                   # 96 GPUs in pods of 32
    assert {"site power (MW)", "link node (%)", "link core (%)"} <= names
    node = next(e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "link node (%)")
    assert set(node["args"]) == {"pod 0", "pod 1", "pod 2"}
    stage0 = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "train stage 00"]
    assert stage0[0]["ts"] == 0 and stage0[0]["args"]["util %"] == 100.0      # stage 0 starts the pipeline
    last = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "train stage 03"]
    assert last[0]["args"]["util %"] == 0.0


def test_steps_slices_and_events(trace: dict[str, Any]) -> None:
    events = trace["traceEvents"]
    steps = [e for e in events if e["ph"] == "X"]
    assert steps and all(e["name"].startswith("step ") and "mfu" in e["args"] for e in steps)
    for a, b in itertools.pairwise(steps):
        if b["name"] != "step 7":                  # the step after the checkpoint restarts later
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=1)
    slices = [(e["ph"], e["name"]) for e in events if e["ph"] in "BE"]
    assert ("B", "running") in slices and ("B", "checkpoint") in slices and ("E", "checkpoint") in slices
    assert Counter(p for p, _ in slices)["B"] == Counter(p for p, _ in slices)["E"]     # every slice closed
    instants = {e["name"] for e in events if e["ph"] == "i"}
    assert "fault" in instants and "stop: out of memory" in instants


def test_export_refuses_stdout_and_missing_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "t.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    assert main(["export", str(tmp_path / "none.jsonl"), "-o", "-"]) == 2
    assert list(tmp_path.iterdir()) == []
