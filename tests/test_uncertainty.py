"""The error band on every estimate (engine/model/uncertainty.py): its data is `validate`'s, it is honest (the
stated share of published runs falls inside it, each run left out of its own band), and `estimate` says it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.model import uncertainty, validate
from clustertop.engine.model.uncertainty import Residual, band_of


def test_the_residuals_are_what_validate_gives_now() -> None:
    # scripts/residuals.py writes them; a change to the model that moves any row must rewrite them
    now = validate.residuals(validate.run(), validate.run_serving())
    assert [dataclasses.asdict(r) for r in uncertainty.residuals()] == [dataclasses.asdict(r) for r in now]


def coverage(kind: str, fit: bool) -> tuple[float, int]:
    """The share of `kind` rows (fitting or held out) inside the band drawn from every other row."""
    rows = uncertainty.residuals()
    mine = [r for r in rows if r.kind == kind and r.fit == fit]
    inside = 0
    for r in mine:
        band = band_of([x for x in uncertainty.held_out() if x is not r], kind, r.gpu, r.size, r.stack)
        assert band is not None
        inside += abs(r.error) <= band.uncertainty
    return inside / len(mine), len(mine)


@pytest.mark.parametrize("kind", ["training", "serving"])
@pytest.mark.parametrize("fit", [True, False], ids=["fitted", "held-out"])
def test_the_band_holds_the_share_it_states(kind: str, fit: bool) -> None:
    share, n = coverage(kind, fit)
    assert n >= 30
    assert share >= uncertainty.COVERAGE


def test_the_quantile_is_the_conformal_one() -> None:
    errors = [0.01 * i for i in range(1, 20)]          # 19 runs: the 18th smallest covers 90% of a 20th
    assert uncertainty.quantile(errors) == pytest.approx(0.18)
    assert uncertainty.quantile(errors[:8]) is None    # 8 runs cannot promise 90%


def test_too_few_runs_alike_widen_the_match() -> None:
    rows = [Residual(f"r{i}", "training", "h100", "small", "megatron", False, 0.01 * i) for i in range(24)]
    rows += [Residual(f"t{i}", "training", "tpu", "small", "megatron", False, 0.5) for i in range(3)]
    close = band_of(rows, "training", "h100", "small", "megatron")
    assert close is not None and close.runs == 24 and close.alike == "h100, small, megatron"
    wide = band_of(rows, "training", "tpu", "small", "megatron")     # 3 TPU runs: every megatron run
    assert wide is not None and wide.runs == 27 and wide.alike == "megatron" and wide.uncertainty == 0.5
    unmeasured = band_of(rows, "training", "mi300x", "small", "megatron")
    assert unmeasured is not None and "none on mi300x" in unmeasured.alike


def write(tmp_path: Path, job: str) -> str:
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\ndescription = "t"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 64\n'
                    'gpus_per_node = 8\n[faults]\nenabled = false\n[[jobs]]\nname = "j"\n' + job)
    return str(path)


def test_estimate_gives_the_step_with_its_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'model = "llama3.1-8b"\nseq_len = 8192\nglobal_batch = 128\ntp = 2\n')
    assert main(["estimate", path, "--json"]) == 0
    job = orjson.loads(capsys.readouterr().out)["jobs"][0]
    u, (low, high), step = job["uncertainty"], job["step_time_range_s"], job["step_time_s"]
    assert 0.02 < u < 0.5
    assert low == pytest.approx(step * (1 - u), rel=1e-3) and high == pytest.approx(step * (1 + u), rel=1e-3)
    assert main(["estimate", path]) == 0
    text = capsys.readouterr().out
    assert f"{low:,.2f}-{high:,.2f} s per step" in text and "held out of the fit" in text


def test_a_job_that_does_not_fit_has_no_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'model = "llama3.1-405b"\nseq_len = 8192\nglobal_batch = 64\ntp = 1\n'
                           'recompute = "none"\n')
    assert main(["estimate", path, "--json"]) == 0
    job = orjson.loads(capsys.readouterr().out)["jobs"][0]
    assert not job["fits"] and job["step_time_range_s"] is None and job["tokens_per_s_range"] is None


def test_the_jobs_panel_shows_the_band_of_the_header() -> None:
    from clustertop.tui.display import DisplayState
    from clustertop.tui.widgets.jobs import figures

    topology = {"gpus": 64, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 64,
                "gpus_per_building": 64, "nodes": 8, "racks": 4, "pods": 1, "buildings": 1}
    job = {"name": "train", "kind": "training", "first_gpu": 0, "gpus": 64, "tp": 8, "dp": 8,
           "step_time_s": 6.5, "uncertainty": 0.1283, "step_time_range_s": [5.67, 7.33]}
    state = DisplayState({"type": "header", "topology": topology, "jobs": [job], "sample_interval_s": 1.0})
    assert figures(state.jobs["train"], state, 0.0)["likely ±"] == "13%"
    older = DisplayState({"type": "header", "topology": topology, "sample_interval_s": 1.0,
                          "jobs": [{k: v for k, v in job.items() if k != "uncertainty"}]})
    assert "likely ±" not in figures(older.jobs["train"], older, 0.0)     # a recording made before it
