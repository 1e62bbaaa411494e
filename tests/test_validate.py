"""`clustertop validate`: every row of the public calibration set, per source and overall, in each source's
measure; the Llama 3 rows within 5% and in their published order."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
from clustertop.cli import main
from clustertop.engine.config.geometry import Geometry
from clustertop.engine.model import calibration as cal
from clustertop.engine.model.layout import Layout
from clustertop.engine.model.validate import run


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run()


def test_every_source_is_there_with_fitting_and_held_out_rows(report) -> None:  # type: ignore[no-untyped-def]
    sources = set(report.sources)
    assert {"llm_foundry", "nemo", "dgxc", "torchtitan", "flash_attention", "llama3", "bloom"} <= sources
    for source in ("llm_foundry", "nemo", "dgxc", "torchtitan", "flash_attention"):
        rows = [p.row for p in report.predictions if p.row.source == source]
        assert any(r.fit for r in rows) and any(not r.fit for r in rows), source
    assert len(report.predictions) >= 60


def test_llama3_rows_within_5_percent_and_in_order(report) -> None:  # type: ignore[no-untyped-def]
    llama3 = {p.row.name: p for p in report.predictions if p.row.source == "llama3"}
    assert set(llama3) == {"llama3-405b-8k", "llama3-405b-16k", "llama3-405b-16k-128k"}
    for p in llama3.values():
        assert abs(p.error) <= 0.05, (p.row.name, p.error)
    assert report.order_ok
    assert llama3["llama3-405b-8k"].predicted > llama3["llama3-405b-16k"].predicted > \
        llama3["llama3-405b-16k-128k"].predicted


def test_accuracy_targets_hold_on_fitting_and_held_out_rows(report) -> None:  # type: ignore[no-untyped-def]
    # issue 24's targets: MAPE <= 5% over the whole set, no source above 8%, no row beyond 20%; and the rows
    # the constants were not fitted on come out as well as those they were (within 1.5 points)
    assert report.mape() <= 0.05
    for source in report.sources:
        assert report.mape(source=source) <= 0.08, source
    worst = max(report.predictions, key=lambda p: abs(p.error))
    assert abs(worst.error) <= 0.20, (worst.row.name, worst.error)
    assert abs(report.mape("held out") - report.mape("fit")) <= 0.015


def test_the_fitted_constants_are_where_the_fit_puts_them() -> None:
    """scripts/fit_efficiency.py's constants as the catalog holds them: one step either way on the fit's grid
    (within it: the FlashAttention-1 shares stay in the FA2 paper's range) makes its objective (the mean over
    sources of the fitting rows' error) worse, or takes a Llama 3 row beyond 5%."""
    import importlib.util
    from pathlib import Path

    from clustertop.engine.config import catalog
    from clustertop.engine.model.estimate import clear_caches

    spec = importlib.util.spec_from_file_location("fit", Path(__file__).parent.parent / "scripts"
                                                  / "fit_efficiency.py")
    assert spec is not None and spec.loader is not None
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    gpus = catalog.gpus()
    h100, a100, blackwell = gpus[fit.H100], gpus[fit.A100], gpus[fit.BLACKWELL[0]]
    assert all(gpus[g].fp8_gemm_efficiency == blackwell.fp8_gemm_efficiency for g in fit.BLACKWELL)
    best = (h100.gemm_efficiency, h100.fp8_gemm_efficiency, a100.gemm_efficiency, h100.flash1_share,
            a100.flash1_share, blackwell.fp8_gemm_efficiency)
    grids = ("h100", "fp8", "a100", "flash1", "flash1", "blackwell_fp8")

    def objective(h: float, fp8: float, a: float, share_h: float, share_a: float, bw: float) -> float:
        errs = fit.errors(h, fp8, a, {fit.H100: share_h, fit.A100: share_a}, bw)
        if any(abs(e) > 0.05 for row, e in errs if row.source == "llama3"):
            return float("inf")
        return fit.per_source(errs)

    try:
        at = objective(*best)
        for i, grid in enumerate(grids):
            values = fit.GRID[grid]
            assert best[i] in values, (grid, best[i])
            k = values.index(best[i])
            for moved_to in values[max(0, k - 1):k] + values[k + 1:k + 2]:    # one grid step either way
                moved = list(best)
                moved[i] = moved_to
                assert objective(*moved) > at, (grid, moved)
    finally:
        clear_caches()


def test_mape_is_the_mean_absolute_error(report) -> None:  # type: ignore[no-untyped-def]
    errors = [abs(p.error) for p in report.predictions]
    assert report.mape() == pytest.approx(statistics.mean(errors))
    nemo = [abs(p.error) for p in report.predictions if p.row.source == "nemo"]
    assert report.mape(source="nemo") == pytest.approx(statistics.mean(nemo))
    fit = [abs(p.error) for p in report.predictions if p.row.fit]
    assert report.mape("fit") == pytest.approx(statistics.mean(fit))


def test_the_sources_own_conventions() -> None:
    # NeMo's count for Llama 2 7B at 4K (nemo/utils/flops_formulas.py): 46.1 GFLOP per token, so the table's
    # 16,934 tokens/s per GPU is its 780 TFLOP/s
    from clustertop.engine.config import catalog

    assert cal.nemo_flops_per_token(catalog.models()["llama2-7b"], 4096) * 16934 / 1e12 == pytest.approx(
        780, rel=0.002)
    job = next(p for p in cal.rows() if p.source == "bloom")
    from clustertop.engine.config.fields import Context
    from clustertop.engine.config.scenario import parse

    bloom = parse(job.scenario, Context("bloom"), "").jobs[0]
    m = bloom.model
    b, s, l, h, v = 2048, 2048, m.layers, m.hidden, m.vocab
    assert cal.megatron_flops_per_step(bloom, "full") == pytest.approx(
        96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)))


