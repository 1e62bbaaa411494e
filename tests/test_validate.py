"""`clustertop validate`: the model against published runs, within tolerance and in the right order."""

from __future__ import annotations

import json

import pytest
from clustertop.engine.model.validate import megatron_flops_per_step, reference, run_checks, scenarios

from clustertop.cli import main


@pytest.fixture(scope="module")
def results():  # type: ignore[no-untyped-def]
    return run_checks()


def test_every_reference_run_is_within_tolerance(results) -> None:  # type: ignore[no-untyped-def]
    checks, _ = results
    names = {c.name for c in checks}
    assert {"llama3-405b-8k", "llama3-405b-16k", "llama3-405b-16k-128k", "bloom-176b"} <= names
    for c in checks:
        assert c.predicted is not None, f"{c.name} does not fit"
        assert abs(c.error) <= c.tolerance, f"{c.name}: {c.predicted:.1f} vs {c.published}"
    tol = {c.name: c.tolerance for c in checks}
    assert tol["llama3-405b-8k"] == 0.10 and tol["bloom-176b"] == 0.15


def test_llama3_rows_come_out_in_published_order(results) -> None:  # type: ignore[no-untyped-def]
    checks, orders = results
    assert orders and all(o.ok for o in orders)
    by = {c.name: c.predicted for c in checks}
    assert by["llama3-405b-8k"] > by["llama3-405b-16k"] > by["llama3-405b-16k-128k"]


def test_bloom_is_measured_in_hardware_flops_with_recompute() -> None:
    job = scenarios()["bloom-176b"].jobs[0]
    assert job.recompute == "full"
    m = job.model
    b, s, l, h, v = 2048, 2048, m.layers, m.hidden, m.vocab
    assert megatron_flops_per_step(job, "full") == pytest.approx(
        96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)))
    assert megatron_flops_per_step(job, "full") / megatron_flops_per_step(job, "none") == pytest.approx(
        96 / 72 * (1 + s / (6 * h) + v / (16 * l * h)) / (1 + s / (6 * h) + v / (12 * l * h)))


def test_reference_runs_keep_their_sources() -> None:
    for run in reference()["runs"]:
        assert run["source"] and run["published"] > 0


def test_cli_prints_the_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "llama3-405b-8k" in out and "bloom-176b" in out and "MISS" not in out
    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and len(data["runs"]) >= 4


def test_cli_exits_non_zero_when_a_run_misses(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import clustertop.engine.model.validate as ev

    original = ev.reference()
    patched = dict(original)
    patched["runs"] = [dict(r, published=r["published"] * 2) if r["name"] == "bloom-176b" else r
                       for r in original["runs"] if r["name"] == "bloom-176b"]
    monkeypatch.setattr(ev, "reference", lambda: patched)
    assert main(["validate"]) == 1
    assert "MISS" in capsys.readouterr().out
