"""Failed, degraded and unallocated GPUs have their own colours in every metric and zoom (tui/marks.py)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest
from clustertop.cli import main
from clustertop.engine.config.geometry import Geometry
from clustertop.engine.config.phases import CODE, PHASES
from clustertop.engine.stream import schema
from clustertop.engine.stream.state import ClusterState
from clustertop.tui import palette
from clustertop.tui.grid import View, layout
from clustertop.tui.marks import Marks
from clustertop.tui.widgets.heatmap import Heatmap
from tui_pilot import SIZE, app_at, rendered, sync


def _half_used() -> ClusterState:
    """1,024 GPUs, a job on the first 512 (GPU 7 slow), GPU 300 failed, everything else computing."""
    topology = {"gpus": 1024, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 512,
                "gpus_per_building": 1024}
    header: dict[str, Any] = {"type": "header", "topology": topology, "scenario": {},
                              "jobs": [{"name": "a", "first_gpu": 0, "gpus": 512, "slow_gpus": [7]}]}
    state = ClusterState(header)
    phase = np.r_[np.full(512, CODE["compute"]), np.full(512, CODE["idle"])]
    phase[300] = CODE["failed"]
    util = np.r_[np.full(512, 95), np.zeros(512, int)]
    state.apply({"t": 1.0, "type": "sample", "util": schema.rle_encode(util),
                 "power_w": schema.rle_encode(util * 7), "phase": schema.rle_encode(phase)})
    return state


def test_a_failed_gpu_wins_over_the_mean_then_degraded_and_no_job_is_unallocated() -> None:
    state = _half_used()
    marks = Marks(state.header)
    for view, width in ((View("site"), 40), (View("pod", 0), 80), (View("node", 37), 60)):
        lay = layout(Geometry.from_summary(state.topology), view, width, 20)
        colours = palette.level_of(lay.mean(state.util), 1.0).astype(np.int32)
        marks.paint(colours, lay, state)
        if lay.gpu0 <= 300 < lay.gpu1:
            assert colours[lay.pixel_of(300)] == palette.FAILED          # 1 failed among 95% busy
        if lay.gpu0 <= 7 < lay.gpu1:
            assert colours[lay.pixel_of(7)] == palette.SLOW
        unused = colours[lay.pixel_of(max(lay.gpu0, 512)):] if lay.gpu1 > 512 else colours[:0]
        assert (unused == palette.UNALLOCATED).all()
        assert palette.UNALLOCATED not in colours[:lay.pixel_of(511) + 1]
    assert marks.counts(state, 0, 1024) == {"failed": 1, "degraded": 1, "unallocated": 512}
    assert [marks.of(state, g) for g in (300, 7, 600, 8)] == ["failed", "degraded", "unallocated", None]


def test_a_header_without_jobs_marks_nothing_unallocated() -> None:
    """Real telemetry of a cluster whose jobs are unknown: its GPUs are not 'unallocated'."""
    state = _half_used()
    marks = Marks({**state.header, "jobs": []})
    assert marks.counts(state, 0, 1024)["unallocated"] == 0


@sync
async def test_the_failed_node_shows_red_in_utilization_and_power_at_site_and_node_zoom() -> None:
    app = app_at(41.0)                                        # during the fault of the recording
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        failed = np.flatnonzero(app.states[0].phase == CODE["failed"])
        assert failed.size == 8
        for key in ("1", "2"):                                # utilization, power
            await pilot.press(key)
            lay = heatmap.layout_info
            colours = heatmap.pixel_colours(lay)
            assert set(np.flatnonzero(colours == palette.FAILED)) == {lay.pixel_of(int(g)) for g in failed}
            legend = rendered(app.screen.query_one("#legend"))
            # the engine's slow GPUs (the header's slow_gpus), none of them in the failed node here
            header = app.states[0].header
            slow = {g for job in header["jobs"] for g in job["slow_gpus"]} - set(failed.tolist())
            assert len(slow) >= 10
            assert "failed 8" in legend and f"degraded {len(slow)}" in legend and "failed wins" in legend
        await pilot.press("1")
        heatmap.set_cursor(int(failed[0]))
        await pilot.press("enter", "enter", "enter")          # pod, rack, node
        assert heatmap.view.level == "node"
        lay = heatmap.layout_info
        assert (heatmap.pixel_colours(lay) == palette.FAILED).all()
        assert "failed" in "".join(strip.text for strip in heatmap.render_frame())


def test_the_phase_view_draws_each_phase_in_proportion_to_its_time() -> None:
    """Defect: congested-fabric was solid green in the phase view although its GPUs waited on the network a
    fifth of the time: each GPU showed its phase of most time over the sample interval (5 s at the 6 h
    default, most of a step), and computing always outweighed the waits. The waits count together as
    'waiting on the network', and each phase covers the share of the GPUs' cells that it takes of their
    time; a failed GPU still wins; the same GPUs draw the same on every call."""
    n = 20_000
    table = np.zeros((3, len(PHASES)), dtype=np.float32)
    table[0, [CODE["compute"], CODE["tp"], CODE["dp"], CODE["bubble"]]] = (0.60, 0.10, 0.11, 0.19)
    table[1, CODE["compute"]] = 1.0
    table[2, CODE["idle"]] = 1.0
    rows = np.zeros(n, dtype=np.int32)
    rows[n // 2:] = 1
    rows[-100:] = 2
    phase = np.full(n, CODE["compute"], dtype=np.uint8)
    phase[5] = CODE["failed"]
    codes = palette.network_phases(rows, table, phase)
    waiting = codes[:n // 2]
    share = {c: np.count_nonzero(waiting == c) / waiting.size for c in np.unique(waiting)}
    assert abs(share[palette.NETWORK_CODE] - 0.21) < 0.015           # TP and DP waits together
    assert abs(share[CODE["compute"]] - 0.60) < 0.015 and abs(share[CODE["bubble"]] - 0.19) < 0.015
    assert codes[5] == CODE["failed"]
    assert (codes[n // 2:-100] == CODE["compute"]).all() and (codes[-100:] == CODE["idle"]).all()
    assert (palette.network_phases(rows, table, phase) == codes).all()
    # a pixel of 8 GPUs draws one phase, and the pixels keep the proportions
    pixels = palette.network_phases(rows, table, phase, 0, 8)[8:n // 2].reshape(-1, 8)
    assert (pixels == pixels[:, :1]).all()
    assert abs(np.count_nonzero(pixels[:, 0] == palette.NETWORK_CODE) / pixels.shape[0] - 0.21) < 0.03
    colours = palette.phase_colour(codes)
    assert (colours[codes == palette.NETWORK_CODE] == palette.NETWORK).all()
    # GPUs drawn big enough to carry their own label: each its phase of most time, as the label names it
    big = palette.network_phases(rows, table, phase, 0, 0)
    assert (big[6:n // 2] == CODE["compute"]).all() and big[5] == CODE["failed"]
    table[0, [CODE["compute"], CODE["tp"], CODE["dp"], CODE["bubble"]]] = (0.40, 0.25, 0.35, 0.0)
    assert (palette.network_phases(rows, table, phase, 0, 0)[6:n // 2] == palette.NETWORK_CODE).all()


@pytest.fixture(scope="module")
def congested(tmp_path_factory: pytest.TempPathFactory) -> str:
    """30 s of congested-fabric sampled every 5 s, as at its 6 h default."""
    out = tmp_path_factory.mktemp("congested") / "run.jsonl.gz"
    with contextlib.redirect_stderr(io.StringIO()):
        code = main(["record", "congested-fabric", "--duration", "30s", "--sample", "5s", "-o", str(out)])
    assert code == 0
    return str(out)


@sync
async def test_congested_fabric_shows_its_network_waits_on_the_map(congested: str) -> None:
    """The phase view of congested-fabric at site zoom: the cells in the 'waiting on the network' colour are
    the share of the time its GPUs wait on the network (the legend's figure), not none."""
    app = app_at(25.0, path=congested)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        lay = heatmap.layout_info
        assert lay.g > 1
        colours = heatmap.pixel_colours(lay)
        shares = heatmap.state.mix.shares(lay.gpu0, lay.gpu1)
        waits = float(sum(shares[PHASES.index(w)] for w in palette.WAITS))
        assert waits > 0.15
        drawn = np.count_nonzero(colours == palette.NETWORK) / colours.size
        assert abs(drawn - waits) < 0.04
        bubble = np.count_nonzero(colours == palette.PHASE_BASE + CODE["bubble"]) / colours.size
        assert abs(bubble - float(shares[CODE["bubble"]])) < 0.04
        await pilot.press("enter", "enter", "enter", "enter")       # node 0: its GPUs labelled
        await pilot.pause()
        lay = heatmap.layout_info
        assert heatmap.view.level == "node" and lay.g == 1 and lay.scale >= 5
        colours = heatmap.pixel_colours(lay)
        assert (colours[1:] == palette.PHASE_BASE + CODE["compute"]).all()       # 0: the cursor
        assert "computin" in "".join(strip.text for strip in heatmap.render_frame())


@sync
async def test_the_phase_legend_names_the_network_waits_and_their_tiers() -> None:
    from clustertop.tui.widgets.legend import Legend

    app = app_at(30.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        legend = rendered(app.screen.query_one(Legend))
        assert "waiting on the network" in legend and "(TP " in legend and "wait TP" not in legend
