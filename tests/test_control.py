"""Live control, engine side: the protocol, pacing, pause and resume, injected faults,
and `record --control`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.sim import control
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import protocol

QUIET = """
[faults]
enabled = false
rate_scale = 0.0
planned_per_day = 0.0
detection = "5s"
restart = "20s"

[variability]
straggler_sigma = 0.0
slow_gpu_fraction = 0.0
diurnal_amplitude = 0.0
"""


@pytest.fixture
def quiet_run(scenario_file: Any, texts: Any, planner: Any) -> Any:
    """`quiet_run(seconds)`: a Run of the small scenario, quiet, for that long, sampled every second."""

    def run(seconds: float) -> Run:
        return Run(scenario.load(scenario_file(texts.small + QUIET)), planner=planner, duration_s=seconds,
                   sample_s=1.0)

    return run


def test_protocol_round_trip_and_the_engine_decodes_with_it() -> None:
    for command in (protocol.speed(250), protocol.pause(), protocol.resume(), protocol.inject_fault(4321)):
        line = protocol.encode(command)
        assert line.endswith(b"\n") and protocol.decode(line) == command
    assert protocol.decode(b'{"cmd": "speed", "value": 2}') == {"cmd": "speed", "value": 2}
    for bad in (b"not json", b"[1]", b'{"cmd": "reboot"}', b'{"cmd": "speed"}',
                b'{"cmd": "speed", "value": true}',
                b'{"cmd": "inject_fault", "gpu": "7"}', b'{"cmd": "inject_fault", "gpu": false}'):
        assert protocol.decode(bad) is None
    with pytest.raises(ValueError):
        protocol.encode({"cmd": "reboot"})
    assert control.decode is protocol.decode  # the engine reads what the dashboard writes, one definition


class Script:
    """Commands delivered at given ticks, and a wall clock that advances by one tick per wait."""

    def __init__(self, batches: dict[int, list[dict[str, Any]]], eof_at: int) -> None:
        self.batches = batches
        self.eof_at = eof_at
        self.eof = False
        self.tick = 0
        self.now = 0.0
        self.sim: list[float] = []          # simulated time when each wait began
        self.run: Run | None = None

    def wait(self, timeout: float | None) -> list[dict[str, Any]]:
        assert self.run is not None
        self.sim.append(self.run.env.now)
        self.tick += 1
        self.now += control.TICK_S
        self.eof = self.tick >= self.eof_at
        return self.batches.get(self.tick, [])

    def clock(self) -> float:
        return self.now


class Lines:
    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.flushes = 0

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    keyframe = write

    def flush(self) -> None:
        self.flushes += 1


def test_paced_run_follows_speed_pause_resume_and_injects(quiet_run: Any) -> None:
    r = quiet_run(120.0)
    script = Script({3: [protocol.speed(100)], 10: [protocol.pause()], 12: [protocol.inject_fault(13)],
                     13: [protocol.inject_fault(64)], 15: [protocol.resume()]}, eof_at=20)
    script.run = r
    warnings: list[str] = []
    pacer = control.Pacer(r, script, clock=script.clock, warn=warnings.append)  # type: ignore[arg-type]
    sink = Lines()
    stats = pacer.drive(sink)
    sim = script.sim
    assert sim[1] == pytest.approx(0.05) and sim[2] == pytest.approx(0.1)            # 1 s per s at first
    assert sim[4] - sim[3] == pytest.approx(5.0)                                     # then 100 s per s
    assert sim[10] == sim[11] == sim[12] == sim[14]                                  # paused
    assert sim[16] - sim[15] == pytest.approx(5.0)
    events = [orjson.loads(line) for line in sink.lines]
    (fault,) = [e for e in events if e["type"] == "fault"]
    assert fault["t"] == pytest.approx(sim[11], abs=1e-6) and fault["gpu"] == 13 and fault["injected"]
    (restart,) = [e for e in events if e["type"] == "restart"]
    assert restart["t"] == pytest.approx(fault["t"] + 25.0)
    assert warnings == ["inject_fault: GPU 64 is not in the cluster; expected 0 to 63"]
    assert stats.sim_seconds == 120.0 and events[-1]["t"] == 120.0 and sink.flushes >= 20
    assert r.summary["interruptions_unexpected"] == 1


def test_the_fault_is_written_while_paused(quiet_run: Any) -> None:
    r = quiet_run(10.0)
    sink = Lines()
    seen: list[int] = []

    class Watch(Script):
        def wait(self, timeout: float | None) -> list[dict[str, Any]]:
            seen.append(sum(b'"type":"fault"' in line for line in sink.lines))
            return super().wait(timeout)

    script = Watch({2: [protocol.pause()], 4: [protocol.inject_fault(3)], 8: [protocol.resume()]}, eof_at=9)
    script.run = r
    control.Pacer(r, script, clock=script.clock).drive(sink)  # type: ignore[arg-type]
    assert seen[4] == 1          # the next look after the command: written, though still paused


def test_record_control_writes_the_same_stream(tmp_path: Path, scenario_file: Any, texts: Any,
                                               fake_cli: Any) -> None:
    path = scenario_file(texts.small + "\n[faults]\nrate_scale = 3000.0\n")   # faults, stragglers...
    plain, paced = tmp_path / "plain.jsonl", tmp_path / "paced.jsonl"
    assert fake_cli("record", path, "-o", str(plain), "--duration", "2h").returncode == 0
    done = fake_cli("record", path, "-o", str(paced), "--duration", "2h", "--control",
                    stdin=protocol.encode(protocol.speed(1e6)))
    assert done.returncode == 0, done.stderr
    assert paced.read_bytes() == plain.read_bytes() and b'"type":"fault"' in plain.read_bytes()


def test_record_control_paces_and_injects(tmp_path: Path, scenario_file: Any, texts: Any,
                                          fake_cli: Any) -> None:
    path = scenario_file(texts.small + QUIET)
    out = tmp_path / "live.jsonl"
    commands = protocol.encode(protocol.speed(20)) + protocol.encode(protocol.inject_fault(13))
    done = fake_cli("record", path, "-o", str(out), "--duration", "10s", "--control", "--json",
                    stdin=commands)
    assert done.returncode == 0, done.stderr
    summary = orjson.loads(done.stdout)
    assert summary["wall_seconds"] >= 0.45                        # 10 simulated seconds at 20 per second
    assert summary["interruptions_unexpected"] == 1
    events = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    (fault,) = [e for e in events if e["type"] == "fault"]
    assert fault["gpu"] == 13 and fault["injected"] and fault["t"] < 1.0
    # without --control nothing paces it: 10 simulated seconds in well under 10 wall seconds (its compute
    # alone, a few tenths of a second on a quiet machine, more on a loaded one)
    unpaced = fake_cli("record", path, "-o", str(tmp_path / "fast.jsonl"), "--duration", "10s", "--json")
    assert orjson.loads(unpaced.stdout)["wall_seconds"] < 5.0


class SlowWhenBlocked(Script):
    """A wait with no timeout (paused) takes 10 wall seconds, as a user who pauses for 10 s."""

    def wait(self, timeout: float | None) -> list[dict[str, Any]]:
        got = super().wait(timeout)
        if timeout is None:
            self.now += 10.0
        return got


def test_a_pause_is_not_simulated_time(quiet_run: Any) -> None:
    """Defect: after space, 10 s, space at 100x the engine's clock jumped 1,000 simulated seconds."""
    r = quiet_run(600.0)
    script = SlowWhenBlocked({2: [protocol.speed(100)], 4: [protocol.pause()], 6: [protocol.resume()]},
                             eof_at=10)
    script.run = r
    control.Pacer(r, script, clock=script.clock).drive(Lines())  # type: ignore[arg-type]
    sim = script.sim
    assert sim[5] == sim[4] and sim[6] == sim[4]      # paused
    assert sim[7] - sim[6] <= 5.0 + 1e-9              # one tick at 100x after the resume, not 1,000 s