def test_rows_are_the_published_figures() -> None:
    rows = {(r.source, r.name): r for r in cal.rows()}
    assert rows[("dgxc", "llama3.1-8b bf16 8 GPUs tp1 cp2")].published == 10254
    assert rows[("nemo", "llama2-7b fp8 seq 131072 128 GPUs tp4 pp1 cp4")].published == 555
    assert rows[("flash_attention", "gpt3-125m a100 8 GPUs")].published == 1310000 / 8
    assert all(r.published > 0 for r in rows.values())


def test_cli_json_has_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == (0 if data["ok"] else 1)
    assert {"rows", "sources", "mape"} <= set(data)
    for row in data["rows"]:
        assert {"source", "name", "published", "predicted", "measure", "error"} <= set(row)
        assert row["error"] == pytest.approx(row["predicted"] / row["published"] - 1, abs=1e-3)
    training = [r for r in data["rows"] if r["kind"] == "training"]
    serving = [r for r in data["rows"] if r["kind"] == "serving"]
    assert len(training) + len(serving) == len(data["rows"]) and serving
    assert data["mape"] == pytest.approx(statistics.mean(abs(r["error"]) for r in training), abs=1e-3)
    assert set(data["sources"]) == {r["source"] for r in training}
    # the serving section: its rows in their own measures, a MAPE per source and per measure
    assert {r["measure"] for r in serving} == {"output tokens/s", "ttft ms", "itl ms"}
    for source, mape in data["serving"]["sources"].items():
        errors = [abs(r["error"]) for r in serving if r["source"] == source]
        assert mape == pytest.approx(statistics.mean(errors), abs=1e-3)
    assert set(data["serving"]["measures"]) == {r["measure"] for r in serving}


def test_cli_table_names_every_row_and_the_means(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate"])
    out = capsys.readouterr().out
    assert "llama3-405b-8k" in out and "bloom-176b" in out and "mpt-7b h100 bf16 8 GPUs" in out
    assert "mean absolute error:" in out and "held-out rows" in out and "not expressible:" in out


def test_cli_exits_non_zero_when_a_row_misses(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    import clustertop.engine.model.validate as ev

    original = cal.rows()
    doubled = tuple(dataclasses.replace(r, published=r.published * 2) if r.source == "bloom" else r
                    for r in original if r.source in ("bloom", "llama3"))
    monkeypatch.setattr(ev, "rows", lambda: doubled)
    assert main(["validate"]) == 1
    assert "MISS" in capsys.readouterr().out


def test_moe_rows_placed_as_they_ran_and_counted(report) -> None:  # type: ignore[no-untyped-def]
    """The DeepSeek-V3 rows of Megatron-Bridge run in Megatron-Core's rank order: EP next to TP, inside the
    NVLink domain (EP 64 on 64 GPUs of an NVL72), PP outermost, with DeepSeek-V3's MTP module where the
    table's FLOPs per token say it ran (B200) and without it where they say it did not (GB200); they count in
    the error figures like every row, within issue 24's 20%."""
    moe = [p for p in report.predictions if "deepseek-v3" in p.row.name]
    assert len(moe) == 3
    for p in moe:
        assert p.error is not None and abs(p.error) <= 0.20, (p.row.name, p.error)
        assert p.estimate.job.rank_order == "tp-cp-ep-dp-pp"
        assert p.estimate.tiers["ep"] == "node", p.row.name
        assert p.estimate.job.model.mtp_layers == (1 if "b200" in p.row.name and "gb200" not in p.row.name
                                                   else 0), p.row.name
    assert report.mape() == pytest.approx(statistics.mean(abs(p.error) for p in report.predictions))
    # the same rows in Llama 3's order would spread each EP group over the pipeline's stages, off the node
    scenario = cal.scenario(moe[0].row)
    job, topology = scenario.jobs[0], Geometry.of(scenario.cluster)
    assert Layout(job, topology).tier("ep") == "node"
    assert Layout(dataclasses.replace(job, rank_order="tp-cp-pp-dp"), topology).tier("ep") != "node"
