"""The writer side of the stream in one place: one run-length encoding, one sample line, one header for the
simulation and real telemetry; and the simulation's parts see a narrow interface, never the Run."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from clustertop.engine.config import scenario
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import schema
from clustertop.engine.stream.lines import SAMPLE_KEYS, rle_json, sample_line
from clustertop.engine.stream.recorder import ListSink
from clustertop.engine.telemetry.frames import TelemetryStream

SIM = Path(__file__).parent.parent / "engine" / "sim"


def test_runs_over_blocks_are_the_runs_of_the_broadcast_array() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        size = int(rng.integers(1, 500))
        starts = np.unique(np.concatenate([[0], rng.integers(0, size, int(rng.integers(0, 40)))]))
        values = rng.integers(0, 3, starts.size)
        per_gpu = np.repeat(values, np.diff(starts, append=size))
        assert schema.rle_encode(values, starts, size) == schema.rle_encode(per_gpu)
        assert orjson.loads(rle_json(values, starts, size)) == schema.rle_encode(per_gpu)
    assert schema.rle_encode(np.zeros(0)) == {"v": [], "n": []}


def test_a_sample_line_is_its_parts_in_the_schemas_order_as_values_or_bytes() -> None:
    util = schema.rle_encode(np.array([50, 50, 0]))
    parts: dict[str, Any] = {"util": util, "power_w": schema.rle_encode(np.array([700, 700, 90])),
                             "phase": schema.rle_encode(np.array([1, 1, 0])), "links": {"node": [0.5]},
                             "site_mw": 0.1234, "jobs": {"train": {"running": True}}}
    line = sample_line(12.3456789, **parts)
    assert line.endswith(b"}\n")
    event = orjson.loads(line)
    assert list(event) == ["t", "type", "util", "power_w", "phase", "links", "site_mw", "jobs"]
    assert event["t"] == 12.345679 and event["type"] == "sample"
    as_dict = {"t": 12.345679, "type": "sample", **parts}
    assert line == orjson.dumps(as_dict, option=orjson.OPT_APPEND_NEWLINE)
    serialized = {k: orjson.dumps(v) for k, v in parts.items()}          # the simulation's cached parts
    assert sample_line(12.3456789, **serialized) == line
    over = orjson.loads(sample_line(0.0, **parts, over_budget=True, phase_mix={"phases": []}))
    assert [k for k in SAMPLE_KEYS if k in over] == [k for k in over if k not in ("t", "type")]
    assert over["over_budget"] is True


def test_a_simulated_and_a_telemetry_header_share_the_streams_keys(scenario_file: Any, texts: Any,
                                                                    planner: Any) -> None:
    s = scenario.load(scenario_file(texts.small + texts.quiet))
    simulated = Run(s, planner=planner).header()
    stream = TelemetryStream(ListSink(), name=s.name, cluster=s.cluster, jobs=s.jobs, source="prometheus",
                             step_s=1.0, start_unix=0.0, duration_s=10.0)
    real = stream.header()
    common = ["type", "schema", "schema_version", "generator", "scenario", "topology", "jobs", "seed",
              "sample_interval_s", "duration_s", "sampling", "tiers", "link_scope", "phases", "phase_util",
              "power"]
    assert list(simulated)[:len(common)] == list(real)[:len(common)] == common
    assert list(simulated)[len(common):] == ["scale_up", "optics"]
    assert list(real)[len(common):] == ["telemetry"]
    assert (simulated["sampling"], real["sampling"]) == ("mean", "instant")
    for key in ("schema", "schema_version", "generator", "topology", "tiers", "link_scope", "phases"):
        assert simulated[key] == real[key], key
    where = ["name", "kind", "model", "first_gpu", "gpus", "tp", "cp", "pp", "dp", "ep", "virtual_stages",
             "rank_order"]
    sim_job, real_job = simulated["jobs"][0], real["jobs"][0]
    assert list(sim_job)[:len(where)] == list(real_job)[:len(where)] == where
    assert all(sim_job[k] == real_job[k] for k in where)


def test_the_simulations_parts_never_see_the_run() -> None:
    """Only engine/sim/run.py wires the parts: no other module of the simulation imports it, even for
    types."""
    for path in sorted(SIM.glob("*.py")):
        if path.name == "run.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.level == 1 and node.module == "run"), path.name
                assert not (node.module or "").endswith("sim.run"), path.name