def test_run_to_drives_the_clock_and_faults_land_at_the_time_given(quiet_run: Any) -> None:
    r = quiet_run(60.0)
    script = Script({2: [protocol.speed(1e6), protocol.run_to(7.0)], 6: [protocol.run_to(9.5)],
                     8: [protocol.inject_fault(13, t=12.25)], 9: [protocol.run_to(11.0)]}, eof_at=12)
    script.run = r
    sink = Lines()
    control.Pacer(r, script, clock=script.clock).drive(sink)  # type: ignore[arg-type]
    sim = script.sim
    assert sim[3] == sim[4] == sim[5] == 7.0                # no further than the dashboard's clock
    assert sim[7] == 9.5 and sim[9] == sim[10] == 12.25     # the injection moved it to its time, not back
    events = [orjson.loads(line) for line in sink.lines]
    (fault,) = [e for e in events if e["type"] == "fault"]
    assert fault["t"] == 12.25 and fault["gpu"] == 13
    assert max(e["t"] for e in events if e["type"] == "sample" and e["t"] <= 12.25) == 12.0
    assert protocol.decode(protocol.encode(protocol.run_to(3))) == {"cmd": "run_to", "t": 3.0}
    assert protocol.decode(b'{"cmd": "run_to"}') is None
    assert protocol.decode(b'{"cmd": "inject_fault", "gpu": 1, "t": "x"}') is None
