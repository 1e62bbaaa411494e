"""The reader: every source, bad recordings named by line, the lazy state, and seeking by keyframes."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.sim.run import Run
from clustertop.engine.stream import recorder
from clustertop.engine.stream.reader import Reader, fold, iter_events, iter_lines_events
from clustertop.engine.stream.recorder import Recorder
from clustertop.engine.stream.state import ClusterState
from clustertop.tui.index import EventIndex

RECORDINGS = Path(__file__).parent.parent / "recordings"


def record(run: Run, path: Path) -> Path:
    """The run recorded to `path` (gzip when it ends in .gz)."""
    sink = Recorder(open(path, "wb"), compress=str(path).endswith(".gz"))  # noqa: SIM115
    run.run(sink)
    sink.close()
    return path


@pytest.fixture
def recording(tmp_path: Path, scenario_file: Any, planner: Any) -> Path:
    run = Run(scenario.load(scenario_file()), planner=planner, duration_s=30.0, sample_s=0.25)
    return record(run, tmp_path / "r.jsonl")


def same_state(a: ClusterState, b: ClusterState) -> None:
    assert a.t == b.t
    assert np.array_equal(a.util, b.util) and np.array_equal(a.power_w, b.power_w)
    assert np.array_equal(a.phase, b.phase) and a.site_mw == b.site_mw
    for name, job in a.jobs.items():
        other = b.jobs[name]
        assert ((job.running, job.step, job.tokens, job.mfu)
                == (other.running, other.step, other.tokens, other.mfu))
    assert {k: v.tolist() for k, v in a.links.items()} == {k: v.tolist() for k, v in b.links.items()}


def test_fold_matches_event_by_event(recording: Path) -> None:
    events = list(iter_events(str(recording)))
    state = ClusterState(events[0])
    for event in events[1:]:
        state.apply(event)
    folded = fold(str(recording))
    same_state(state, folded)
    assert folded.t == 30.0 and folded.samples == 121 and folded.jobs["train"].step == int(30 // 0.7531)


def test_lazy_arrays_are_decoded_in_place(recording: Path) -> None:
    events = list(iter_events(str(recording)))
    state = ClusterState(events[0])
    util = state.util
    seen = []
    for event in events[1:]:
        state.apply(event)
        if event["type"] == "sample":
            assert state.util is util            # the same array object, refreshed when read
            seen.append(util.copy())
    assert len({a.tobytes() for a in seen}) > 10


def test_all_sources_agree(recording: Path, tmp_path: Path, scenario_file: Any, planner: Any) -> None:
    data = recording.read_bytes()
    packed = tmp_path / "r.jsonl.gz"
    packed.write_bytes(gzip.compress(data))
    expected = fold(str(recording))
    same_state(fold(str(packed)), expected)                                  # gzip by magic bytes
    same_state(fold(io.BufferedReader(io.BytesIO(data))), expected)          # a stream (stdin, a pipe)
    same_state(fold(io.BufferedReader(io.BytesIO(gzip.compress(data)))), expected)
    engine_run = Run(scenario.load(scenario_file()), planner=planner, duration_s=30.0, sample_s=0.25)
    events = list(iter_lines_events(engine_run.lines()))                    # an in-process engine
    state = ClusterState(events[0])
    for event in events[1:]:
        state.apply(event)
    same_state(state, expected)


def test_stdin_pipe(recording: Path) -> None:
    code = ("import sys\nfrom clustertop.engine.stream.reader import fold\ns = fold('-')\n"
            "print(s.t, s.samples, s.jobs['train'].step)")
    done = subprocess.run([sys.executable, "-c", code], input=gzip.compress(recording.read_bytes()),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"30.0", b"121", str(int(30 // 0.7531)).encode()]


def test_corrupt_middle_line_names_it(recording: Path, tmp_path: Path, fake_cli: Any) -> None:
    lines = recording.read_bytes().split(b"\n")
    lines[9] = lines[9][: len(lines[9]) // 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(UserError, match=r"bad\.jsonl:10: line is not valid JSON"):
        fold(str(bad))
    with pytest.raises(UserError, match=r":10: "):
        list(iter_events(str(bad)))
    done = fake_cli("export", str(bad), "-o", str(tmp_path / "t.json"))
    assert done.returncode == 2 and b"bad.jsonl:10:" in done.stderr and b"Traceback" not in done.stderr
    assert done.stderr.count(b"\n") == 1 and not (tmp_path / "t.json").exists()


def test_bad_events_are_named(recording: Path, tmp_path: Path) -> None:
    lines = recording.read_bytes().split(b"\n")
    cases = {b'{"type": "sample"}': "expected an event object", b"[1, 2]": "expected an event object",
             b'{"t": 0.1, "type": "step", "job": "train"}': "time goes backwards",
             b'{"t": 99, "type": "sample", "util": 5}': "util: expected a run-length array"}
    for line, message in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(b"\n".join(lines[:20] + [line] + lines[20:]))
        with pytest.raises(UserError, match=f"bad.jsonl:21: {message}"):
            fold(str(bad))


def test_newer_schema_version_is_refused(recording: Path, tmp_path: Path) -> None:
    lines = recording.read_bytes().split(b"\n")
    header = orjson.loads(lines[0])
    header["schema_version"] = 2
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"\n".join([orjson.dumps(header)] + lines[1:]))
    with pytest.raises(UserError, match="schema_version 2, newer than this clustertop understands"):
        fold(str(newer))


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"), (b"hello\n", "line 1 is not JSON"),
    (b'{"t": 0, "type": "sample"}\n', "line 1 must be the header"),
    (b"\x1f\x8b\x08garbage-garbage", "corrupt compressed data"),
])
def test_not_a_recording(content: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        fold(str(path))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        fold(str(tmp_path / "none.jsonl"))
    with pytest.raises(UserError, match="is a directory"):
        fold(str(tmp_path))


def test_truncated_last_line_warns_and_keeps_the_prefix(recording: Path, tmp_path: Path) -> None:
    data = recording.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:-100])
    total = data.count(b"\n")
    warnings: list[str] = []
    state = fold(str(cut), warn=warnings.append)
    assert warnings == [f"{cut}:{total}: last line is truncated; using the {total - 1} complete lines"]
    assert state.samples == 120
    unterminated = tmp_path / "noeol.jsonl"                 # a complete last line without its newline is fine
    unterminated.write_bytes(data[:-1])
    warnings.clear()
    same_state(fold(str(unterminated), warn=warnings.append), fold(str(recording)))
    assert warnings == []


def test_gzip_cut_short_warns(recording: Path, tmp_path: Path) -> None:
    packed = gzip.compress(recording.read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    warnings: list[str] = []
    state = fold(str(cut), warn=warnings.append)
    assert any("ends early" in w for w in warnings)
    assert 0 < state.samples < 121


# ----- seeking ----------------------------------------------------------------------------------------------


@pytest.fixture(params=[".jsonl", ".jsonl.gz"])
def long_recording(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   scenario_file: Any, texts: Any, planner: Any) -> Path:
    monkeypatch.setattr(recorder, "MEMBER_BYTES", 32 << 10)     # many gzip members in a short recording
    run = Run(scenario.load(scenario_file(texts.mixed)), planner=planner, duration_s=400.0, sample_s=0.5)
    return record(run, tmp_path / f"long{request.param}")


def test_index_has_every_keyframe(long_recording: Path) -> None:
    index = EventIndex.of_file(str(long_recording))
    times = index.sample_t
    assert times == sorted(times) and len(times) == 801 and times[0] == 0.0 and times[-1] == 400.0
    assert index.done and index.end_t == 400.0


def test_seek_lands_on_the_state_a_fold_gives(long_recording: Path) -> None:
    index = EventIndex.of_file(str(long_recording))
    for t in (0.0, 0.3, 17.77, 123.5, 250.0, 399.9, 400.0, 1e9):
        expected = fold(str(long_recording), until=t)
        got = index.state_at(t)
        same_state(got, expected)
        assert got.t <= t


def test_reader_closes_its_file(recording: Path) -> None:
    reader = Reader(str(recording))
    assert sum(1 for _ in reader.events()) > 0
    assert reader.raw.closed


def test_no_corruption_gives_a_traceback(recording: Path, tmp_path: Path) -> None:
    """Random damage to a recording ends in a result (maybe with warnings) or a one-line UserError."""
    from clustertop.engine.stream import perfetto

    rng = np.random.default_rng(5)
    data = recording.read_bytes()[:60_000]
    packed = gzip.compress(data)
    bad = tmp_path / "bad.jsonl"
    for trial in range(150):
        base = bytearray(packed if trial % 3 == 0 else data)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, len(base)))
            action = rng.integers(0, 3)
            if action == 0:
                base[pos] = int(rng.integers(0, 256))
            elif action == 1:
                del base[pos:pos + int(rng.integers(1, 50))]
            else:
                base[pos:pos] = rng.choice([b'"t":-1,', b"[]", b"null", b'{"v":[1],"n":[2]}', b"\n{}\n",
                                            b"9e999"])
        bad.write_bytes(bytes(base))
        for action in (lambda: fold(str(bad), warn=lambda m: None),
                       lambda: perfetto.export(str(bad), str(tmp_path / "t.json"), warn=lambda m: None)):
            try:
                state = action()
                if isinstance(state, ClusterState):
                    _ = (state.util, state.power_w, state.phase)
            except UserError as exc:
                assert "\n" not in str(exc)


def _read_lines(lines: list[bytes], gpus: int = 8) -> list[dict[str, Any]] | str:
    """The events a reader takes from a header and `lines`, or its error."""
    header = {"type": "header", "schema": "clustertop.events", "schema_version": 1,
              "topology": {"gpus": gpus}, "jobs": []}
    try:
        return list(Reader(io.BytesIO(b"\n".join([orjson.dumps(header), *lines]) + b"\n")).events())
    except UserError as exc:
        return str(exc)


STEP = b'{"t":1.0,"type":"step","job":"%s","step":%s,"step_time_s":0.5,"tokens":1024,"mfu":0.3}'


@pytest.mark.parametrize(("good", "bad"), [
    (STEP % (b"\\u0041", b"3"), STEP % (b"\\u0007", b"3")),      # escapes: one shape; \x07 is not plain text
    (STEP % (b"a", b"-0"), STEP % (b"a", b"-5")),                  # the int -0 passes a count; -5 does not
    (STEP % (b"a", b"10000000000000000000"), STEP % (b"a", b"99999999999999999999")),   # past 2^64: a float
    (b'{"t":1,"type":"sample","util":{"v":[1],"n":[8]}}',
     b'{"t":1,"type":"sample","util":{"v":[1],"n":[9]}}'),
    (b'{"t":1,"type":"sample","phase":{"v":[100],"n":[8]}}',
     b'{"t":1,"type":"sample","phase":{"v":[300],"n":[8]}}'),
    (STEP % (b"a", b"3"), STEP.replace(b"1.0", b"0.5") % (b"a", b"3")),    # time goes backwards
])
def test_a_line_of_a_known_shape_is_still_refused_when_digits_break_a_check(good: bytes, bad: bytes) -> None:
    """The reader passes a line whose shape (digits made 0) it has checked on its time alone: never a line the
    full walk refuses."""
    from clustertop.engine.stream.checks import EventChecks

    checks = EventChecks({"topology": {"gpus": 8}})
    assert checks.problem(orjson.loads(good)) is None
    assert isinstance(_read_lines([good, good]), list)
    error = _read_lines([good, bad])
    assert isinstance(error, str) and ":3: " in error, error


def test_the_shape_fast_path_agrees_with_the_full_check_on_every_digit() -> None:
    """The discrete events of the committed recordings with random digits (1-9 for 1-9): the reader takes
    such a line after one of its shape exactly when the full walk of engine/stream/checks.py passes it (and
    its time does not go back)."""
    from clustertop.engine.stream.checks import SHAPE, EventChecks

    rng = np.random.default_rng(7)
    tried = 0
    for path in sorted(RECORDINGS.glob("*.jsonl.gz")):
        reader = Reader(str(path))
        header, checks = reader.header, EventChecks(reader.header)
        for line in [orjson.dumps(e) for e in reader.events() if e["type"] != "sample"]:
            for _ in range(40):
                mutated = bytes(b if not 49 <= b <= 57 else rng.integers(49, 58) for b in line)  # no 0 made
                assert mutated.translate(SHAPE) == line.translate(SHAPE)
                event = orjson.loads(mutated)
                fine = checks.problem(event) is None and event["t"] >= orjson.loads(line)["t"]
                stream = b"\n".join([orjson.dumps(header), line, mutated]) + b"\n"
                try:
                    taken = len(list(Reader(io.BytesIO(stream)).events())) == 2
                except UserError:
                    taken = False
                assert taken == fine, mutated
                tried += 1
    assert tried > 500




# ----- a fold passes over what it does not keep (engine/stream/skipping.py) --------------------------------


def _fold_outcome(stream: bytes, by_events: bool = False) -> Any:
    """What folding a stream gives: its error, or the state's time and every job field."""
    try:
        reader = Reader(io.BytesIO(stream))
        if by_events:
            state = ClusterState(reader.header)
            state.fold(reader.events())
        else:
            state = reader.fold()
    except UserError as exc:
        return str(exc)
    jobs = {name: {key: getattr(job, key) for key in job.__slots__} for name, job in state.jobs.items()}
    return state.t, type(state.t), state.samples, state.version, jobs


