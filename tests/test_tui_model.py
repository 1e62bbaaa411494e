"""The dashboard's logic without a screen: layout and aggregation, the playback clock, the seekable index."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable

import numpy as np
import orjson
import pytest
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.geometry import Geometry
from clustertop.engine.config.phases import CODE
from clustertop.engine.stream import protocol, schema
from clustertop.tui.grid import View, layout, levels
from clustertop.tui.index import EventIndex
from clustertop.tui.playback import SPEEDS, Playback, format_clock
from clustertop.tui.sources.recording import RecordingSource
from clustertop.tui.sources.stream import StreamSource, stream_events

FLAGSHIP = {"gpus": 16384, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 3072,
            "gpus_per_building": 16384}
SITE = {"gpus": 524288, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 3072,
        "gpus_per_building": 98304}


def header(topology: dict[str, int] = FLAGSHIP) -> dict[str, object]:
    return {"type": "header", "schema": schema.SCHEMA, "schema_version": 1, "scenario": {"name": "test"},
            "topology": topology,
            "jobs": [{"name": "train", "first_gpu": 0, "gpus": topology["gpus"], "tp": 8,
                      "cp": 1, "pp": 16, "dp": topology["gpus"] // 128, "ep": 1}],
            "seed": 1, "sample_interval_s": 1.0, "duration_s": 100.0}


def sample(t: float, util: int, gpus: int = 16384, mw: float = 20.0) -> dict[str, object]:
    return {"t": t, "type": "sample", "util": schema.rle_encode(np.full(gpus, util)),
            "power_w": schema.rle_encode(np.full(gpus, 500)), "phase": schema.rle_encode(np.full(gpus, 1)),
            "links": {"spine": 0.5, "core": [0.2, 0.9]}, "site_mw": mw}


# -- layout -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("topology,view,size", [
    (FLAGSHIP, View("site"), (146, 50)),
    (FLAGSHIP, View("pod", 5), (146, 50)),     # the partial last pod
    (FLAGSHIP, View("rack", 270), (146, 50)),
    (FLAGSHIP, View("node", 540), (146, 50)),
    (FLAGSHIP, View("site"), (60, 20)),
    (SITE, View("site"), (146, 50)),
    (SITE, View("building", 1), (146, 50)),
])
def test_layout_draws_every_gpu_once_inside_the_box(topology, view, size) -> None:
    h = Geometry.from_summary(topology)
    lay = layout(h, view, *size)
    assert lay.top.shape == (size[1], size[0])
    drawn = np.concatenate([lay.top.ravel(), lay.bottom.ravel()])
    pixels = np.unique(drawn[drawn >= 0])
    # Every pixel of the view appears, and the pixels cover the view's GPUs exactly.
    assert pixels.tolist() == list(range(lay.pixels))
    gpu0, gpu1 = view.span(h)
    assert lay.gpus_of(0)[0] == gpu0 and lay.gpus_of(lay.pixels - 1)[1] == gpu1
    if lay.scale == 1:   # one pixel is one half cell: each appears exactly once
        assert np.bincount(drawn[drawn >= 0]).max() == 1


def test_layout_prefers_detail_and_labels_the_hierarchy() -> None:
    h = Geometry.from_summary(FLAGSHIP)
    site = layout(h, View("site"), 146, 50)
    assert site.g == 2                                   # 16K GPUs at 2 per half cell fit 146 x 50
    titles = " ".join(site.text)
    assert "pod 0 · racks 0–191" in titles and "pod 5 · racks 960–1023" in titles
    pod = layout(h, View("pod", 1), 146, 50)
    assert pod.g == 1 and "r192" in " ".join(pod.text)   # one GPU per pixel, bands labelled by rack
    assert levels(h) == ("site", "pod", "rack", "node")
    assert levels(Geometry.from_summary(SITE)) == ("site", "building", "pod", "rack", "node")


@pytest.mark.parametrize("width", [40, 38, 30, 12])
def test_a_narrow_rack_panel_keeps_its_whole_number(width) -> None:
    """Defect: zoomed into rack 13 at 80x24 (a map 38 columns wide) the label read `rack 1`: the title was cut
    to the rack's narrow panel."""
    h = Geometry.from_summary(FLAGSHIP)
    lay = layout(h, View("rack", 13), width, 16)
    assert re.search(r"\brack 13\b", lay.text[0])


