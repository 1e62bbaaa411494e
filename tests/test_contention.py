"""Jobs that share a fabric slow each other (engine/model/contention.py, engine/sim/sharing.py)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.model import collectives as col
from clustertop.engine.model.estimate import estimate, estimate_job, to_json
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import schema
from clustertop.engine.stream.state import ClusterState
from clustertop.tui.index import EventIndex
from clustertop.tui.widgets import links
from clustertop.tui.widgets.event_log import describe

PAIRS = ("interleaved-a", "interleaved-b", "separate-a", "separate-b")


def _shared_fabric(tmp_path: Path, oversubscription: float | None = None, extra: str = "") -> str:
    text = scenario.resolve_path("shared-fabric").read_text()
    if oversubscription is not None:
        text = re.sub(r"(?m)^pod_oversubscription = .*$", f"pod_oversubscription = {oversubscription}", text)
    path = tmp_path / "shared.toml"
    path.write_text(text.replace("[[jobs]]", extra + "\n[[jobs]]", 1) if extra else text)
    return str(path)


def _steps(path: str) -> dict[str, Any]:
    return {j.job.name: j for j in estimate(scenario.load(path), plan=False, hints=False).jobs}


def test_interleaved_pair_is_slower_than_separated_pair(tmp_path: Path) -> None:
    jobs = _steps(_shared_fabric(tmp_path))
    assert set(jobs) == set(PAIRS)
    a, b, sa, sb = (jobs[n] for n in PAIRS)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)     # the pair is symmetric
    assert sa.step_time_s == pytest.approx(sb.step_time_s, rel=1e-9)
    assert a.step_time_s > 1.02 * sa.step_time_s                       # straddling pods costs
    # part of it is the neighbour: the shared pod's uplinks carry both jobs' rings
    assert a.contention["contention_slowdown"] > 1.001
    assert a.step_time_s == pytest.approx(a.contention["step_time_alone_s"]
                                          * a.contention["contention_slowdown"], rel=1e-3)
    assert a.contention["contention_tier"] == "core"
    assert 0.3 < a.contention["contention_shares"]["core"] < 0.7
    # the separated pair shares nothing: same step as alone, no tier, no shares
    assert sa.contention == {"step_time_alone_s": pytest.approx(sa.step_time_s, abs=1e-4),
                             "contention_slowdown": 1.0, "contention_tier": None, "contention_shares": {}}


def test_slowdown_follows_the_oversubscription(tmp_path: Path) -> None:
    steps = {}
    for ratio in (1.0, 2.0, 4.0, 7.0, 12.0):
        jobs = _steps(_shared_fabric(tmp_path, ratio))
        steps[ratio] = (jobs["interleaved-a"].step_time_s, jobs["separate-a"].step_time_s,
                        jobs["interleaved-a"].contention["contention_slowdown"])
    at_1 = steps[1.0]
    assert at_1[0] == pytest.approx(at_1[1], rel=1e-9) and at_1[2] == 1.0   # full bisection: no difference
    ratios = sorted(steps)
    interleaved = [steps[r][0] for r in ratios]
    assert all(x <= y * (1 + 1e-9) for x, y in itertools.pairwise(interleaved))
    assert interleaved[-1] > 1.05 * interleaved[0]
    assert len({steps[r][1] for r in ratios}) == 1                     # a pod each:
                                                                       # the core tier is never used
    slowdowns = [steps[r][2] for r in ratios]
    assert slowdowns[-1] > slowdowns[0]


def test_a_single_job_is_estimated_alone() -> None:
    s = scenario.load("llama3-405b-8k")
    est = estimate(s)
    alone = estimate_job(s, s.jobs[0])
    assert est.jobs[0].step_time_s == alone.step_time_s
    assert "contention_slowdown" not in to_json(est)["jobs"][0]


def test_others_traffic_counts_only_on_the_blocks_a_job_uses() -> None:
    cluster = scenario.load("shared-fabric").cluster
    job = col.Placement(first_gpu=768, gpus=256, tp=8, cp=1, pp=8, dp=4, ep=1)    # pod 3 only
    alone = col.route(cluster, job, ("dp",))
    elsewhere = (("core", (0.0, 500.0, 0.0, 0.0, 0.0)),)                        # heavy traffic out of pod 1
    assert col.route(cluster, job, ("dp",), "ring", elsewhere).slowdown == alone.slowdown
    straddling = col.Placement(first_gpu=128, gpus=256, tp=8, cp=1, pp=8, dp=4, ep=1)   # pods 0 and 1
    base = col.route(cluster, straddling, ("dp",))
    assert base.demand["core"][1] > 0
    assert col.route(cluster, straddling, ("dp",), "ring", elsewhere).tier_slowdown["core"] > \
        base.tier_slowdown["core"]


@pytest.mark.parametrize("name", ["meta-129k-h100", "prometheus-1gw"])
def test_site_scenarios_report_contention_per_job(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", name, "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    training = [j for j in jobs if j["kind"] == "training"]
    assert len(training) >= 3
    for j in training:
        assert j["contention_slowdown"] >= 1.0
        assert j["step_time_s"] == pytest.approx(j["step_time_alone_s"] * j["contention_slowdown"], rel=2e-3)
        assert isinstance(j["contention_shares"], dict)
    assert any(j["contention_shares"] for j in training)       # neighbours meet on some tier
    assert all("contention_slowdown" not in j for j in jobs if j["kind"] == "inference")
    assert main(["estimate", name]) == 0
    assert capsys.readouterr().out.count("  neighbours  ") == len(training)


FAULT_AT_5M = """
[faults]
enabled = false

