"""CLI outcomes a person sees: `record` and `export` end with a one-line summary on stderr, an interrupted
`record` says what it kept, a mistyped flag names the right one and its subcommand's help, and the Perfetto
export's step slices never overlap."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from clustertop.cli import main
from clustertop.engine.config import units
from clustertop.engine.sim import run as engine_run
from clustertop.engine.stream.reader import iter_events


@pytest.fixture
def small(scenario_file: Any, texts: Any) -> str:
    return scenario_file(texts.small + texts.quiet)


def test_record_and_export_end_with_a_one_line_summary(small: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: `record` without --json and `export` printed nothing on success."""
    out = tmp_path / "r.jsonl.gz"
    assert main(["record", small, "-o", str(out), "--duration", "20s"]) == 0
    err = capsys.readouterr().err.strip()
    lines = sum(1 for _ in iter_events(str(out)))
    span = units.format_duration(20.0)
    assert "\n" not in err and err.startswith(f"clustertop: wrote {out}: {span} simulated, {lines:,} lines, ")
    assert err.split(", ")[-1].split(" in ")[0].endswith("kB")
    trace = tmp_path / "trace.json"
    assert main(["export", str(out), "-o", str(trace)]) == 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"clustertop: wrote {trace}: a Perfetto trace of {span} (")
    assert "trace events" in err and err.endswith("B")


def test_an_interrupted_record_says_what_it_kept(small: str, tmp_path: Path, monkeypatch: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: Ctrl+C during `record` exited 130 silently, leaving a partial (valid) file unannounced."""
    real = engine_run.Run.run

    def interrupted(self: engine_run.Run, sink: Any, progress: Any = None) -> Any:
        def stop(t: float) -> None:
            if t > 5.0:
                raise KeyboardInterrupt
        return real(self, sink, stop)

    monkeypatch.setattr(engine_run.Run, "run", interrupted)
    out = tmp_path / "r.jsonl"
    assert main(["record", small, "-o", str(out), "--duration", "1h"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"clustertop: interrupted; kept {out}: ") and "valid recording" in err
    assert "\n" not in err and list(iter_events(str(out)))            # a readable prefix


def test_a_mistyped_flag_names_the_right_one_and_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: `run X --sped 10` pointed to `clustertop --help` and did not suggest --speed."""
    with pytest.raises(SystemExit) as exit_:
        main(["run", "llama3-405b-16k", "--sped", "10"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("clustertop run: unrecognized arguments: --sped 10; did you mean --speed? "
                   "(see `clustertop run --help`)")


@pytest.mark.parametrize("recording", ["recordings/flagship-16k.jsonl.gz",
                                       "recordings/flagship-8k.jsonl.gz"])
def test_perfetto_step_slices_never_overlap(recording: str, tmp_path: Path) -> None:
    """Defect: adjacent `step N` slices overlapped by about 1 µs (rounded step times)."""
    out = tmp_path / "trace.json"
    assert main(["export", recording, "-o", str(out)]) == 0
    slices: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in json.loads(out.read_text())["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("step "):
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
    assert slices
    for spans in slices.values():
        spans.sort()
        assert all(ts + dur <= nxt + 1e-9 and dur >= 0 for (ts, dur), (nxt, _) in itertools.pairwise(spans))