def test_aggregation_mean_and_failed_phase_wins() -> None:
    h = Geometry.from_summary(SITE)
    lay = layout(h, View("site"), 146, 50)
    assert lay.g > 1
    util = np.zeros(h.gpus, dtype=np.float32)
    util[: lay.g] = 1.0
    means = lay.mean(util)
    assert means[0] == pytest.approx(1.0) and means[1:].max() == 0.0
    phases = np.full(h.gpus, CODE["compute"], dtype=np.uint8)
    phases[lay.g * 3 + 1] = CODE["failed"]                 # one failed GPU among many computing
    mode = lay.phase(phases)
    assert mode[3] == CODE["failed"] and mode[2] == CODE["compute"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_a_pixel_of_a_few_gpus_means_what_numpy_means(dtype) -> None:
    """Pixels of 2 to 7 GPUs are summed a column at a time: bit for bit numpy's float32 mean of each row (the
    colours, and so every screen, stay the same)."""
    h = Geometry.from_summary(FLAGSHIP)
    values = np.random.default_rng(7).random(h.gpus) * (100 if dtype == np.uint8 else 1.3)
    values = values.astype(dtype)
    if dtype != np.uint8:               # rows of -0.0 (numpy's mean: 0.0) and rows with a NaN among them
        values[: h.gpus // 2: 97] = np.nan
        values[h.gpus // 2:] = -0.0
    seen = set()
    for width, height in ((146, 56), (140, 40), (200, 60), (100, 30), (60, 40), (70, 20)):
        lay = layout(h, View("site"), width, height)
        seen.add(lay.g)
        segment = values[lay.gpu0:lay.gpu1]
        if segment.size % lay.g or lay.g == 1:          # (one GPU a pixel: its own value)
            continue
        numpy_mean = segment.reshape(-1, lay.g).mean(axis=1, dtype=np.float32)
        assert lay.mean(values).dtype == np.float32
        assert np.array_equal(lay.mean(values).view(np.uint32), numpy_mean.view(np.uint32))
    assert seen & set(range(2, 8)) and seen - set(range(1, 8))      # a few GPUs a pixel, and many


def test_neighbour_moves_on_screen() -> None:
    h = Geometry.from_summary(FLAGSHIP)
    lay = layout(h, View("pod", 0), 146, 50)
    right = lay.neighbour(0, 1, 0)
    assert lay.gpus_of(right)[0] == 16                    # the next rack's first GPU
    assert lay.neighbour(0, 0, 1) == 1                    # down the rack
    assert lay.neighbour(0, -1, 0) == 0                   # at the edge it stays


# -- playback -----------------------------------------------------------------------------------------------

def test_playback_speed_range_and_clock() -> None:
    assert SPEEDS[0] == pytest.approx(0.1) and SPEEDS[-1] == 1e6
    p = Playback(t=0.0, start=0.0, end=100.0)
    for _ in range(100):
        p.faster()
    assert p.speed == 1e6
    for _ in range(100):
        p.slower()
    assert p.speed == pytest.approx(0.1)
    p.speed = 10.0
    assert p.tick(0.5, 100.0) == pytest.approx(5.0)
    p.paused = True
    assert p.tick(0.5, 100.0) == pytest.approx(5.0)
    assert p.seek(1e9) == 100.0 and p.seek(-5) == 0.0
    p.go_live()
    assert p.tick(0.1, 120.0) == 120.0                    # following: pinned to the live edge
    assert format_clock(90061.5) == "1d 01:01:01.5"


# -- index and sources ------------------------------------------------------------------------------------

def test_index_seeks_to_keyframes_and_advances() -> None:
    index = EventIndex(header())
    for t in range(10):
        index.add(sample(float(t), util=t * 10, mw=20.0 + t))
        index.add({"t": t + 0.5, "type": "step", "job": "train", "step": t + 1, "step_time_s": 7.0,
                   "tokens_per_s": 1e6, "tflops_per_gpu": 400, "mfu": 0.4, "tokens_total": (t + 1) * 1e6})
        if t == 4:
            index.add({"t": 4.6, "type": "fault", "gpu": 3, "cause": "test"})
    state = index.state_at(4.7)
    assert state.util[0] == pytest.approx(0.4)            # the keyframe at t=4
    assert state.jobs["train"].step == 5                  # the step at 4.5
    assert [e["type"] for e in state.events] == ["fault"]
    assert list(state.site_mw_history) == [20.0, 21.0, 22.0, 23.0, 24.0]
    assert state.links["core"].tolist() == pytest.approx([0.2, 0.9])
    later, cursor = index.advance(state, index.cursor_at(4.7), 7.2)
    assert cursor == index.cursor_at(7.2)
    assert later.util[0] == pytest.approx(0.7) and later.jobs["train"].step == 7
    assert list(later.site_mw_history)[-1] == 27.0
    assert index.event_times() == [4.6]


def test_advance_folds_late_events_with_the_same_time() -> None:
    """A stream delivers a sample, the screen shows t=1, then a step stamped t=1 arrives: it must not be
    lost."""
    index = EventIndex(header())
    index.add(sample(0.0, 10))
    state = index.state_at(0.0)
    cursor = index.cursor_at(0.0)
    index.add({"t": 0.0, "type": "job_start", "job": "train"})
    index.add({"t": 0.0, "type": "step", "job": "train", "step": 1, "step_time_s": 7.0})
    state, cursor = index.advance(state, cursor, 0.0)
    assert state.jobs["train"].running and state.jobs["train"].step == 1
    state, again = index.advance(state, cursor, 0.0)
    assert again == cursor and [e["type"] for e in state.events] == ["job_start"]   # nothing folded twice


def test_live_index_stays_bounded() -> None:
    index = EventIndex(header({"gpus": 16, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 16,
                               "gpus_per_building": 16}), max_keyframes=64)
    for t in range(2000):
        index.add(sample(float(t), util=50, gpus=16))
    assert index.keyframe_count() <= 64
    assert index.state_at(1999.0).samples > 0 and index.end_t == 1999.0
    assert index.state_at(10.0).util[0] == pytest.approx(0.5)   # old times still resolve (coarser)


def test_recording_source_reads_the_committed_recording() -> None:
    source = RecordingSource("recordings/flagship-16k.jsonl.gz")
    assert source.header["topology"]["gpus"] == 16384 and source.done
    assert source.end_t > source.start_t
    state = source.state_at(source.end_t)
    assert state.samples > 0 and "pretrain" in state.jobs


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"not json\n", "line 1 is not JSON"),
    (b'{"type": "header", "schema": "other"}\n', "not a clustertop recording"),
])
def test_bad_recordings_are_user_errors(tmp_path, content, message) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        RecordingSource(str(path))


