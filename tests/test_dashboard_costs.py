"""What the dashboard says a run has cost: energy and dollars so far from the stream, per token kept, the
plan's figures per job, and the compare rows (issue 16's dashboard part)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from clustertop.cli import main
from clustertop.engine.stream.state import ClusterState
from clustertop.tui.display import DisplayState, spent, tokens_kept
from clustertop.tui.index import EventIndex
from clustertop.tui.widgets import comparison, jobs, links, power


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, texts: Any) -> tuple[Path, dict[str, Any]]:
    """A 60 s recording of a small scenario and its `record --json` summary."""
    tmp = tmp_path_factory.mktemp("costs")
    small, out = tmp / "small.toml", tmp / "run.jsonl.gz"
    small.write_text(texts.small + texts.quiet)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["record", str(small), "--duration", "60s", "--sample", "1s", "-o", str(out), "--json"])
    assert code == 0
    return out, json.loads(printed.getvalue())


def test_energy_and_cost_so_far_match_the_recorder(recorded: tuple[Path, dict[str, Any]]) -> None:
    out, summary = recorded
    index = EventIndex.of_file(str(out))
    end = index.state_at(60.0)
    mwh, usd = spent(end)
    assert mwh == pytest.approx(summary["energy_mwh"], abs=1e-4)
    assert usd == pytest.approx(summary["cost_usd"], abs=0.01)
    half = index.state_at(30.0)
    assert 0.4 * mwh < spent(half)[0] < 0.6 * mwh       # the energy of every sample before, not one
    # playing forward sample by sample adds up to the same as a seek
    state = DisplayState(index.header)
    state, cursor = index.advance(state, 0, 20.0)
    for t in (25.0, 30.0):
        state, cursor = index.advance(state, cursor, t)
    assert spent(state)[0] == pytest.approx(spent(half)[0], rel=1e-6)
    # per token kept, as the power panel and the compare view give it
    tokens = tokens_kept(end)
    assert tokens > 0
    text = power.power_text(end, 60).plain
    assert f"{mwh * 3.6e9 / tokens:,.1f} J" in text
    assert comparison._per_token(end, False) == pytest.approx(mwh * 3.6e9 / tokens)
    assert comparison._per_token(end, True) == pytest.approx(usd / tokens * 1e6)
    labels = [f[0] for f in comparison.FIGURES]
    assert "energy per token so far" in labels and "cost per M tokens so far" in labels


def test_jobs_show_the_plans_cost_per_token(recorded: tuple[Path, dict[str, Any]]) -> None:
    out, _ = recorded
    state = EventIndex.of_file(str(out)).state_at(30.0)
    job = next(iter(state.jobs.values()))
    econ = job.info["economics"]
    shown = jobs.figures(job, state, 30.0)
    assert shown["J/token"] == f"{econ['energy_j_per_token']:,.2f}"
    assert shown["$/M tokens"].startswith("$")


def test_a_recording_without_economics_shows_no_cost() -> None:
    header = {"type": "header", "topology": {"gpus": 8}, "jobs": [],
              "scenario": {"economics": {"capex_usd_per_accelerator": "x"}}}
    state = DisplayState(header)
    state.apply({"t": 1.0, "type": "sample", "site_mw": 2.0})
    mwh, usd = spent(state)
    assert mwh == pytest.approx(2.0 / 3600) and usd is None
    assert "$" not in power.power_text(state, 60).plain


@pytest.mark.parametrize(("link", "label"), [("nvlink4", "NVLink"), ("xgmi3", "xGMI"), ("ici-v5p", "ICI"),
                                             ("neuronlink-v3", "NeuronLink"), ("pcie-gen5", "PCIe (host)")])
def test_the_scale_up_tier_is_named_for_its_link(link: str, label: str) -> None:
    state = ClusterState({"type": "header", "topology": {"gpus": 8}, "jobs": [], "scale_up": {"link": link}})
    assert links.tier_label("node", state) == label