def test_fold_parses_only_the_lines_it_keeps(tmp_path: Path, scenario_file: Any, texts: Any, planner: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the steps between two samples only each job's last is parsed, and the state is the one every event
    folded gives."""
    run = Run(scenario.load(scenario_file(texts.mixed)), planner=planner, duration_s=300.0, sample_s=30.0)
    data = record(run, tmp_path / "r.jsonl").read_bytes()
    lines = data.count(b"\n")
    assert data.count(b'"type":"step"') > 4 * data.count(b'"type":"sample"')
    expected = _fold_outcome(data, by_events=True)
    parsed = 0
    real = orjson.loads

    def loads(line: bytes) -> Any:
        nonlocal parsed
        parsed += 1
        return real(line)

    monkeypatch.setattr(orjson, "loads", loads)
    assert _fold_outcome(data) == expected
    assert parsed < lines / 3, (parsed, lines)


STEP_OF = b'{"t":%s,"type":"step","job":"train","step":%s,"step_time_s":0.75,"tokens":1024,"mfu":0.3}'
SWING_AT = b'{"t":%s,"type":"power_swing","from_mw":12.5,"to_mw":%s,"delta_mw":-1.25,"over_budget":false}'


def _stream(lines: list[bytes]) -> bytes:
    header = {"type": "header", "schema": "clustertop.events", "schema_version": 1,
              "topology": {"gpus": 8}, "jobs": [{"name": "train", "first_gpu": 0, "gpus": 8}]}
    return b"\n".join([orjson.dumps(header), *lines]) + b"\n"


@pytest.mark.parametrize("last", [
    STEP_OF % (b"13.5", b"12"),                    # a step
    SWING_AT % (b"13.5", b"11.25"),                # an event the state has no use for: its time is the fold's
    SWING_AT % (b"14", b"11.25"),                  # an int time stays an int
    STEP_OF % (b"13.25", b"12"),                   # time goes backwards, by the bytes of the same layout
    STEP_OF % (b"9.75", b"12"),                    # of another layout
    STEP_OF % (b"13.5", b"012"),                   # a leading zero
    STEP_OF % (b"013.5", b"12"),
    STEP_OF % (b"13.5", b"1e3"),                   # another shape
])
def test_a_fold_ends_as_every_event_folded_does(last: bytes) -> None:
    lines = [STEP_OF % (b"%d.5" % t, b"%d" % t) for t in range(10, 13)]
    lines += [SWING_AT % (b"13.25", b"10.5"), SWING_AT % (b"13.25", b"10.5"), STEP_OF % (b"13.5", b"11")]
    stream = _stream([*lines, last])
    assert _fold_outcome(stream) == _fold_outcome(stream, by_events=True)


def test_a_fold_agrees_with_the_full_check_on_every_digit() -> None:
    """Lines passed over unparsed, with random digits (0 too: leading zeros, times going back): a fold refuses
    exactly what reading every event refuses, with the same words, else ends in the same state."""
    rng = np.random.default_rng(11)
    good = [STEP_OF % (b"10.5", b"10"), SWING_AT % (b"10.5", b"10.25"), STEP_OF % (b"10.75", b"11"),
            STEP_OF % (b"11.5", b"12"), SWING_AT % (b"11.5", b"11.25"), STEP_OF % (b"11.75", b"13")]
    outcomes = set()
    for _ in range(400):
        line = good[int(rng.integers(3, len(good)))]
        mutated = bytes(b if not 48 <= b <= 57 or rng.random() < 0.7 else int(rng.integers(48, 58))
                        for b in line)
        stream = _stream([*good, mutated, STEP_OF % (b"99.5", b"14")])
        expected = _fold_outcome(stream, by_events=True)
        assert _fold_outcome(stream) == expected, mutated
        outcomes.add(isinstance(expected, str) and expected.split(": ", 1)[1][:20])
    assert {False, "time goes backwards ", "line is not valid JS"} <= outcomes, outcomes


def test_a_display_state_folded_from_a_file_logs_every_event() -> None:
    """The dashboard's state keeps the discrete events the plain state has no use for (power swings)."""
    from clustertop.tui.display import DisplayState

    stream = _stream([line for t in range(10, 20) for line in (STEP_OF % (b"%d.5" % t, b"%d" % t),
                                                                SWING_AT % (b"%d.75" % t, b"10.5"))])
    reader = Reader(io.BytesIO(stream))
    expected = DisplayState(reader.header)
    expected.fold(reader.events())
    reader = Reader(io.BytesIO(stream))
    folded = reader.fold(DisplayState(reader.header))
    assert isinstance(folded, DisplayState) and len(folded.events) == 10
    assert list(folded.events) == list(expected.events) and folded.t == expected.t == 19.75