def test_recording_without_samples_is_a_user_error(tmp_path) -> None:
    path = tmp_path / "nosamples.jsonl"
    path.write_bytes(orjson.dumps(header()) + b"\n")
    with pytest.raises(UserError, match="no sample events"):
        RecordingSource(str(path))


def test_stream_source_reads_in_the_background() -> None:
    lines = [orjson.dumps(header()) + b"\n"] + [orjson.dumps(sample(float(t), 50)) + b"\n" for t in range(5)]
    source = StreamSource("pipe", stream_events(io.BytesIO(b"".join(lines)), "pipe"))
    source.start()
    assert source.wait(10) and source.end_t == 4.0 and source.index.error is None
    broken = [orjson.dumps(header()) + b"\n", b"{broken\n", orjson.dumps(sample(1.0, 5)) + b"\n"]
    source = StreamSource("pipe", stream_events(io.BytesIO(b"".join(broken)), "pipe"))
    source.start()
    assert source.wait(10) and "pipe:2" in (source.index.error or "")


def test_protocol_round_trip() -> None:
    for command in (protocol.speed(1000), protocol.pause(), protocol.resume(), protocol.inject_fault(42)):
        line = protocol.encode(command)
        assert line.endswith(b"\n") and protocol.decode(line) == command
    assert protocol.decode(b'{"cmd": "explode"}') is None
    assert protocol.decode(b"garbage") is None
    with pytest.raises(ValueError):
        protocol.encode({"cmd": "explode"})


