"""`clustertop record`: files, gzip, stdout, summaries, reproducible bytes, bad input, killed recorders."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import clustertop.engine.sim.run as engine_run
import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.stream import reader


@pytest.fixture(autouse=True)
def fake_cost_model(monkeypatch: pytest.MonkeyPatch, planner: Any) -> None:
    monkeypatch.setattr(engine_run, "default_planner", planner)


RUN_KEYS = {"interruptions_unexpected", "interruptions_planned", "effective_training_time", "site_mw_min",
            "site_mw_max", "checkpoints", "energy_mwh", "cost_usd", "energy_j_per_token", "usd_per_mtoken"}


@pytest.fixture
def small(scenario_file: Any, texts: Any) -> str:
    return scenario_file(texts.small + texts.quiet)


def record(*args: str) -> int:
    return main(["record", *args])


def test_record_plain_and_gzip_same_lines(small: str, tmp_path: Path) -> None:
    plain, packed = tmp_path / "r.jsonl", tmp_path / "r.jsonl.gz"
    assert record(small, "-o", str(plain), "--duration", "8s", "--sample", "0.5s") == 0
    assert record(small, "-o", str(packed), "--duration", "8s", "--sample", "0.5s") == 0
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    lines = plain.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(orjson.loads(line) for line in lines[:-1])
    assert orjson.loads(lines[0])["type"] == "header"


def test_same_options_byte_identical(small: str, tmp_path: Path) -> None:
    for suffix in (".jsonl", ".jsonl.gz"):
        a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
        record(small, "-o", str(a), "--duration", "10s", "--seed", "5")
        record(small, "-o", str(b), "--duration", "10s", "--seed", "5")
        assert a.read_bytes() == b.read_bytes()


def test_json_summary(small: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], planner: Any) -> None:
    out = tmp_path / "r.jsonl.gz"
    assert record(small, "-o", str(out), "--duration", "20s", "--json") == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert {"steps", "tokens", "sim_seconds", "wall_seconds", "events", "bytes"} <= set(summary)
    assert summary["bytes"] == out.stat().st_size
    plan = planner(scenario.load(small), scenario.load(small).jobs[0])
    assert plan is not None
    assert summary["sim_seconds"] == 20.0 and summary["steps"] == int(20.0 // plan.step_time_s)
    assert summary["tokens"] == summary["steps"] * 64 * 4096
    with gzip.open(out) as f:
        assert summary["events"] == sum(1 for _ in f) - 1


def test_json_summary_has_the_run_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          scenario_file: Any, texts: Any) -> None:
    path = scenario_file(texts.small + "\n[faults]\nrate_scale = 3000.0\nplanned_per_day = 10.0\n")
    out = tmp_path / "r.jsonl"
    assert record(path, "-o", str(out), "--duration", "1d", "--json") == 0
    summary = orjson.loads(capsys.readouterr().out)
    before = {"scenario", "output", "seed", "steps", "tokens", "sim_seconds", "wall_seconds", "events",
              "samples", "sample_interval_s", "bytes", "jobs"}
    assert set(summary) == before | RUN_KEYS
    events = list(reader.iter_events(str(out)))[1:]
    kinds = [e["type"] for e in events]
    assert summary["interruptions_unexpected"] == kinds.count("fault") > 10
    assert summary["interruptions_planned"] == kinds.count("maintenance") > 2
    assert summary["checkpoints"] == sum(1 for e in events if e["type"] == "checkpoint_end" and e["ok"]) > 50
    site = [e["site_mw"] for e in events if e["type"] == "sample"]
    assert summary["site_mw_min"] <= min(site) < max(site) <= summary["site_mw_max"]
    last = [e for e in events if e["type"] == "sample"][-1]
    assert 0.1 < summary["effective_training_time"] < 0.9        # ~40 restarts of 25 min each
    assert summary["effective_training_time"] == last["jobs"]["train"]["effective_training_time"]
    # the site's energy: each sample is the mean over its interval, which the samples tile; owned accelerators
    # cost the default capex ($30,000 over 5 years) plus the default electricity ($85 / MWh)
    samples = [e for e in events if e["type"] == "sample" and e["t"] > 0]
    times = [0.0] + [e["t"] for e in samples]
    energy = sum(e["site_mw"] * (b - a) for e, a, b in zip(samples, times, times[1:])) / 3600
    assert summary["energy_mwh"] == pytest.approx(energy, rel=1e-3)
    hours = 24.0
    assert summary["cost_usd"] == pytest.approx(energy * 85 + 64 * 30000 / (5 * 8760) * hours, rel=1e-3)
    kept = summary["jobs"]["train"]["tokens"]  # what the job has at the end: work lost to faults is not
    assert kept < summary["tokens"]
    assert summary["usd_per_mtoken"] == pytest.approx(summary["cost_usd"] / kept * 1e6, rel=1e-4)
    assert summary["energy_j_per_token"] == pytest.approx(summary["energy_mwh"] * 3.6e9 / kept, rel=1e-4)
    state = reader.fold(str(out))
    assert state.jobs["train"].interruptions == (summary["interruptions_unexpected"]
                                                 + summary["interruptions_planned"])


def test_record_to_stdout_pipes_into_the_reader(small: str, fake_cli: Any) -> None:
    done = fake_cli("record", small, "-o", "-", "--duration", "5s")
    assert done.returncode == 0, done.stderr
    events = list(reader.iter_events(_BytesIO(done.stdout)))
    assert events[0]["type"] == "header" and events[-1]["type"] == "sample" and events[-1]["t"] == 5.0


def _BytesIO(data: bytes) -> Any:
    import io

    return io.BufferedReader(io.BytesIO(data))  # type: ignore[arg-type]


@pytest.mark.parametrize("args, message", [
    (["nope-such-scenario"], "unknown scenario"),
    (["{small}", "--duration", "5 parsecs"], "--duration"),
    (["{small}", "--duration", "0s"], "--duration"),
    (["{small}", "--sample=-1s"], "--sample"),
    (["{small}", "--duration", "10s", "--sample", "1h"], "--sample"),
    (["{small}", "--duration", "54d", "--sample", "100ms"], "too many"),
    (["{small}", "--seed", "-3"], "--seed"),
    (["{small}", "--duration", "500w"], "training steps"),
])
def test_bad_input_writes_nothing(args: list[str], message: str, small: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    argv = [a.replace("{small}", small) for a in args]
    assert record(*argv, "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_unwritable_output(small: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert record(small, "-o", str(tmp_path / "missing" / "r.jsonl")) == 2
    assert "does not exist" in capsys.readouterr().err
    assert record(small, "-o", str(tmp_path)) == 2
    assert "is a directory" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    # Root may write anywhere, so deny access the way the kernel would for another user.
    real_access = os.access
    monkeypatch.setattr("clustertop.engine.config.outfile.os.access",
                        lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    assert record(small, "-o", str(locked / "r.jsonl")) == 2
    assert "permission denied" in capsys.readouterr().err
    assert not (locked / "r.jsonl").exists()


def test_bad_scenario_subprocess_one_line(tmp_path: Path, fake_cli: Any) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n[[jobs]]\n'
                   'model = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 8\ntp = 3\n')
    done = fake_cli("record", str(bad), "-o", str(tmp_path / "r.jsonl"))
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_job_that_does_not_fit_is_recorded(tmp_path: Path, scenario_file: Any, texts: Any) -> None:
    out = tmp_path / "r.jsonl"
    assert record(scenario_file(texts.mixed + texts.quiet), "-o", str(out), "--duration", "2s") == 0
    state = reader.fold(str(out))
    assert state.jobs["too-big"].running is False and state.jobs["too-big"].stop_reason == "out of memory"
    assert state.jobs["train"].running and state.jobs["train"].step == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_killed_recorder_leaves_a_readable_prefix(suffix: str, small: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str], fake_cli: Any) -> None:
    out = tmp_path / f"killed{suffix}"
    proc = subprocess.Popen(fake_cli.command("record", small, "-o", str(out), "--duration", "30d", "--sample",
                                             "1s"), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while (not out.exists() or out.stat().st_size < 200_000) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    state = reader.fold(str(out))
    assert state.samples > 10 and state.jobs["train"].step > 10
    if suffix == ".jsonl":
        data = out.read_bytes()
        complete = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
        assert all(orjson.loads(line) for line in complete)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_truncated_anywhere_replays_the_complete_prefix(suffix: str, small: str, tmp_path: Path) -> None:
    out = tmp_path / f"r{suffix}"
    record(small, "-o", str(out), "--duration", "20s", "--sample", "0.2s")
    data = out.read_bytes()
    full = reader.fold(str(out))
    cut = tmp_path / f"cut{suffix}"
    for size in (len(data) // 3, len(data) // 2 + 7, len(data) - 5):
        cut.write_bytes(data[:size])
        warnings: list[str] = []
        state = reader.fold(str(cut), warn=warnings.append)
        assert warnings and ("truncated" in warnings[0] or "ends early" in warnings[0])
        assert 0 < state.t <= full.t and state.samples <= full.samples
