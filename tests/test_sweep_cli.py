"""`clustertop sweep` on the command line: output, records, --best-to,
and one-line errors with exit code 2."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import clustertop.commands.sweep as sweep_command
import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.config import scenario
from clustertop.engine.sweep import dask_cluster
from clustertop.engine.sweep.results import read_results
from clustertop.engine.sweep.space import point_scenario
from test_sweep import SMALL, write


@pytest.fixture(autouse=True)
def stand_in_model(monkeypatch: pytest.MonkeyPatch, estimator: Any) -> None:
    """A stand-in estimator instead of the performance model:
    these tests are about the command, not the model."""
    monkeypatch.setattr(sweep_command, "ESTIMATOR", estimator)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_prints_the_best_and_writes_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, out, best = write(tmp_path), tmp_path / "r.jsonl", tmp_path / "best.toml"
    code, stdout, err = run_cli(capsys, "sweep", base, "--vary", "jobs[0].tp=1,3,4,8", "--vary",
                                "jobs[0].pp=1,2", "-o", str(out), "--top", "3", "--best-to", str(best))
    assert code == 0, err
    assert err == "", "no progress bar when stderr is not a terminal"
    lines = out.read_bytes().splitlines()
    assert len(lines) == 8
    recs = [orjson.loads(line) for line in lines]
    assert [r["point"] for r in recs][:3] == [{"jobs[0].tp": 1, "jobs[0].pp": 1},
                                              {"jobs[0].tp": 1, "jobs[0].pp": 2},
                                              {"jobs[0].tp": 3, "jobs[0].pp": 1}]
    assert sum("error" in r for r in recs) == 2
    text = stdout.splitlines()
    assert text[0].startswith("small: 8 points in ")
    oom = [r["index"] for r in recs if "jobs" in r and not r["jobs"][0]["fits"]]
    assert oom == [0, 1], "tp = 1 does not fit (the stand-in's activations)"
    assert text[1] == "  4 fit, 2 out of memory, 2 invalid (skipped)"
    assert text[2].startswith("        2 x jobs[0].tp: tp*cp*pp = 3 does not divide the job's 64 GPUs")
    assert "dp derived as GPUs / (tp*cp*pp): the base's jobs[0].dp left out" in stdout
    title = "best 3 by step time:"
    table = text[text.index(title) + 1:]
    assert table[0].split() == ["#", "tp", "pp", "GPUs", "step", "s", "tokens/s", "tok/s/GPU", "MFU",
                                "$/Mtok", "mem", "GB/GPU"]
    steps = {r["index"]: r["jobs"][0]["step_time_s"] for r in recs if "jobs" in r and r["jobs"][0]["fits"]}
    ranked = sorted(steps, key=lambda i: (steps[i], i))[:3]
    for row, index in zip(table[1:4], ranked):
        point = recs[index]["point"]
        assert row.split()[:4] == [str(ranked.index(index) + 1), str(point["jobs[0].tp"]),
                                   str(point["jobs[0].pp"]), "64"]
        assert row.split()[4] == f"{steps[index]:.3f}"
    assert f"wrote the best point (jobs[0].tp={recs[ranked[0]]['point']['jobs[0].tp']}" in stdout
    loaded = scenario.load(str(best))
    assert loaded.jobs[0].tp == recs[ranked[0]]["point"]["jobs[0].tp"]
    assert loaded.name == "small-sweep-best"


def test_records_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buffer))
    code = main(["sweep", write(tmp_path), "--vary", "jobs[0].pp=1,2,4", "-o", "-", "--top", "1"])
    sys.stdout.flush()
    err = capsys.readouterr().err
    assert code == 0
    assert [orjson.loads(line)["index"] for line in buffer.getvalue().splitlines()] == [0, 1, 2]
    assert "small: 3 points" in err and "best 1 by step time:" in err


class _SignalledOnWrite:
    """A file that receives SIGTERM right after the first write made while the sweep runs (while SIGTERM has a
    handler: cli/signals.py terminate_quietly), as a sweep's output can."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.signalled = False

    def write(self, data: bytes) -> int:
        done = self.stream.write(data)
        if not self.signalled and callable(signal.getsignal(signal.SIGTERM)):
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def test_sigterm_after_a_write_leaves_a_readable_gzip(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The records compressed before the signal stay readable. Compressed straight into the output, the gzip
    stream counted its checksum after the write: SIGTERM there left a checksum that did not match, and the
    reader refused the whole file."""
    path = tmp_path / "r.jsonl.gz"
    real = sweep_command.open_output

    def signalled(name: str, *args: Any, **kw: Any) -> Any:
        out = real(name, *args, **kw)
        out.stream = _SignalledOnWrite(out.stream)
        return out

    monkeypatch.setattr(sweep_command, "open_output", signalled)
    with pytest.raises(SystemExit) as ended:
        main(["sweep", write(tmp_path), "--vary", "jobs[0].tp=1,2,4,8", "--vary", "jobs[0].pp=1,2,4",
              "--workers", "1", "-o", str(path)])
    assert ended.value.code == 143
    records = read_results(str(path))
    assert [r["index"] for r in records] == list(range(len(records))) and 0 < len(records) < 12


def test_default_estimator_is_the_performance_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from clustertop.engine.model.estimate import estimate, to_json

    monkeypatch.setattr(sweep_command, "ESTIMATOR", None)
    base, out = write(tmp_path), tmp_path / "a.jsonl"
    argv = ["sweep", base, "--vary", "jobs[0].tp=2,4,8", "--workers", "1", "--top", "0", "-o", str(out)]
    assert run_cli(capsys, *argv)[0] == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == 3
    for record in records:
        # every key of `clustertop estimate --json` for that point's scenario, with the same values
        expected = orjson.loads(orjson.dumps(to_json(estimate(point_scenario(base, record["point"])[0]))))
        assert {key: record[key] for key in expected} == expected
        assert record["jobs"][0]["step_time_s"] > 0


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, f"expected one line, got {err!r}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


@pytest.mark.parametrize("flags, needle", [
    (["--vary", "jobs[0].tp"], "--vary 'jobs[0].tp': expected KEY=V1,V2,..."),
    (["--vary", "jobs[0].tq=1,2"], "unknown scenario key (did you mean 'jobs[0].tp'?)"),
    (["--vary", "jobs[1].tp=1,2"], "has 1 job(s)"),
    (["--vary", "jobs[0].tp=1,,2"], "empty value"),
    (["--vary", "jobs[0].tp=a"], "jobs[0].tp: expected an integer, got 'a'"),
    (["--vary", "jobs[0].tp=1,2", "--vary", "jobs[0].tp=4"], "given twice"),
    ([], "expected at least one --vary"),
    (["--vary", "jobs[0].tp=1,2", "--top", "-1"], "--top -1: expected 0 or more"),
    (["--vary", "jobs[0].tp=1,2", "--workers", "0"], "--workers 0: expected 1 to 256"),
    (["--vary", "jobs[0].tp=1,2", "--workers", "100000"], "--workers 100000: expected 1 to 256"),
    (["--vary", "jobs[0].tp=1,2", "--workers", "2", "--dask", "tcp://x:1"], "--workers is for local runs"),
    (["--vary", "jobs[0].tp=1,2", "--best-to", "/nonexistent/dir/b.toml"], "does not exist"),
])
def test_bad_flags_end_in_one_line(flags: list[str], needle: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    code, stdout, err = run_cli(capsys, "sweep", write(tmp_path), *flags, "-o", str(out))
    assert_one_line_error(code, stdout, err, needle)
    assert not out.exists(), "nothing runs before the flags are checked"


def test_bad_base_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, SMALL.replace('gpu = "h100-sxm-80gb"', 'gpu = "h100"'))
    assert_one_line_error(*run_cli(capsys, "sweep", base, "--vary", "jobs[0].tp=1,2"),
                          "cluster.gpu: unknown name")


def test_best_to_when_nothing_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    best = tmp_path / "best.toml"
    code, out, err = run_cli(capsys, "sweep", write(tmp_path), "--vary", "jobs[0].model=llama3.1-405b",
                             "--vary", "jobs[0].zero=0,1", "--best-to", str(best))
    assert code == 2
    assert "0 fit, 2 out of memory" in out and "OOM" in out
    assert "best 2 by step time (out-of-memory points last):" in out
    assert err == f"clustertop: no point fits in memory; nothing written to {best}\n"
    assert not best.exists()


def test_dask_without_the_optional_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert_one_line_error(*run_cli(capsys, "sweep", write(tmp_path), "--vary", "jobs[0].tp=1,2", "--dask",
                                   "tcp://127.0.0.1:8786"), "pip install 'clustertop[cluster]'")


def test_dask_scheduler_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dask_cluster, "DASK_TIMEOUT_S", 0.5)
    assert_one_line_error(*run_cli(capsys, "sweep", write(tmp_path), "--vary", "jobs[0].tp=1,2", "--dask",
                                   "tcp://127.0.0.1:9"), "cannot connect to the Dask scheduler at tcp://127.0.0.1:9")


def test_progress_bar_only_on_a_terminal_and_never_over_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustertop import progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not progress.wanted("out.jsonl")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress.wanted("out.jsonl") and progress.wanted(None)
    assert not progress.wanted("-"), "records on stdout (a pipe, a dashboard): no bar over them"
    stream = io.StringIO()
    with progress.Bar(200, enabled=True, file=stream) as bar:
        bar.update(100, "100/200 points, 50/s, 3 invalid")
        bar._progress.refresh()  # type: ignore[union-attr]
    assert "100/200 points, 50/s, 3 invalid" in stream.getvalue() and "50%" in stream.getvalue()
    silent = io.StringIO()
    with progress.Bar(200, enabled=False, file=silent) as bar:
        bar.update(100, "x")
    assert silent.getvalue() == ""


def test_the_table_shows_the_mfu_estimate_shows(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # the flagship's MFU is 40.549...%: a record rounded to 4 digits (0.4055) made the table say 40.6%
    monkeypatch.setattr(sweep_command, "ESTIMATOR", None)
    code, out, _ = run_cli(capsys, "sweep", "llama3-405b-16k", "--vary", "jobs[0].virtual_stages=4",
                           "--workers", "1", "--top", "1")
    assert code == 0
    header, row = out.splitlines()[-2:]
    assert "MFU" in header
    code, text, _ = run_cli(capsys, "estimate", "llama3-405b-16k")
    assert code == 0
    shown = text.split("MFU ")[1].split()[0]
    assert [cell for cell in row.split() if cell.endswith("%")] == [shown], (row, shown)   # the one % column
