"""The pieces behind the hostile corpus (tests/test_hostile.py), one by one: the bounded TOML scan, the
bounded estimate, the input and output openers, the escaping of messages, the schema checks, the sweep
replay's file names, the signals and the Dask connection."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError, escape
from clustertop.engine.config.infile import open_input, read_capped
from clustertop.engine.config.outfile import open_output
from clustertop.engine.config.tomlfile import MAX_KEY_PARTS, MAX_NESTING, check_structure
from clustertop.engine.model import estimate, pipeline
from clustertop.engine.stream.checks import EventChecks, header_problem
from clustertop.engine.stream.reader import Reader
from clustertop.engine.sweep.results import read_results

REPO = Path(__file__).parent.parent
TINY = (Path(__file__).parent / "hostile" / "scenarios" / "crlf.toml").read_text().replace("\r\n", "\n")


# ---- TOML structure ----------------------------------------------------------------------------------------

def test_structure_scan_counts_what_the_parser_would_nest() -> None:
    check_structure("a = " + "[" * MAX_NESTING + "]" * MAX_NESTING + "\n", "f")
    with pytest.raises(UserError, match="f:2: arrays or inline tables nested more than 16"):
        check_structure("ok = 1\na = " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1), "f")
    parts = ".".join(["k"] * MAX_KEY_PARTS)
    check_structure(f"{parts} = 1\n[{parts}]\n", "f")
    for text in (f"{parts}.k = 1", f"[{parts}.k]", f"[[{parts}.k]]",
                 "[a.b]\n" + ".".join(["k"] * 15) + " = 1",
                 "a = {" + ".".join(["k"] * 16) + " = 1}"):
        with pytest.raises(UserError, match="more than 16 parts"):
            check_structure(text, "f")
    with pytest.raises(UserError, match="a number of 41 digits"):
        check_structure("x = " + "1" * 41, "f")
    check_structure("x = " + "1" * 40 + "\ny = 1.5e300\n", "f")


def test_texts_the_scan_passes_over_are_those_it_would_pass() -> None:
    """check_structure does not scan a text with too few brackets, dots and digits in a row to break a limit:
    random texts give what the scan gives (a comment of brackets at the end makes it scan, changing nothing
    else)."""
    import random

    rng = random.Random(26)
    tokens = ["[", "]", "{", "}", ".", "k", " = ", "\n", ",", "1", "1" * 20, "_", '"a.b"', "# [.", "x.y"]
    skipped = 0
    for _ in range(3000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(1, 40)))
        outcomes = []
        for candidate in (text, text + "\n#" + "[{" * MAX_NESTING):
            try:
                check_structure(candidate, "f")
                outcomes.append("passed")
            except UserError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], text
        skipped += outcomes[0] == "passed"
    assert skipped > 1000


def test_structure_scan_skips_strings_and_comments() -> None:
    text = ('a = "[[[[[[[[[[[[[[[[[[[[[[[[.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a"  # [[[[[[[[[[[[[[[[[[[[[\n'
            "b = '{{{{{{{{{{{{{{{{{{{{{{{{{{{{{'\n"
            'c = """\n[[[[[[[[[[[[[[[[[[[[[[[[[\n""\\" """\n'
            "d = '''\n{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n'''\n"
            '"x.y.z.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a" = 1\n'
            "f = [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5, "
            "17.5]\n")
    check_structure(text, "f")


def test_every_shipped_toml_passes_the_scan() -> None:
    files = [*REPO.glob("scenarios/*.toml"), *REPO.glob("recordings/*.toml"),
             *REPO.glob("engine/config/catalogs/*.toml")]
    assert len(files) >= 25
    for path in files:
        check_structure(path.read_text(), str(path))


# ---- the estimate's cost is bounded in the microbatches ----------------------------------------------------

def _walk(schedule: str, p: int, v: int, m: int, chunk_bytes: np.ndarray) -> list[float]:
    """The peak over the whole schedule, operation by operation (what peak_inflight did for every m)."""
    out = []
    for r in range(p):
        kind, chunk, _ = pipeline._operations(schedule, p, v, m, r)
        held = np.cumsum(np.where(kind == 1, -chunk_bytes[r][chunk], chunk_bytes[r][chunk]))
        out.append(max(float(held.max()), 0.0))
    return out


@pytest.mark.parametrize(("schedule", "p", "v", "m"), [
    ("1f1b", 1, 1, 300), ("1f1b", 4, 1, 257), ("1f1b", 16, 1, 1000), ("1f1b", 70, 1, 700),
    ("1f1b", 4, 2, 400), ("1f1b", 8, 4, 1024), ("1f1b", 5, 3, 1005), ("1f1b", 100, 2, 1200),
    ("1f1b", 300, 2, 1500), ("gpipe", 1, 1, 300), ("gpipe", 8, 1, 999)])
def test_peak_inflight_past_the_steady_state_is_the_walk(schedule: str, p: int, v: int, m: int) -> None:
    chunk_bytes = np.random.default_rng(p * v + m).uniform(1e8, 1e9, size=(p, v)).round()
    assert pipeline.peak_inflight(schedule, p, v, m, chunk_bytes) == pytest.approx(
        _walk(schedule, p, v, m, chunk_bytes), rel=1e-12)


def test_huge_batch_estimates_and_huge_pipelines_are_refused_with_their_size(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text(TINY.replace("global_batch = 16", "global_batch = 100000000\npp = 2"))
    est = estimate.estimate(scenario.load(str(path)), plan=False, hints=False)
    assert est.jobs[0].microbatches == 100_000_000 and est.jobs[0].fits
    path.write_text('name = "x"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 16384\n[[jobs]]\nseq_len = 4096\n'
                    "pp = 16384\nglobal_batch = 256\n[jobs.model]\nlayers = 100000\nhidden = 8192\n"
                    "heads = 64\nffn = 28672\nvocab = 128000\n")
    with pytest.raises(UserError, match=r"jobs\[0\]\.pp: .* needs 8,388,608 operations simulated, "
                                        r"3\.52 GiB of schedule arrays; expected at most 1,048,576"):
        estimate.estimate(scenario.load(str(path)))


# ---- input and output files --------------------------------------------------------------------------------

def test_inputs_must_be_regular_files_and_are_capped_by_what_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((str(fifo), r"a FIFO \(named pipe\)"), ("/dev/zero", "a character device"),
                       (str(tmp_path), "a directory")):
        with pytest.raises(UserError, match=f"is {kind}; expected a thing"):
            open_input(path, "a thing")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    assert read_capped(str(big), 101, "a thing") == b"x" * 101
    with pytest.raises(UserError, match="larger than 100 bytes"):
        read_capped(str(big), 100, "a thing")


def test_outputs_write_through_and_never_replace(tmp_path: Path) -> None:
    target, link = tmp_path / "target", tmp_path / "link"
    target.write_text("old")
    link.symlink_to(target)
    out = open_output(str(link), atomic=True)
    out.write(b"new")
    out.close()
    assert link.is_symlink() and target.read_text() == "new"
    fresh = open_output(str(tmp_path / "fresh.json"), atomic=True)
    fresh.write(b"partial")
    fresh.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]      # no temporary file left
    fifo = tmp_path / "nobody-reads"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="FIFO that nobody reads"):
        open_output(str(fifo))
    full = open_output("/dev/full")
    with pytest.raises(UserError, match="/dev/full: cannot write: No space left on device"):
        full.write(b"x" * 100_000)
        full.close()


# ---- messages ----------------------------------------------------------------------------------------------

def test_messages_escape_what_they_echo() -> None:
    error = UserError("unknown key 'a\nclustertop: all good\x1b[2J'", "evil\u202e.toml")
    assert str(error) == "evil\\u202e.toml: unknown key 'a\\nclustertop: all good\\x1b[2J'"
    assert escape("plain: ünïcödé 🚀 text") == "plain: ünïcödé 🚀 text"


# ---- the stream's schema -----------------------------------------------------------------------------------

def test_every_committed_recording_passes_the_schema() -> None:
    for path in REPO.glob("recordings/*.jsonl.gz"):
        reader = Reader(str(path))
        assert header_problem(reader.header) is None
        assert sum(1 for _ in reader.events()) > 100


def test_unknown_types_and_keys_pass_known_fields_are_checked() -> None:
    header = Reader(str(REPO / "recordings" / "flagship-8k.jsonl.gz")).header
    checks = EventChecks(header)
    gpus = header["topology"]["gpus"]
    assert checks.problem({"t": 1.0, "type": "something_new", "x": [1, {"y": None}]}) is None
    assert checks.problem({"t": 1.0, "type": "sample", "phase_share": [[0.1, 0.9]] * 3}) is None
    assert checks.problem({"t": 1.0, "type": "sample", "util": {"v": [1, 2], "n": [gpus - 1, 1]}}) is None
    assert "cover" in checks.problem({"t": 1.0, "type": "sample", "util": {"v": [1], "n": [gpus + 1]}})
    assert "step_time_s" in checks.problem({"t": 1.0, "type": "step", "job": "pretrain", "step_time_s": "x"})
    assert "job" in checks.problem({"t": 1.0, "type": "fault", "job": []})
    assert "t" in checks.problem({"t": True, "type": "x"})


# ---- replaying a sweep never builds a path from the file ---------------------------------------------------

def test_sweep_point_file_names_do_not_come_from_the_record(tmp_path: Path) -> None:
    from clustertop.commands.replay import point_toml

    base = tmp_path / "base.toml"
    base.write_text(TINY.replace('name = "tiny"', 'name = "../../../../../../tmp/escaped"'))
    inside = tmp_path / "points"
    inside.mkdir()
    record = {"index": 3, "point": {"jobs[0].tp": 4}, "scenario": str(base)}
    written = Path(point_toml(record, str(inside)))
    assert written.parent == inside and written.read_text().count("tp = 4") == 1
    assert not Path("/tmp/escaped-point-3.toml").exists()


# ---- signals -----------------------------------------------------------------------------------------------

def test_ctrl_c_during_the_imports_is_quiet() -> None:
    code = ("import sys; sys.argv = ['clustertop']; import clustertop, os, signal; "
            "os.kill(os.getpid(), signal.SIGINT); import clustertop.cli")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert done.returncode == 130 and done.stderr == b""


def test_sigterm_sigint_and_sigkill_end_a_sweep_quietly(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "clustertop", "sweep", "llama3-405b-16k", "--workers", "2",
            "--vary", "jobs[0].tp=1,2,4,8", "--vary", "jobs[0].pp=1,2,3,4,6,7,8,9,14,16,18,21",
            "--vary", "jobs[0].micro_batch=1,2", "--vary", "jobs[0].recompute=none,selective,full",
            "--vary", "jobs[0].zero=0,1,2,3", "--vary", "seed=" + ",".join(map(str, range(1, 201)))]
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -9)):
        out = tmp_path / f"{sig.name}.jsonl.gz"
        proc = subprocess.Popen([*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not out.exists() or out.stat().st_size < 2000:
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)     # the workers hold stderr too: it closes when they are gone
        assert proc.returncode == code and err == b"", err.decode()[-500:]
        assert len(read_results(str(out))) > 0        # the complete records before the signal


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_whole_process_group_ends_a_sweep_quietly(sig: signal.Signals, code: int) -> None:
    """As `kill -TERM -- -PGID`, a service manager or Ctrl-C send it: the workers get it too. Here they are
    idle (the parent waits for its output pipe to be read): multiprocessing.Pool hung on SIGTERM, a worker
    killed while it waited for a task held the task queue's lock, which Pool.terminate() takes."""
    argv = [sys.executable, "-m", "clustertop", "sweep", "llama3-405b-16k", "--workers", "2", "-o", "-",
            "--vary", "jobs[0].tp=1,2,4,8", "--vary", "jobs[0].pp=1,2,3,4,6,7,8,9,14,16,18,21",
            "--vary", "seed=" + ",".join(map(str, range(1, 21)))]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = os.read(proc.stdout.fileno(), 1)    # running (communicate reads the descriptor, not a buffer)
        time.sleep(2)                       # the pipe fills up and the workers finish what they were given
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code and err == b"", err.decode()[-500:]
    lines = (first + out).split(b"\n")[:-1]           # the complete records: every point in order from 0
    assert [json.loads(line)["index"] for line in lines] == list(range(len(lines))) and len(lines) > 30


# ---- Dask --------------------------------------------------------------------------------------------------

def test_dask_port_that_never_answers_is_one_line(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from clustertop.engine.sweep import dask_cluster

    monkeypatch.setattr(dask_cluster, "DASK_TIMEOUT_S", 1.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    accepted: list[socket.socket] = []

    def serve(reply: bytes) -> None:
        conn, _ = listener.accept()
        accepted.append(conn)
        if reply:
            conn.recv(1000)
            conn.sendall(reply)

    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    try:
        for reply in (b"", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"):
            threading.Thread(target=serve, args=(reply,), daemon=True).start()
            start = time.monotonic()
            code = main(["sweep", str(path), "--vary", "jobs[0].tp=4,8", "--dask", address])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1 and "cannot connect to the Dask scheduler" in err
            assert time.monotonic() - start < 10
    finally:
        for conn in accepted:
            conn.close()
        listener.close()


# ---- the dashboard shows what the reader accepts -----------------------------------------------------------

ACCEPTED = ["valid_crlf", "event_unknown_type", "event_extra_keys", "last_line_truncated"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_dashboard_shows_accepted_hostile_recordings(name: str, tmp_path: Path) -> None:
    """Recordings the reader accepts though an attacker wrote them (an unknown event with an escape sequence,
    extra keys, CRLF, a cut last line; a header claiming a giant cluster of one job) play in the dashboard."""
    import asyncio

    from clustertop.tui.app import ClusterTopApp
    from clustertop.tui.sources.recording import RecordingSource

    path = Path(__file__).parent / "hostile" / "recordings" / f"{name}.jsonl"

    async def play() -> str:
        app = ClusterTopApp([RecordingSource(str(path))], start_t=0.0, paused=True)
        async with app.run_test(size=(160, 50)) as pilot:
            for key in ("end", "home", "right", "right", "z", "m", "2", "3", "tab", "]"):
                await pilot.press(key)
            await pilot.pause()
            return app.screen.query_one("EventLog").content.plain if name == "event_unknown_type" else ""

    log = asyncio.run(play())
    if name == "event_unknown_type":
        assert "future_thing" in log and "\x1b" not in log and "\\x1b[2J" in log


def test_dashboard_shows_a_giant_header_with_one_small_job(tmp_path: Path) -> None:
    """A header claiming 10M GPUs, each its own node, rack, pod and building, and one job of 16: the dashboard
    draws the site at once, with the samples' figures, zooms into a building and back, and switches metric."""
    import asyncio

    from clustertop.tui.app import ClusterTopApp
    from clustertop.tui.sources.recording import RecordingSource
    from clustertop.tui.widgets.heatmap import Heatmap
    from clustertop.tui.widgets.legend import Legend
    from tui_pilot import rendered

    lines = ((Path(__file__).parent / "hostile" / "recordings" / "valid_prefix.jsonl").read_bytes()
             .split(b"\n"))
    header = json.loads(lines[0])
    header["topology"] = {"gpus": 10_000_000, "gpus_per_node": 1, "gpus_per_rack": 1, "gpus_per_pod": 1,
                          "gpus_per_building": 1}
    samples = [json.dumps({"t": float(i), "type": "sample", "util": {"v": [i], "n": [10_000_000]}}).encode()
               for i in range(3)]
    path = tmp_path / "giant.jsonl"
    path.write_bytes(b"\n".join([json.dumps(header).encode(), *samples]) + b"\n")
    seen: dict[str, object] = {}

    async def play() -> None:
        app = ClusterTopApp([RecordingSource(str(path))], start_t=0.0, paused=True)
        async with app.run_test(size=(120, 40)) as pilot:
            heatmap, legend = app.screen.query_one(Heatmap), app.screen.query_one(Legend)
            await pilot.press("end")
            await pilot.pause()
            seen["title"] = str(app.screen.query_one("#map").border_title)
            seen["legend at end"] = rendered(legend)
            await pilot.press("z")
            await pilot.pause()
            seen["zoomed"] = (heatmap.view.level, heatmap.view.index)
            await pilot.press("backspace", "m")
            await pilot.pause()
            seen["back"], seen["metric"] = heatmap.view.level, heatmap.metric
            seen["legend of power"] = rendered(legend)

    asyncio.run(play())
    assert "10,000,000 GPUs" in str(seen["title"])
    assert "mean 2%" in str(seen["legend at end"])                  # the last sample: every GPU at 2%
    assert seen["zoomed"] == ("building", 0) and seen["back"] == "site" and seen["metric"] == "power"
    assert "mean 0 W" in str(seen["legend of power"])               # no power readings: 0 W, not a crash


def test_a_sweep_worker_whose_parent_died_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker finishing a chunk after its parent was killed finds the pipe broken: it ends, without the
    traceback multiprocessing would print on the terminal's stderr."""
    from clustertop.engine.sweep import pool

    class Orphaned:
        def recv(self) -> tuple[int, int]:
            return 0, 1

        def send(self, _: object) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def close(self) -> None:
            pass

    monkeypatch.setattr(pool, "worker_ready", lambda parent: None)
    monkeypatch.setattr(pool, "run_chunk", lambda sweep, start, stop: [])
    pool._work(None, Orphaned(), Orphaned(), 0)  # type: ignore[arg-type]