def test_live_source_reads_a_child_and_sends_commands(tmp_path) -> None:
    """A stand-in engine: replays the recording, then echoes the commands it received to a file."""
    from clustertop.tui.sources.live import LiveSource

    log = tmp_path / "commands.jsonl"
    script = (
        "import gzip, sys\n"
        "sys.stdout.buffer.write(gzip.open('recordings/flagship-8k.jsonl.gz').read()); sys.stdout.flush()\n"
        f"out = open({str(log)!r}, 'wb')\n"
        "for line in sys.stdin.buffer:\n"
        "    out.write(line); out.flush()\n"
    )
    source = LiveSource("stand-in", command=[sys.executable, "-c", script])
    try:
        source.start()
        assert source.send(protocol.speed(100.0)) and source.send(protocol.inject_fault(7))
        deadline = __import__("time").monotonic() + 10
        while __import__("time").monotonic() < deadline and (source.end_t < 60 or not log.exists()
                                                             or log.read_bytes().count(b"\n") < 3):
            __import__("time").sleep(0.05)
        assert source.end_t == pytest.approx(60.0)
        sent = [orjson.loads(x) for x in log.read_bytes().splitlines()]
        # run_to(0): the engine waits at the start for the dashboard's clock
        assert sent == [protocol.run_to(0.0), protocol.speed(100.0), protocol.inject_fault(7)]
    finally:
        source.close()
    assert source.proc.poll() is not None


def test_live_source_reports_the_engines_error() -> None:
    from clustertop.tui.sources.live import LiveSource

    script = "import sys; sys.stderr.write('clustertop: record is not available yet\\n'); sys.exit(2)"
    with pytest.raises(UserError, match="^record is not available yet$"):
        LiveSource("x", command=[sys.executable, "-c", script])


def test_index_keeps_keyframes_parsed_and_packs_large_ones() -> None:
    """A keyframe is parsed once: its runs are numpy arrays (whole numbers in the smallest dtype); large
    arrays that pack (the counts of a cluster whose GPUs all differ) are zlib-packed; the state folded from it
    is the sample's."""
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.keyframe import Keyframe

    rng = np.random.default_rng(1)
    for util in (np.full(16384, 50), rng.integers(0, 101, 16384)):
        event = {**sample(3.0, 0), "util": schema.rle_encode(util)}
        keyframe = Keyframe(event)
        runs = keyframe.event()["util"]
        assert runs["v"].dtype == np.uint8 and runs["v"].tolist() == event["util"]["v"]
        assert runs["n"].tolist() == event["util"]["n"]
        runs_of = keyframe.parts["util"]
        assert runs_of.n.packed == (len(event["util"]["n"]) > 1024)        # 16K counts of 1: packed
        assert not runs_of.v.packed                                          # one run, or noise: not worth it
        direct, kept = ClusterState(header()), ClusterState(header())
        direct.apply(event)
        kept.apply(keyframe.event())
        assert np.array_equal(direct.util, kept.util)
        assert np.array_equal(direct.links["core"], kept.links["core"])
        gpus = [0, 7, 16383]
        assert keyframe.util_of(gpus, 16384) == [float(direct.util[g]) for g in gpus]


