"""The tests' stand-ins (tests/fakes/) as fixtures: test modules take what they need as arguments.

- The engine without the cost model: `planner`, `texts`, `scenario_file`, `checkpoint`, `simulate`,
  `fake_cli`.
- Sweeps without the performance model: `estimator`, `pid_estimator`, `dying_estimator`, `child_cli`.
- Real clusters made from a simulated run: `simulated_run`, `telemetry`, and the HTTP servers `exporters`,
  `prometheus` and `http_server`, which listen on 127.0.0.1 (the exporters on 127.0.0.2 and up) and are
  stopped when the test ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.sim.run import Run
from fakes import estimate, plan
from fakes import telemetry as fake_telemetry
from fakes.cli import ChildCli

# ----- the engine with the fake planner ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def planner() -> Callable[..., Any]:
    """The fake planner, fast and independent of the cost model: `Run(..., planner=planner)`."""
    return plan.fake_planner


@pytest.fixture(scope="session")
def texts() -> plan.Texts:
    """Scenario texts by name: `small` (64 GPUs, TP 2 PP 4 DP 8), `mixed` (96 GPUs: that job, one that does
    not fit, idle GPUs) and `quiet` (no faults nor stragglers: append it to another)."""
    return plan.Texts()


@pytest.fixture
def scenario_file(tmp_path: Path) -> Callable[..., str]:
    """`scenario_file(text=texts.small, name="small.toml")`: the text written in the test's tmp_path, and its
    path."""
    return functools.partial(plan.write_scenario, tmp_path)


@pytest.fixture(scope="session")
def checkpoint() -> Callable[[float], Any]:
    """`checkpoint(seconds)`: a checkpoint-like perturbation for `Run.interrupt` (the job's GPUs write for
    that long, then training resumes)."""
    return plan.checkpoint_for


@pytest.fixture
def simulate(scenario_file: Callable[..., str],
             planner: Callable[..., Any]) -> Callable[..., tuple[Run, list[dict[str, Any]]]]:
    """`simulate(text, **run_options)`: the text written as a scenario file and run by the engine with the
    fake planner: the Run and every event it wrote, decoded."""

    def run(text: str, **kw: Any) -> tuple[Run, list[dict[str, Any]]]:
        r = Run(scenario.load(scenario_file(text)), planner=planner, **kw)
        return r, [orjson.loads(line) for line in r.lines()]

    return run


@pytest.fixture(scope="session")
def fake_cli() -> ChildCli:
    """The clustertop command in a child process with the fake planner: `fake_cli(*args, stdin=None,
    timeout=60)` runs it to the end (a CompletedProcess of bytes), `fake_cli.command(*args)` is its argv."""
    return ChildCli({"clustertop.engine.sim.run.default_planner": plan.fake_planner})


# ----- sweeps with fake estimators --------------------------------------------------------------------------
# Module-level functions of tests/fakes/estimate.py: worker processes import them by that module path.


@pytest.fixture(scope="session")
def estimator() -> Callable[[Any], dict[str, Any]]:
    """The stand-in for the performance model: scenario -> the `estimate --json` object."""
    return estimate.estimate_json


@pytest.fixture(scope="session")
def pid_estimator() -> Callable[[Any], dict[str, Any]]:
    """`estimator` plus the id of the process that ran it ("pid"), 50 ms a point."""
    return estimate.pid_estimator


@pytest.fixture(scope="session")
def dying_estimator() -> Callable[[Any], dict[str, Any]]:
    """`estimator`, except that the process estimating a point with tp = 4 is killed (as by the OOM
    killer)."""
    return estimate.dies_at_tp_4


@pytest.fixture(scope="session")
def child_cli() -> type[ChildCli]:
    """`child_cli({"module.attribute": fake})`: the clustertop command in a child process with those set
    first, each fake a function of tests/fakes (see `fake_cli`)."""
    return ChildCli


# ----- real clusters, made from a simulated run -------------------------------------------------------------


@pytest.fixture(scope="session")
def simulated_run(tmp_path_factory: pytest.TempPathFactory) -> fake_telemetry.SimulatedRun:
    """A 64-GPU run (small + quiet, the fake planner) recorded for 10 s at 1 s: `.scenario` (its file),
    `.recording`, `.frames` ((t, util %, power W) per sample). Shared by every test: read it, never change
    it."""
    return fake_telemetry.simulate(tmp_path_factory.mktemp("sim"))


@pytest.fixture(scope="session")
def telemetry() -> ModuleType:
    """Pure helpers that make real telemetry (tests/fakes/telemetry.py): hosts(n), frames(recording),
    range_dump(...), exporter_page(...), and the metric names UTIL and POWER and the dumps' start T0."""
    return fake_telemetry


def _replay(run: fake_telemetry.SimulatedRun) -> fake_telemetry.Replay:
    """The simulated run played back at its first frame by 8 hosts of 8 GPUs (set `.k` to move it)."""
    return fake_telemetry.Replay(run.frames, fake_telemetry.hosts(8), 8)


@pytest.fixture
def exporters(simulated_run: fake_telemetry.SimulatedRun) -> Iterator[fake_telemetry.Exporters]:
    """A fake dcgm-exporter per node of the simulated run, node n on 127.0.0.{n + 2}: `.urls`, `.replay.k` the
    frame served, `.broken[node] = (status, body)` to answer that instead. Stopped when the test ends."""
    with fake_telemetry.Exporters(_replay(simulated_run)) as farm:
        yield farm


@pytest.fixture
def prometheus(simulated_run: fake_telemetry.SimulatedRun) -> Iterator[fake_telemetry.FakePrometheus]:
    """A fake Prometheus on 127.0.0.1 answering instant queries with the simulated run: `.url`, `.replay.k`
    the frame served. Stopped when the test ends."""
    with fake_telemetry.FakePrometheus(_replay(simulated_run)) as server:
        yield server


@pytest.fixture
def http_server() -> Iterator[Callable[[fake_telemetry.Route], fake_telemetry.FakeServer]]:
    """`http_server(route)`: an HTTP server on 127.0.0.1 answering GETs with `route(path, query)` -> (status,
    content type, body); `.url`. Stopped when the test ends."""
    servers: list[fake_telemetry.FakeServer] = []

    def start(route: fake_telemetry.Route) -> fake_telemetry.FakeServer:
        servers.append(fake_telemetry.FakeServer(route))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def trickle() -> Iterator[Callable[..., fake_telemetry.Trickle]]:
    """`trickle(gap=0.1, headers=True, hang=False)`: a server on 127.0.0.1 that sends its answer a byte every
    `gap` seconds (or its headers too, or nothing at all); `.url`. Stopped when the test ends."""
    servers: list[fake_telemetry.Trickle] = []

    def start(**kwargs: Any) -> fake_telemetry.Trickle:
        servers.append(fake_telemetry.Trickle(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
