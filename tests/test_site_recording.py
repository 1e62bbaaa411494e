"""Long and site-scale recordings: the writer's fast paths give the bytes of the plain ones, memory stays
bounded, and a 1 GW site's 54 days is a run the engine accepts."""

from __future__ import annotations

import dataclasses
import math
import random
import tracemalloc
import zlib
from collections.abc import Callable, Generator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
import simpy
from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.geometry import TIERS
from clustertop.engine.config.phases import CODE
from clustertop.engine.model.power import PowerModel
from clustertop.engine.sim import sampling, variability
from clustertop.engine.sim.activity import NPH, Constant, Running
from clustertop.engine.sim.lifecycle import JobDriver
from clustertop.engine.sim.run import Run
from clustertop.engine.sim.site_power import SitePower
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


def test_wire_time_is_round_to_the_microsecond() -> None:
    rng = random.Random(5)
    values = [0.0, -0.0, 1e-7, -1e-7, 5e-7, 0.0078125, 1.5e-6, 2.5e-6, 86400.0, 999999999.9999995, -5.0000005,
              1e9, -1e9, 3e12, math.inf, -math.inf]
    for _ in range(50_000):
        t = 10 ** rng.uniform(-7, 9.2) * rng.choice((1, -1))
        half = (math.floor(t * 1e6) + 0.5) / 1e6                 # a double next to a half microsecond
        values += [t, half, math.nextafter(half, math.inf), math.nextafter(half, -math.inf)]
    for t in values:
        got, want = wire_time(t), float(round(t, 6))
        assert got == want and math.copysign(1, got) == math.copysign(1, want), t
    assert math.isnan(wire_time(math.nan))


def test_times_json_is_time_json_of_each() -> None:
    rng = random.Random(11)
    stretch = [86400.0 + k * 6.25 for k in range(40)]           # whole seconds among them: "86425.0"
    assert wire.times_json(stretch) == [wire.time_json(t) for t in stretch]
    assert b"86425.0" in wire.times_json(stretch)
    for _ in range(300):
        t0, period = 10 ** rng.uniform(-3, 8.9), rng.uniform(1e-3, 50.0)
        ts = [t0 + k * period for k in range(rng.randrange(1, 30))]
        assert wire.times_json(ts) == [wire.time_json(t) for t in ts]
    edges = [0.0, 1e-7, 5e-4, 2.0, 1e9, 3e12]                    # out of the fast range: orjson's
    assert wire.times_json(edges) == [wire.time_json(t) for t in edges]
    assert wire.times_json([]) == []


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


def _small_buffers_and_lines(monkeypatch: pytest.MonkeyPatch, seed: int, every: int, fill: bytes,
                             longest: int) -> list[tuple[str, bytes]]:
    """The recorder with small gzip members and buffers, and 20,000 lines of random lengths, every `every`-th
    a sample (a keyframe)."""
    monkeypatch.setattr(recorder, "MEMBER_BYTES", 64 << 10)
    monkeypatch.setattr(recorder, "BUFFER_BYTES", 8 << 10)
    rng = random.Random(seed)
    return [("sample" if i % every == every - 1 else "event",
             b'{"i":%d,"x":"%s"}\n' % (i, fill * rng.randrange(longest))) for i in range(20_000)]


