"""Long and site-scale recordings: the writer's fast paths give the bytes of the plain ones, memory stays
bounded, and a 1 GW site's 54 days is a run the engine accepts."""

from __future__ import annotations

import random
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.sim import sampling, variability
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import lines as wire
from clustertop.engine.stream import recorder
from clustertop.engine.stream.lines import line, rle_json, wire_time
from clustertop.engine.stream.recorder import Recorder


def test_time_json_is_orjson_of_the_wire_time() -> None:
    rng = random.Random(7)
    values = [0.0, 1e-7, 5e-4, 1e-3, 1.0, 5.0000005, 86400.0, 4665600.0, 999999999.9999995, 1e9, 3e12]
    for _ in range(20_000):
        t = 10 ** rng.uniform(-4, 9.5)
        values += [t, round(t, 6) + 5e-7, round(t, 6) - 5e-7, float(rng.randrange(10**9)) / 8]
    for t in values:
        assert wire.time_json(t) == orjson.dumps(wire_time(t)), t


def test_step_lines_are_the_events_as_line_writes_them() -> None:
    run = Run(scenario.load("shared-fabric"), duration_s=120.0, sample_s=30.0)
    lines = [raw for raw in run.lines() if b'"type":"step"' in raw]
    assert len({orjson.loads(raw)["job"] for raw in lines}) > 1
    for raw in lines:
        assert raw == line(orjson.loads(raw))
    times = [orjson.loads(raw)["t"] for raw in lines]
    assert times == sorted(times)


def test_a_large_encoded_part_holds_no_more_memory_than_its_length() -> None:
    values = np.arange(200_000) % 7
    tracemalloc.start()
    try:
        part = rle_json(values)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 1.5 * len(part)          # orjson's own bytes keep several times their length allocated


def test_recent_keeps_the_newest_parts_within_its_budget() -> None:
    cache: sampling.Recent[bytes] = sampling.Recent(entries=4, budget=100)
    for i in range(10):
        cache.put(i, bytes(30), 30)
        assert cache.size <= 100 and len(cache.items) <= 4
    assert cache.get(9) == bytes(30) and cache.get(0) is None
    cache.put("big", bytes(500), 500)       # larger than the budget alone: kept, the rest goes
    assert list(cache.items) == ["big"]


def test_the_sampler_keeps_its_reused_parts_within_its_budget() -> None:
    run = Run(scenario.load("llama3-405b-16k"), duration_s=1800.0, sample_s=5.0)
    run.sampler._cache.budget = 60_000         # a few of the flagship's samples (20-25 kB each)
    for _ in run.lines():
        pass
    assert 0 < run.sampler._cache.size <= 60_000


def test_a_job_gets_its_stretched_step_back_when_its_neighbours_plan_comes_back() -> None:
    run = Run(scenario.load("shared-fabric"), duration_s=600.0)
    track = next(t for t in run.tracks if t.plan is not None)
    first, first_stretched = track.plan, track.stretched
    other = first.scaled(1.5)
    track.plan = other
    variability.restretch(run.scenario, track, run.power.phase_w)
    assert track.stretched is not first_stretched
    track.plan = first
    variability.restretch(run.scenario, track, run.power.phase_w)
    assert track.stretched is first_stretched


def test_a_1gw_sites_54_days_is_a_run_the_engine_takes() -> None:
    run = Run(scenario.load("prometheus-1gw"), duration_s=54 * 86400.0)      # ~7,800 expected interruptions
    assert run.sample_s == 3600.0


def test_too_many_interruptions_are_still_refused() -> None:
    with pytest.raises(UserError, match="interruptions"):
        Run(scenario.load("prometheus-1gw"), duration_s=120 * 86400.0)


def _gzip_by_hand(lines: list[tuple[str, bytes]], level: int = 6) -> bytes:
    """What Recorder writes, done synchronously: chunks at BUFFER_BYTES, a sync flush per sample, a new member
    at the first sample past MEMBER_BYTES."""
    out: list[bytes] = []
    z = zlib.compressobj(level, zlib.DEFLATED, 31)
    buffer: list[bytes] = []
    buffered = member = 0
    for kind, raw in lines:
        if kind == "sample" and member + buffered >= recorder.MEMBER_BYTES:
            data = b"".join(buffer)
            out += [z.compress(data), z.flush(zlib.Z_FINISH)]
            z = zlib.compressobj(level, zlib.DEFLATED, 31)
            buffer, buffered, member = [], 0, 0
        buffer.append(raw)
        buffered += len(raw)
        if kind == "sample" or buffered >= recorder.BUFFER_BYTES:
            data = b"".join(buffer)
            member += len(data)
            out.append(z.compress(data))
            if kind == "sample":
                out.append(z.flush(zlib.Z_SYNC_FLUSH))
            buffer, buffered = [], 0
    out += [z.compress(b"".join(buffer)), z.flush(zlib.Z_FINISH)]
    return b"".join(out)


def test_the_compressing_thread_writes_the_bytes_of_synchronous_gzip(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder, "MEMBER_BYTES", 64 << 10)
    monkeypatch.setattr(recorder, "BUFFER_BYTES", 8 << 10)
    rng = random.Random(3)
    lines = [("sample" if i % 50 == 49 else "event", b'{"i":%d,"x":"%s"}\n' % (i, b"ab" * rng.randrange(60)))
             for i in range(20_000)]
    path = tmp_path / "r.jsonl.gz"
    sink = Recorder.open(str(path))
    for kind, raw in lines:
        (sink.keyframe if kind == "sample" else sink.write)(raw)
    sink.close()
    assert path.read_bytes() == _gzip_by_hand(lines)
    assert sink.bytes_out == path.stat().st_size


class _FullDisk:
    def __init__(self) -> None:
        self.written = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        if self.written > 1000:
            raise UserError("cannot write: No space left on device", "out.jsonl.gz")
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_an_error_writing_gzip_reaches_the_writer() -> None:
    out = _FullDisk()
    sink = Recorder(out, compress=True)       # type: ignore[arg-type]
    with pytest.raises(UserError, match="No space left"):
        for i in range(100_000):
            noise = np.random.default_rng(i).bytes(40).hex().encode()
            sink.keyframe(b'{"t":%d,"random":"%s"}\n' % (i, noise))
        sink.close()
    with pytest.raises(UserError):
        sink.close()
    assert out.closed
