"""Faults, checkpoints, restarts and maintenance in the engine run
(engine/sim/faults.py JobDriver, engine/sim/run.py).

On the 64-GPU `small` cluster of tests/fakes/plan.py (steps of ~0.75 s): scheduled faults ([[faults.inject]]),
exact restart times, the work lost, the hardware shown failed, spares, and the counts in the summary.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.phases import CODE
from clustertop.engine.model import checkpoint
from clustertop.engine.sim import faults, lifecycle
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import schema
from clustertop.engine.stream.state import ClusterState

TOKENS = 64 * 4096          # tokens per step of the small job

STILL = """
[variability]
straggler_sigma = 0.0
slow_gpu_fraction = 0.0
diurnal_amplitude = 0.0
"""


@pytest.fixture
def scenario_text(texts: Any) -> Any:
    """`scenario_text(faults_table="", checkpoint="", extra="")`: the small scenario with no random faults or
    stragglers, plus the given tables."""

    def text(faults_table: str = "", checkpoint: str = "", extra: str = "") -> str:
        return (texts.small + STILL + "\n[faults]\nenabled = false\ndetection = \"5s\"\nrestart = \"20s\"\n"
                + faults_table + "\n[checkpoint]\n" + checkpoint + "\n" + extra)

    return text


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def samples(events: list[dict[str, Any]]) -> dict[float, dict[str, Any]]:
    return {e["t"]: e for e in events if e["type"] == "sample"}


def inject(*entries: tuple[str, int]) -> str:
    return "".join(f'\n[[faults.inject]]\nat = "{at}"\ngpu = {gpu}\n' for at, gpu in entries)


def period(r: Run) -> float:
    assert r.tracks[0].plan is not None
    return r.tracks[0].plan.step_time_s


# ----- a fault: detection, restart from the checkpoint, the work lost ---------------------------------------


def test_fault_restarts_from_the_last_checkpoint(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text(inject(("33s", 13)), 'interval = "10s"\nstorage_tb_s = 0.1')
    r, events = simulate(text, duration_s=80.0, sample_s=1.0)
    p = period(r)
    write = checkpoint.checkpoint_plan(r.scenario, r.scenario.jobs[0]).write_s
    assert write == pytest.approx(14 * 8.03e9 / 0.1e12, rel=0.01)  # 14 bytes per parameter at 0.1 TB/s
    starts, ends = of(events, "checkpoint_start"), of(events, "checkpoint_end")
    # The first checkpoint is written at the first step boundary after 10 s;
    # training stops while it is written.
    first = math.ceil(10.0 / p) * p
    assert starts[0]["t"] == pytest.approx(first, abs=1e-6) and starts[0]["step"] == round(first / p)
    assert ends[0]["t"] == pytest.approx(first + write, abs=1e-6) and ends[0]["ok"] is True
    committed = [e for e in ends if e["ok"] and e["t"] < 33.0][-1]
    (fault,) = of(events, "fault")
    assert fault["t"] == 33.0
    assert {k: fault[k] for k in ("job", "cause", "component", "gpu", "node", "scope", "injected")} == {
        "job": "train", "cause": "Faulty GPU", "component": "gpu", "gpu": 13, "node": 1, "scope": "node",
        "injected": True}
    done_before = [e for e in of(events, "step") if e["t"] <= 33.0][-1]["step"]
    (restart,) = of(events, "restart")
    assert restart["t"] == pytest.approx(33.0 + 5.0 + 20.0)                 # detection + restart
    assert restart["from_checkpoint_step"] == committed["step"]
    assert restart["lost_steps"] == done_before - committed["step"] > 0
    assert restart["lost_tokens"] == restart["lost_steps"] * TOKENS
    assert restart["downtime_s"] == 25.0 and restart["reason"] == "fault" and restart["spare_nodes"] == 1
    # No step ends while the job is down; then steps continue from the checkpoint's.
    assert not [e for e in of(events, "step") if 33.0 < e["t"] <= 58.0]
    after = [e for e in of(events, "step") if e["t"] > 58.0]
    assert after[0]["step"] == committed["step"] + 1
    assert after[0]["t"] == pytest.approx(58.0 + p, abs=1e-6)
    assert after[0]["tokens_total"] == (committed["step"] + 1) * TOKENS
    # While down: the failed node is off, the job's other GPUs wait idle; the site draws less.
    down = samples(events)[45.0]
    phase, watts, util = (schema.rle_decode(down[k]) for k in ("phase", "power_w", "util"))
    assert set(phase[8:16]) == {CODE["failed"]} and set(watts[8:16]) == {0}
    assert set(np.delete(phase, np.s_[8:16])) == {CODE["idle"]} and set(np.delete(watts, np.s_[8:16])) == {90}
    assert set(util) == {0} and down["jobs"]["train"]["running"] is False
    assert down["site_mw"] < samples(events)[30.0]["site_mw"]
    back = samples(events)[70.0]
    assert CODE["failed"] not in set(schema.rle_decode(back["phase"])) and back["jobs"]["train"]["running"]
    assert r.summary["interruptions_unexpected"] == 1 and r.summary["interruptions_planned"] == 0
    assert r.summary["checkpoints"] == sum(e["ok"] for e in ends)


def test_the_reducer_follows_the_restart(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text(inject(("33s", 13)), 'interval = "10s"')
    _, events = simulate(text, duration_s=60.0, sample_s=5.0)
    state = ClusterState(events[0])
    for e in events[1:]:
        state.apply(e)
        if e["type"] == "fault":
            assert state.jobs["train"].down and state.jobs["train"].interruptions == 1
        if e["type"] == "restart":
            job = state.jobs["train"]
            assert not job.down and job.running and job.step == e["from_checkpoint_step"]
            assert job.tokens == e["tokens_total"] == e["from_checkpoint_step"] * TOKENS
            assert job.tokens_lost == e["lost_tokens"] > 0
    job = state.jobs["train"]
    assert job.interruptions == 1 and job.checkpoints >= 3
    assert 0.3 < job.effective_training_time < 0.8      # 25 s down and the lost steps, out of 60 s
    assert [e["type"] for e in events if e["type"] in ("fault", "restart")] == ["fault", "restart"]


def test_a_fault_while_down_extends_the_downtime(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text(inject(("33s", 13), ("45s", 40)), 'interval = "10s"')
    r, events = simulate(text, duration_s=90.0, sample_s=1.0)
    first, second = of(events, "fault")
    assert "extends_downtime" not in first and second["extends_downtime"] is True and second["node"] == 5
    (restart,) = of(events, "restart")
    assert restart["t"] == pytest.approx(45.0 + 25.0)
    assert restart["interruptions"] == 2 and restart["spare_nodes"] == 2
    assert restart["downtime_s"] == pytest.approx(37.0)
    phase = schema.rle_decode(samples(events)[50.0]["phase"])
    assert set(phase[8:16]) == set(phase[40:48]) == {CODE["failed"]}
    assert r.summary["interruptions_unexpected"] == 2


def test_no_spare_left_waits_for_the_repair(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text('spare_nodes = 1\nrepair = "100s"\n' + inject(("33s", 13), ("40s", 40)),
                         'interval = "10s"')
    _, events = simulate(text, duration_s=200.0, sample_s=5.0)
    (restart,) = of(events, "restart")
    assert restart["t"] == pytest.approx(133.0)  # one spare; the second node is the first one repaired
    text = scenario_text('spare_nodes = 0\nrepair = "100s"\n' + inject(("33s", 13)), 'interval = "10s"')
    _, events = simulate(text, duration_s=200.0, sample_s=5.0)
    (restart,) = of(events, "restart")
    assert restart["t"] == pytest.approx(133.0)
    # A software fault needs no hardware: detection and restart only.
    text = scenario_text('spare_nodes = 0\n[[faults.inject]]\nat = "33s"\ngpu = 13\ncause = "Software bug"\n',
                         'interval = "10s"')
    _, events = simulate(text, duration_s=100.0, sample_s=5.0)
    (fault,) = of(events, "fault")
    assert fault["scope"] == "job" and of(events, "restart")[0]["t"] == pytest.approx(58.0)
    assert CODE["failed"] not in set(schema.rle_decode(samples(events)[40.0]["phase"]))


def test_a_fault_during_a_checkpoint_write_aborts_it(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text(inject(("12s", 13)), 'interval = "10s"\nstorage_tb_s = 0.0225')   # a 5 s write
    r, events = simulate(text, duration_s=60.0, sample_s=1.0)
    p = period(r)
    start, end = of(events, "checkpoint_start")[0], of(events, "checkpoint_end")[0]
    assert start["t"] == pytest.approx(math.ceil(10 / p) * p, abs=1e-6)
    assert end == {"t": 12.0, "type": "checkpoint_end", "job": "train", "step": start["step"], "ok": False,
                   "duration_s": pytest.approx(12.0 - start["t"], abs=1e-6)}
    restart = of(events, "restart")[0]
    assert restart["from_checkpoint_step"] == 0 and restart["lost_steps"] == start["step"]
    assert r.summary["checkpoints"] == sum(e["ok"] for e in of(events, "checkpoint_end"))


def test_asynchronous_checkpoints_write_behind_training(simulate: Any, scenario_text: Any) -> None:
    text = scenario_text(inject(("14s", 13)), 'interval = "10s"\nmode = "async"\nstorage_tb_s = 0.0225')
    r, events = simulate(text, duration_s=60.0, sample_s=1.0)
    p = period(r)
    plan = checkpoint.checkpoint_plan(r.scenario, r.scenario.jobs[0])
    # The snapshot to host memory: each GPU's weights (sharded over TP 2 x PP 4) and ZeRO-1 optimizer shard.
    local = 2 * 8.03e9 / 8 + 12 * 8.03e9 / 64
    assert (plan.stall_s == pytest.approx(local / 64e9, rel=0.01)
            and plan.write_s == pytest.approx(5.0, rel=0.01))
    start = of(events, "checkpoint_start")[0]
    assert start["mode"] == "async"
    steps = of(events, "step")
    resumed = next(e for e in steps if e["t"] > start["t"])
    assert resumed["t"] == pytest.approx(start["t"] + plan.stall_s + p, abs=1e-6)   # only the snapshot stalls
    end = of(events, "checkpoint_end")[0]
    assert end["ok"] is False and end["t"] == 14.0          # the fault came before the write was complete
    assert of(events, "restart")[0]["from_checkpoint_step"] == 0
    # Without the fault the write completes behind training, and a restart would resume from it.
    r2, events2 = simulate(scenario_text("", 'interval = "10s"\nmode = "async"\nstorage_tb_s = 0.0225'),
                           duration_s=30.0, sample_s=1.0)
    start2, end2 = of(events2, "checkpoint_start")[0], of(events2, "checkpoint_end")[0]
    assert end2["ok"] and end2["t"] == pytest.approx(start2["t"] + plan.stall_s + plan.write_s, abs=1e-6)
    assert [e for e in of(events2, "step") if start2["t"] < e["t"] < end2["t"]]       # training went on
    last = [e for e in of(events2, "checkpoint_end") if e["ok"]][-1]
    assert r2.tracks[0].driver is not None and r2.tracks[0].driver.saved.step == last["step"]


def test_maintenance_checkpoints_then_stops_for_its_window(scenario_text: Any, scenario_file: Any,
                                                           planner: Any) -> None:
    text = scenario_text('planned = "30s"\n', 'interval = "1h"\nstorage_tb_s = 0.1')
    r = Run(scenario.load(scenario_file(text)), planner=planner, duration_s=70.0, sample_s=1.0)

    def calendar(run: Run) -> Any:
        yield run.env.timeout(20.0)
        run.interrupt(run.tracks[0], lifecycle.PLANNED)

    r.add_process(calendar)
    events = [orjson.loads(line) for line in r.lines()]
    p = period(r)
    (m,) = of(events, "maintenance")
    assert m == {"t": 20.0, "type": "maintenance", "job": "train", "component": "job", "cause": "planned",
                 "duration_s": 30.0}
    start = of(events, "checkpoint_start")[0]
    assert start["t"] == pytest.approx(math.ceil(20.0 / p) * p, abs=1e-6)   # the step in progress finishes
    (restart,) = of(events, "restart")
    assert restart["t"] == pytest.approx(50.0) and restart["reason"] == "maintenance"
    assert restart["lost_steps"] == 0 and restart["from_checkpoint_step"] == start["step"]
    assert r.summary["interruptions_planned"] == 1 and r.summary["interruptions_unexpected"] == 0


def test_a_fault_on_gpus_without_a_job(simulate: Any, texts: Any) -> None:
    text = (texts.mixed + STILL + '\n[faults]\nenabled = false\nrepair = "10s"\n'
            + inject(("2s", 90), ("2s", 70)))
    r, events = simulate(text, duration_s=20.0, sample_s=1.0)
    assert [(e["gpu"], "job" in e) for e in of(events, "fault")] == [(70, False), (90, False)]
    assert not of(events, "restart") and r.summary["interruptions_unexpected"] == 0
    phase = schema.rle_decode(samples(events)[5.0]["phase"])
    assert set(phase[64:72]) == set(phase[88:96]) == {CODE["failed"]} and set(phase[72:88]) == {CODE["idle"]}
    assert CODE["failed"] not in set(schema.rle_decode(samples(events)[15.0]["phase"]))      # repaired


def test_injections_are_checked_when_the_scenario_loads(scenario_text: Any, scenario_file: Any) -> None:
    for entry, message in ((inject(("5s", 64)), "GPU 64 is not in the cluster"),
                           ('\n[[faults.inject]]\nat = "5s"\ngpu = 3\ncause = "Faulty GPUs"\n',
                            "did you mean"),
                           ('\n[[faults.inject]]\ngpu = 3\n', r"faults\.inject\[0\]\.at: missing"),
                           ('\n[[faults.inject]]\nat = "soon"\ngpu = 3\n', "expected a duration")):
        with pytest.raises(UserError, match=message) as info:
            scenario.load(scenario_file(scenario_text(entry)))
        assert "\n" not in str(info.value)


# ----- random faults and maintenance over a run -------------------------------------------------------------


def test_random_interruptions_are_the_scheduled_ones(simulate: Any, texts: Any) -> None:
    """Every drawn fault and maintenance reaches the job, including those that arrive while it is down."""
    text = texts.small + STILL + "\n[faults]\nrate_scale = 3000.0\nplanned_per_day = 20.0\n"
    r, events = simulate(text, duration_s=86400.0, sample_s=600.0)
    day = 86400.0
    drawn = faults.schedule(0, 64, 8, 0.0, day, r.seed, 3000.0, stream="train/")
    planned = faults.planned(0.0, day, 20.0, r.seed, "train")
    assert len(drawn) > 30 and len(planned) > 5
    got = of(events, "fault")
    assert [(e["t"], e["cause"], e["gpu"]) for e in got] == [(round(f.t, 6), f.cause, f.gpu) for f in drawn]
    assert len(of(events, "maintenance")) == len(planned)
    assert r.summary["interruptions_unexpected"] == len(drawn)
    assert r.summary["interruptions_planned"] == len(planned)
    restarts = of(events, "restart")
    assert sum(e["interruptions"] for e in restarts) <= len(drawn) + len(planned)
    assert len(restarts) < len(drawn) + len(planned)           # some arrived while the job was down
    steps = of(events, "step")
    assert all(b["step"] == a["step"] + 1 or b["step"] <= a["step"] for a, b in itertools.pairwise(steps))
    kept = r.tracks[0].driver
    assert kept is not None
    assert r.summary["effective_training_time"] == pytest.approx(kept.kept_productive_s() / day, abs=1e-4)


def test_same_seed_same_faults_and_bytes(scenario_file: Any, texts: Any, planner: Any) -> None:
    text = texts.small + "\n[faults]\nrate_scale = 3000.0\n"
    path = scenario_file(text)
    a = b"".join(Run(scenario.load(path), planner=planner, duration_s=7200.0).lines())
    b = b"".join(Run(scenario.load(path), planner=planner, duration_s=7200.0).lines())
    c = b"".join(Run(scenario.load(path), planner=planner, duration_s=7200.0, seed=8).lines())
    assert a == b and a != c and b'"type":"fault"' in a and b'"type":"fault"' in c