@pytest.mark.parametrize("topology,run", [(SITE, 32768), ({**FLAGSHIP, "gpus": 512}, 128)])
def test_a_keyframes_narrow_counts_decode_to_the_sample(topology: dict[str, int], run: int) -> None:
    """A site of symmetric jobs: a few runs, each under 65,536 GPUs (uint16 in the keyframe), summing to
    524,288 (or 4 runs of 128 GPUs, uint8, on 512): summed in their own dtype the counts wrapped around, the
    runs were refused as malformed and a seek showed every GPU idle (defect)."""
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.keyframe import Keyframe

    gpus = topology["gpus"]
    util = np.repeat(np.arange(gpus // run) % 100, run)
    event = {**sample(3.0, 0, gpus=gpus), "util": schema.rle_encode(util)}
    runs = Keyframe(event).event()["util"]
    assert runs["n"].dtype.itemsize < 4 and int(runs["n"].sum(dtype=np.int64)) == gpus   # narrow, as kept
    direct, kept = ClusterState(header(topology)), ClusterState(header(topology))
    direct.apply(event)
    kept.apply(Keyframe(event).event())
    assert np.array_equal(kept.util, direct.util)
    assert kept.util[gpus - 1] == pytest.approx((gpus // run - 1) % 100 / 100)


def _many_jobs_sample(jobs: int, gpus: int) -> bytes:
    """A sample line as an engine writes it for `jobs` jobs: each job's status (figures that differ from job
    to job) and its rows of the phase mix."""
    rng = np.random.default_rng(2)

    def status() -> dict[str, object]:
        return {"running": True, "step": int(rng.integers(900)), "tokens_total": int(rng.integers(1 << 40)),
                "step_time_s": round(float(rng.uniform(1, 2)), 4), "tokens": 262144,
                "tokens_per_s": round(float(rng.uniform(1e5, 3e5)), 1),
                "tflops_per_gpu": round(float(rng.uniform(300, 330)), 2),
                "mfu": round(float(rng.uniform(0.3, 0.34)), 6), "effective_training_time": 0.9974,
                "interruptions": 0, "tokens_lost": 0}

    statuses = {f"train-{i:03d}": status() for i in range(jobs)}
    mix = {"phases": ["idle", "compute", "tp", "dp", "optimizer"],
           "shares": [[0, 60 + k, 35 - k, 4, 1] for k in range(5)] + [[100, 0, 0, 0, 0]],
           "jobs": {name: [int(rng.integers(0, 5))] for name in statuses}, "other": 5}
    return orjson.dumps({**sample(3.0, 50, gpus=gpus), "links": {"spine": 0.5, "core": [0.25, 0.75]},
                         "phase_mix": mix, "jobs": statuses, "over_budget": False})


def _held(make: Callable[[], object]) -> int:
    """Bytes still allocated after `make()` (its result kept, its temporaries gone), by tracemalloc."""
    import gc
    import tracemalloc

    make()                     # once first: one-time allocations (caches, lazy imports) are not its own
    gc.collect()
    tracemalloc.start()
    try:
        kept = make()
        gc.collect()
        held: int = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return held


def test_keyframe_of_many_jobs_is_small_and_gives_the_sample_back() -> None:
    """The index keeps thousands of keyframes: 256 jobs' statuses and a phase mix are kept as one zlib-packed
    JSON blob (a tenth of them as parsed objects, or less), and `event()` gives the sample back exactly."""
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.keyframe import APART, Keyframe

    line = _many_jobs_sample(256, 8192)
    as_parsed = _held(lambda: orjson.loads(line))
    as_kept = _held(lambda: Keyframe(orjson.loads(line)))     # the reader's event dropped: the index's part
    assert as_parsed > 150_000 and as_kept < as_parsed / 10, (as_parsed, as_kept)
    keyframe = Keyframe(orjson.loads(line))
    assert type(keyframe.rest) is bytes and len(keyframe.rest) < len(line) / 4

    event, back = orjson.loads(line), keyframe.event()
    assert back.keys() == event.keys()
    rest = {key: value for key, value in event.items() if key not in APART}
    assert rest.keys() >= {"jobs", "phase_mix", "site_mw"}
    assert {key: value for key, value in back.items() if key not in APART} == rest
    for key in ("util", "power_w", "phase"):
        assert {half: values.tolist() for half, values in back[key].items()} == event[key]
    assert {tier: load.tolist() for tier, load in back["links"].items()} == {"spine": [0.5],
                                                                             "core": [0.25, 0.75]}
    assert back["jobs"] is not keyframe.event()["jobs"]             # parsed anew: the state may keep it

    topology = {"gpus": 8192, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 8192,
                "gpus_per_building": 8192}
    h = {**header(topology), "jobs": [{"name": f"train-{i:03d}", "first_gpu": 32 * i, "gpus": 32, "tp": 8,
                                       "cp": 1, "pp": 1, "dp": 4, "ep": 1} for i in range(256)]}
    direct, kept = ClusterState(h), ClusterState(h)
    direct.apply(event)
    kept.apply(back)
    assert np.array_equal(direct.mix.per_gpu(0, 8192), kept.mix.per_gpu(0, 8192))
    assert kept.mix.rows is not None and len(set(kept.mix.rows.tolist())) > 1      # the jobs' rows, decoded
    figures = [(name, job.step, job.mfu, job.tokens) for name, job in direct.jobs.items()]
    assert figures == [(name, job.step, job.mfu, job.tokens) for name, job in kept.jobs.items()]


def test_keyframe_keeps_a_sample_with_no_json_form_as_it_is() -> None:
    """An event made in memory (a numpy figure, a key that is not a string) has no JSON form: the rest of it
    is kept as it came rather than failing."""
    from clustertop.tui.keyframe import Keyframe

    event = {**sample(1.0, 50, gpus=64), "site_mw": np.float64(20.5), "jobs": {1: {"step": 3}}}
    back = Keyframe(event).event()
    assert back["site_mw"] == 20.5 and back["jobs"] == {1: {"step": 3}}


@pytest.mark.parametrize("mix", [
    ["x"], {"phases": ["compute"], "shares": [[100]], "jobs": ["train"]},          # jobs: a list
    {"phases": ["compute"], "shares": [[100]], "jobs": {"train": [2 ** 64 - 1]}},  # a row beyond int32
    {"phases": ["compute"], "shares": [[100]], "other": 1e300},
    {"phases": ["nope"], "shares": [["x"]], "jobs": {"train": [7]}, "other": -1,
     "gpus": {"at": [10 ** 9], "n": [1], "v": [0]}}])
def test_a_hostile_phase_mix_in_a_keyframe_shows_the_dominant_phase(mix: object) -> None:
    """The reader does not check a sample's phase mix: whatever it holds, the state folded from the keyframe
    shows each GPU all in its dominant phase rather than stopping the dashboard."""
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.keyframe import Keyframe

    state = ClusterState(header({"gpus": 64, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 64,
                                 "gpus_per_building": 64}))
    state.apply(Keyframe(orjson.loads(orjson.dumps({**sample(1.0, 50, gpus=64), "phase_mix": mix}))).event())
    shares = state.mix.per_gpu(0, 64)
    assert np.array_equal(shares.argmax(axis=1), state.phase) and np.allclose(shares.sum(axis=1), 1.0)


def test_unknown_phase_codes_show_as_idle() -> None:
    from clustertop.tui.palette import known_phases

    codes = np.array([1, 42, 10], dtype=np.uint8)      # 42: a phase a newer engine appended
    assert known_phases(codes).tolist() == [1, CODE["idle"], 10]
    lay = layout(Geometry.from_summary(FLAGSHIP), View("site"), 146, 50)
    phases = np.full(16384, 42, dtype=np.uint8)
    assert set(lay.phase(known_phases(phases)).tolist()) == {CODE["idle"]}


def test_issue_6_events_name_component_and_cause() -> None:
    from clustertop.tui.widgets.event_log import describe

    assert describe({"t": 1, "type": "maintenance", "job": "a", "component": "job", "cause": "planned",
                     "duration_s": 1200}) == "maintenance planned · [job] · for 1,200 s"
    assert describe({"t": 1, "type": "fault", "cause": "Network switch/cable", "component": "switch",
                     "switch": "leaf 3"}) == "FAULT Network switch/cable · [switch] · switch\u00a0leaf 3"


def test_live_mode_starts_the_engine_under_control() -> None:
    from clustertop.tui.sources.live import record_command

    assert record_command("llama3-405b-16k")[-1] == "--control"


def test_inference_jobs_show_throughput_and_latency_not_mfu() -> None:
    from clustertop.engine.stream.state import ClusterState
    from clustertop.tui.widgets.jobs import figures

    h = header({"gpus": 64, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 64,
                "gpus_per_building": 64})
    h["jobs"] = [{"name": "chat", "kind": "inference", "first_gpu": 0, "gpus": 64, "tp": 4, "dp": 16}]
    state = ClusterState(h)
    state.apply({"t": 0.0, "type": "job_start", "job": "chat"})
    shown = figures(state.jobs["chat"], state, 0.0)
    assert "MFU" not in shown and shown["TTFT"] == "—" and shown["TPOT"] == "—"   # nothing yet: degrades
    state.apply({"t": 1.0, "type": "step", "job": "chat", "step": 1, "tokens_per_s": 51200.0,
                 "ttft_s": 0.182, "tpot_s": 0.021, "tokens_total": 51200, "requests_per_s": 40.0})
    shown = figures(state.jobs["chat"], state, 1.0)
    assert shown["tokens/s"] == "51.2k" and shown["TTFT"] == "182 ms" and shown["TPOT"] == "21 ms"
    assert shown["requests/s"] == "40.0" and "MFU" not in shown and "TFLOP/s/GPU" not in shown
    state.apply({"t": 2.0, "type": "step", "job": "chat", "tokens_per_s": 50000.0, "ttft_s": float("nan")})
    assert figures(state.jobs["chat"], state, 2.0)["TTFT"] == "—"


def test_power_panel_shows_the_site_budget_and_when_it_is_exceeded() -> None:
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.power import power_text

    h = header()
    h["scenario"] = {"name": "test", "cluster": {"site_power_budget_mw": 24.0}}
    state = DisplayState(h)
    state.apply({**sample(1.0, 50, mw=20.0), "over_budget": False})
    text = power_text(state, 40).plain
    assert "budget 24.00 MW" in text and "83.3%" in text and "OVER" not in text
    state.apply({**sample(2.0, 90, mw=24.8), "over_budget": True})
    assert "103.3%  OVER BUDGET" in power_text(state, 40).plain
    assert "budget" not in power_text(DisplayState(header()), 40).plain    # no budget set: no line


def test_power_panel_gives_the_mean_power_of_the_gpus_that_report_it() -> None:
    """W/GPU is the mean over the GPUs with a power reading: every GPU in a simulated run (the GPUs' total
    over their count, from the one sum both figures need), those that reported in real telemetry."""
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.power import power_text

    state = DisplayState(header())
    event = sample(1.0, 50)
    power = np.r_[np.full(8192, 400), np.full(8192, 601)]
    event["power_w"] = schema.rle_encode(power)
    state.apply(event)
    means = []
    mean = state.mean
    state.mean = lambda *a, **k: means.append(a) or mean(*a, **k)       # type: ignore[method-assign]
    assert "GPUs 8.20 MW · 500 W/GPU" in power_text(state, 40).plain and not means
    unread = schema.rle_encode(np.r_[np.zeros(8192), np.ones(8192)])        # the 601 W half: no reading
    state.apply({**event, "t": 2.0, "missing": {"power_w": unread}})
    assert "· 400 W/GPU" in power_text(state, 40).plain and means


def test_compare_gives_no_tokens_per_mw_for_a_run_that_reports_no_tokens() -> None:
    from clustertop.tui.widgets.comparison import FIGURES

    per_mw = next(f for name, f, _, _ in FIGURES if name == "tokens/s per MW")

    class Real:                          # a real cluster's telemetry: power, but no job reports tokens
        def __init__(self) -> None:
            self.jobs: dict[str, object] = {}
            self.site_mw = 12.5

    assert per_mw(Real()) is None        # shown "—", not "0"


def test_the_phase_legend_counts_gpus_without_data_as_no_data_not_idle() -> None:
    from clustertop.engine.config.phases import PHASES
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.legend import Legend

    state = DisplayState(header())
    half = np.zeros(16384, dtype=bool)
    half[:8192] = True                    # half the GPUs reported nothing (real telemetry writes them idle)
    state.apply({**sample(1.0, 0), "phase": schema.rle_encode(np.full(16384, PHASES.index("idle"))),
                 "missing": {"util": schema.rle_encode(half)}})
    legend = Legend()
    legend.update = lambda content: None  # type: ignore[method-assign]   # no app: the text alone
    legend.show(state, "phase", 0, 16384, 1)
    shown = str(legend._shown)
    assert "idle 50%" in shown and "no data 8,192 GPUs" in shown