[[faults.inject]]
at = "5m"
gpu = 400
"""


def test_a_neighbour_down_speeds_the_others_up(tmp_path: Path) -> None:
    s = scenario.load(_shared_fabric(tmp_path, extra=FAULT_AT_5M))
    run = Run(s, duration_s=1500.0, sample_s=30.0)
    events = [json.loads(line) for line in run.lines()]
    header = {j["name"]: j for j in events[0]["jobs"]}
    assert (header["interleaved-a"]["contention_slowdown"] > 1.0
            and header["interleaved-a"]["contention_tier"] == "core")
    assert header["separate-a"]["contention_slowdown"] == 1.0
    fault = next(e for e in events if e["type"] == schema.FAULT)
    restart = next(e for e in events if e["type"] == schema.RESTART)
    assert fault["job"] == restart["job"] == "interleaved-b"
    changes = [e for e in events if e["type"] == schema.CONTENTION]
    assert [c["t"] for c in changes] == [fault["t"], restart["t"]]
    assert changes[0]["running"] == ["interleaved-a", "separate-a", "separate-b"]
    assert changes[1]["running"] == list(PAIRS)
    assert {j["job"]: j["contention_slowdown"] for j in changes[0]["jobs"]}["interleaved-a"] == 1.0

    def step_times(job: str, lo: float, hi: float) -> np.ndarray:
        return np.array([e["step_time_s"] for e in events
                         if e["type"] == schema.STEP and e["job"] == job and lo < e["t"] <= hi])

    before = step_times("interleaved-a", 0, fault["t"])
    # the step in flight when b fails ends at the old speed; the next ones are faster until b is back
    during = step_times("interleaved-a", fault["t"] + 2 * before.max(), restart["t"])
    after = step_times("interleaved-a", restart["t"] + 2 * before.max(), 1500.0)
    assert during.max() < before.min() and during.max() < after.min()
    assert before.mean() / during.mean() == pytest.approx(header["interleaved-a"]["contention_slowdown"],
                                                          rel=2e-3)
    separate = step_times("separate-a", 0, 1500.0)
    assert separate.max() == pytest.approx(separate.min(), rel=1e-3)   # the day's clocks only; no neighbour
    steps = [e["step"] for e in events if e["type"] == schema.STEP and e["job"] == "interleaved-a"]
    assert steps == list(range(1, len(steps) + 1))                      # no step lost or repeated at a switch

    # the shared pod's uplinks carry both jobs' rings: twice the load of the pods either job has alone
    core = np.array([e["links"]["core"] for e in events
                     if e["type"] == schema.SAMPLE and 0 < e["t"] <= fault["t"]])
    assert core[:, 1].mean() == pytest.approx(2 * core[:, 0].mean(), rel=0.05)
    assert core[:, 3:].max() == 0.0                                    # the separated pair never
                                                                       # leaves its pods

    # what the dashboard shows at any time it seeks to: the shared tier and each job's share,
    # none while b is down
    index = EventIndex(events[0])
    for event in events[1:]:
        index.add(event)
    shared = {t: links.sharing(index.state_at(t)) for t in (10.0, fault["t"] + 60, restart["t"] + 60)}
    assert [tier for tier, _ in shared[10.0]] == ["core"]
    assert {name for name, _, _ in shared[10.0][0][1]} == {"interleaved-a", "interleaved-b"}
    assert shared[fault["t"] + 60] == []
    assert shared[restart["t"] + 60] == shared[10.0]
    assert "interleaved-a x1.005" in describe(changes[1])


def test_contention_events_from_untrusted_files_do_not_break_the_state() -> None:
    header = {"type": "header", "topology": {"gpus": 16}, "jobs": [
        {"name": "a", "first_gpu": 0, "gpus": 8, "contention_slowdown": 1.1,
         "contention_shares": {"core": 0.5}},
        {"name": "b", "first_gpu": 8, "gpus": 8, "contention_shares": "not a dict"}]}
    state = ClusterState(header)
    assert links.sharing(state) == [("core", [("a", 0.5, 1.1)])]
    for bad in ({"jobs": 3}, {"jobs": [1, {"nojob": 1}]},
                {"jobs": [{"job": "zz", "contention_slowdown": "x"}]}):
        event = {"t": 1.0, "type": "contention", **bad}
        state.apply(event)
        describe(event)
        assert links.sharing(state) == []