def test_the_compressing_thread_writes_the_bytes_of_synchronous_gzip(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _small_buffers_and_lines(monkeypatch, 3, 50, b"ab", 60)
    path = tmp_path / "r.jsonl.gz"
    sink = Recorder.open(str(path))
    for kind, raw in lines:
        (sink.keyframe if kind == "sample" else sink.write)(raw)
    sink.close()
    assert path.read_bytes() == _gzip_by_hand(lines)
    assert sink.bytes_out == path.stat().st_size


def test_writelines_writes_the_bytes_of_writing_each_line(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Events given many at a time (a stretch of steps) drain the buffer after the same line as one by one, so
    the gzip chunks, and so the bytes, are the same."""
    lines = _small_buffers_and_lines(monkeypatch, 5, 97, b"cd", 80)
    rng = random.Random(6)                     # the batches' lengths
    path = tmp_path / "r.jsonl.gz"
    sink = Recorder.open(str(path))
    batch: list[bytes] = []
    for kind, raw in lines:
        if kind == "sample":
            sink.writelines(batch)             # most batches stay under BUFFER_BYTES, some cross it
            batch = []
            sink.keyframe(raw)
        else:
            batch.append(raw)
            if len(batch) == rng.randrange(1, 400):
                sink.writelines(batch)
                batch = []
    sink.writelines(batch)
    sink.close()
    assert path.read_bytes() == _gzip_by_hand(lines)
    assert sink.lines == len(lines)


def test_a_sample_is_one_hand_off_to_the_compressing_thread(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hand-off wakes the thread and takes the interpreter lock back and forth: a sample's chunk, its
    sync flush and the output's flush go together."""
    sink = Recorder.open(str(tmp_path / "r.jsonl.gz"))
    handed: list[int] = []
    submit = sink._submit
    monkeypatch.setattr(sink, "_submit", lambda op, data: (handed.append(op), submit(op, data)))
    for i in range(50):
        sink.write(b'{"i":%d}\n' % i)
        sink.keyframe(b'{"sample":%d}\n' % i)
    assert len(handed) == 50
    sink.close()


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


# ----- steps written in closed form, and what the run keeps between events --------------------------------


def _faulty_shared_fabric() -> scenario.Scenario:
    """shared-fabric (four jobs, two pairs sharing tiers, checkpoints) with faults every few minutes:
    restarts, new steps with the neighbours, lost work."""
    sc = scenario.load("shared-fabric")
    return dataclasses.replace(sc, faults=dataclasses.replace(sc.faults, rate_scale=300.0))


def _waking_every(dt: float) -> Callable[[Run], Generator[Any, Any, None]]:
    """A process that has the run write the steps due every `dt` seconds, as a run stepping each would."""
    def factory(run: Run) -> Generator[Any, Any, None]:
        while True:
            yield run.env.timeout(dt)
            run.advance(run.env.now)
    return factory


def test_steps_written_in_closed_form_are_the_steps_written_as_they_end() -> None:
    """Between two events the run writes a stretch of steps at once (t0 + k * step, counters in closed form)
    at the next line; a run woken every fraction of a step to write each as it ends writes the same lines:
    the same times, counters and order across jobs."""
    fast = Run(_faulty_shared_fabric(), duration_s=1800.0, sample_s=60.0)
    stepped = Run(_faulty_shared_fabric(), duration_s=1800.0, sample_s=60.0)
    stepped.add_process(_waking_every(0.0737))
    fast_lines, stepped_lines = list(fast.lines()), list(stepped.lines())
    kinds = {orjson.loads(raw)["type"] for raw in fast_lines[1:]}
    assert {"step", "fault", "restart", "checkpoint_start", "contention"} <= kinds
    assert len({orjson.loads(raw)["job"] for raw in fast_lines if b'"type":"step"' in raw}) == 4
    assert fast_lines == stepped_lines
    assert fast.summary == stepped.summary
    assert [t.productive_s for t in fast.tracks] == [t.productive_s for t in stepped.tracks]


def test_a_step_line_with_a_percent_in_the_job_name_is_the_event_as_line_writes_it() -> None:
    """Step lines come from a %-template of the job's serialized parts: a '%' of its name stays itself."""
    sc = scenario.load("shared-fabric")
    jobs = tuple(dataclasses.replace(j, name=f"{j.name}-100%d{i}%%") for i, j in enumerate(sc.jobs))
    run = Run(dataclasses.replace(sc, jobs=jobs), duration_s=60.0, sample_s=30.0)
    steps = [raw for raw in run.lines() if b'"type":"step"' in raw]
    assert {orjson.loads(raw)["job"] for raw in steps} == {j.name for j in jobs}
    for raw in steps:
        assert raw == line(orjson.loads(raw))


def test_a_job_keeps_its_clock_variants_when_its_neighbours_come_and_go() -> None:
    """The day's clock variants of a job's step are kept per stretched step: when its neighbours' plan comes
    back (a fault, then the restart), its step at the same clock is the one it had, not scaled again."""
    run = Run(scenario.load("shared-fabric"), duration_s=600.0)
    track = next(t for t in run.tracks if t.plan is not None)
    first = track.plan
    at_noon = variability.plan_at(0.2, track, 12 * 3600.0)
    track.plan = first.scaled(1.5)
    variability.restretch(run.scenario, track, run.power.phase_w)
    assert variability.plan_at(0.2, track, 12 * 3600.0) is not at_noon
    track.plan = first
    variability.restretch(run.scenario, track, run.power.phase_w)
    assert variability.plan_at(0.2, track, 12 * 3600.0) is at_noon
    for hour in range(3 * variability.VARIANTS):       # bounded: the oldest go first
        variability.plan_at(0.2, track, hour * 900.0)
    assert len(track.variants) <= variability.VARIANTS


def test_site_power_works_out_a_jobs_watts_once_per_plan_and_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that checkpoints every few steps goes back and forth between its step and the checkpoint's phase:
    the site's level takes each one's watts from the first time, and they are the watts worked out anew."""
    run = Run(scenario.load("shared-fabric"), duration_s=1800.0, sample_s=60.0)
    site = run.site_power
    worked: list[tuple[int, int]] = []
    job_watts = site._job_watts

    def counting(track: Any, act: Any) -> tuple[float, float, float]:
        what = act.plan if isinstance(act, Running) else getattr(act, "phase", None)
        worked.append((track.index, id(what)))
        return job_watts(track, act)

    monkeypatch.setattr(site, "_job_watts", counting)
    levels = []
    for raw in run.lines():
        if b'"type":"checkpoint_start"' in raw or b'"type":"power_swing"' in raw:
            levels.append(site.now())
    assert run.stats.events and len(levels) > 20
    assert len(worked) == len(set(worked)) <= 3 * len(run.tracks)
    for track in run.tracks:
        act = track.segments[-1].activity
        assert site.job_watts(track) == site._job_watts(track, act)


def test_a_checkpoint_takes_its_phase_from_one_read_only_array() -> None:
    """Constant activities of one phase and depth share their one-hot (a site's jobs checkpoint every few
    steps): read-only, and their integrals are those of the phase."""
    a, b = Constant("checkpoint", 4), Constant("checkpoint", 4)
    assert a.onehot is b.onehot and not a.onehot.flags.writeable
    assert Constant("idle", 4).onehot is not a.onehot and Constant("checkpoint", 2).onehot.shape == (2, NPH)
    d = a.durations(10.0, 12.5)
    assert d.shape == (4, NPH) and np.all(d[:, CODE["checkpoint"]] == 2.5) and d.sum() == 10.0


def test_the_sampler_splits_the_same_gpus_once() -> None:
    """A failed node stays in the samples until its job restarts: the unit runs split around the same GPUs
    are the ones of the sample before, and those of a split worked out anew."""
    run = Run(scenario.load("shared-fabric"), duration_s=60.0)
    sampler = run.sampler
    gpus = np.array([3, 40, 41, 97], np.int64)
    first = sampler.split(gpus)
    again = sampler.split(gpus.copy())
    assert all(x is y for x, y in zip(first, again))
    other = sampler.split(np.array([5], np.int64))
    assert other[0].size == sampler.unit_starts.size + np.isin([5, 6], sampler.unit_starts, invert=True).sum()
    sampler._split = None
    for x, y in zip(sampler.split(gpus), first):
        assert np.array_equal(x, y)
    assert sampler._units_unique          # only the new runs' rows are looked up: as all would be
    sampler._split, sampler._units_unique = None, False
    for x, y in zip(sampler.split(gpus), first):
        assert np.array_equal(x, y)


def _order_of_waits(wait: Callable[[Any, float], Any]) -> list[tuple[str, float]]:
    """Who resumes when, in order: a job waiting for the first of its timeout and its wake (`wait`, twice,
    once woken early), and neighbours whose events fall at the same instants."""
    env = simpy.Environment()
    job = SimpleNamespace(env=env, wake=env.event())
    log: list[tuple[str, float]] = []

    def waiting() -> Generator[Any, Any, None]:
        yield wait(job, 1.0)                  # its timeout ends first
        log.append(("job", env.now))
        job.wake = env.event()
        yield wait(job, 5.0)                  # woken at 2.0
        log.append(("job", env.now))
        assert not job.wake.callbacks         # no stale check left on the wake it took

    def neighbour(at: float, name: str) -> Generator[Any, Any, None]:
        yield env.timeout(at)
        log.append((name, env.now))

    def waking() -> Generator[Any, Any, None]:
        yield env.timeout(2.0)
        job.wake.succeed()
        log.append(("waking", env.now))
        yield env.timeout(0)
        log.append(("after", env.now))

    env.process(waiting())
    env.process(neighbour(1.0, "neighbour"))
    env.process(waking())
    env.process(neighbour(2.0, "other"))
    env.run(until=10.0)
    return log


def test_a_job_waiting_for_a_step_boundary_or_its_wake_resumes_in_the_order_simpy_conditions_give() -> None:
    """JobDriver._until stands for `timeout | wake` (a Condition): the job resumes at the same instants and in
    the same order among events at those instants, so a run's lines keep their order."""
    with_condition = _order_of_waits(lambda job, delay: job.env.timeout(delay) | job.wake)
    with_until = _order_of_waits(lambda job, delay: JobDriver._until(job, delay))
    assert with_until == with_condition
    assert with_condition.index(("neighbour", 1.0)) < with_condition.index(("job", 1.0))


def test_a_jobs_integrals_in_one_pass_are_the_sums_over_its_segments() -> None:
    """A sample takes each job's durations, tier loads and wait for its slowest GPU in one pass over the
    segments of its window: the same sums, term by term, as adding up each segment alone."""
    run = Run(scenario.load("llama3-405b-16k"), duration_s=6 * 3600.0, sample_s=3600.0)
    sink = recorder.ListSink()
    run.start(sink)
    while run.env.peek() < 3600.0 * 3 - 1.0:
        run.env.step()
    track = run.tracks[0]
    a, b = 3600.0 * 2 + 0.3, run.now
    kinds = {type(s.activity) for s in track.segments if s.end > a and s.start < b}
    assert kinds == {Running, Constant}                  # checkpoints between stretches of steps
    durations, loads, extra = np.zeros((track.job.pp, NPH)), np.zeros(len(TIERS)), 0.0
    for seg in track.segments:
        lo, hi = max(a, seg.start), min(b, seg.end)
        if hi > lo:
            durations += seg.activity.durations(lo, hi)
            if isinstance(seg.activity, Running):
                plan, x0 = seg.activity.plan, seg.activity.t0
                loads += plan.tiers.integral(lo - x0, hi - x0)[:, 0]
                assert plan.extra is not None
                extra += float(plan.extra.integral(lo - x0, hi - x0)[0, 0])
    got = track.integrals(a, b)
    assert got[0].tobytes() == durations.tobytes() == track.durations(a, b).tobytes()
    assert got[1].tobytes() == loads.tobytes() and got[2] == extra > 0


def test_a_window_end_off_a_step_boundary_is_integrated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample's end is the next sample's start: the prefix integral there is looked up once, read-only."""
    run = Run(scenario.load("llama3-405b-16k"), duration_s=3600.0)
    periodic = run.tracks[0].plan.phases
    calls: list[int] = []
    g = periodic._g
    monkeypatch.setattr(periodic, "_g", lambda q: (calls.append(1), g(q))[1])
    p = periodic.period
    first = periodic.integral(0.3 * p, 5.6 * p)
    second = periodic.integral(5.6 * p, 9.1 * p)
    assert len(calls) == 3
    assert np.allclose(first + second, periodic.integral(0.3 * p, 9.1 * p))
    with pytest.raises(ValueError):
        periodic.at(5.6 * p)[0, 0] = 1.0


def test_whole_steps_from_a_segments_start_are_the_periodic_integrals() -> None:
    """A stretch of steps between checkpoints: its integrals over whole steps are kept per number of steps,
    the same as each track's (whose periods are the step's, also once stretched by the day's clocks)."""
    run = Run(scenario.load("llama3-405b-16k"), duration_s=3600.0)
    assert run.tracks[0].stretched is not None
    for plan in (run.tracks[0].stretched, run.tracks[0].stretched.scaled(1.0137)):
        assert plan.extra is not None
        assert plan.phases.period == plan.tiers.period == plan.extra.period
        p = plan.step_time_s
        for n in (1, 37, 38):
            x = n * p
            got = plan.integrals(0.0, x)
            assert got[0].tobytes() == plan.phases.integral(0.0, x).tobytes()
            assert got[1].tobytes() == plan.tiers.integral(0.0, x)[:, 0].tobytes()
            assert got[2] == float(plan.extra.integral(0.0, x)[0, 0])
            assert plan.integrals(0.0, x) is got             # kept
        off = plan.integrals(0.0, 3.5 * p)
        assert off[0].tobytes() == plan.phases.integral(0.0, 3.5 * p).tobytes()
        assert off[2] == float(plan.extra.integral(0.0, 3.5 * p)[0, 0])


def test_the_site_computes_each_level_it_goes_back_to_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints take the site back and forth between a few levels: each level, and each swing between two,
    is worked out once; the swings written are those of working each out afresh."""
    run = Run(scenario.load("llama3-405b-16k"), duration_s=6 * 3600.0, sample_s=600.0)
    calls: list[float] = []
    site_mw = PowerModel.site_mw
    monkeypatch.setattr(PowerModel, "site_mw", lambda self, w, n: (calls.append(w), site_mw(self, w, n))[1])
    checks: list[float] = []
    check = SitePower.look
    monkeypatch.setattr(SitePower, "look", lambda self, e=None: (checks.append(1), check(self, e))[1])
    swings = [orjson.loads(raw) for raw in run.lines() if b'"power_swing"' in raw]
    assert len(swings) > 50 and len(checks) > len(swings)
    site_calls = len(calls) - run.stats.samples                  # a sample's own mean: one each
    assert site_calls < 3 * len(checks) / 10
    fresh = SitePower(run.env, run.emit, run.power, run.tracks, [], run.gpus)
    for event in swings:
        fields = fresh._swing(event["from_mw"], event["to_mw"])
        assert fields and {k: event[k] for k in fields} == pytest.approx(fields, abs=1e-3)
