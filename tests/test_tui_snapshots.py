"""Snapshot tests of the dashboard's screens, from the small committed recordings in recordings/.

Deterministic: paused at a fixed simulated time, a fixed terminal size, and no wall clock on screen.
Regenerate after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update` and look at
the report before committing.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from clustertop.cli import main
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.sources.recording import RecordingSource

FLAGSHIP_16K = "recordings/flagship-16k.jsonl.gz"
FLAGSHIP_8K = "recordings/flagship-8k.jsonl.gz"
SERVING = "recordings/serving-64.jsonl.gz"
SIZE = (200, 60)


def replay(t: float = 30.0, *paths: str) -> ClusterTopApp:
    sources = [RecordingSource(p) for p in (paths or (FLAGSHIP_16K,))]
    return ClusterTopApp(sources, start_t=t, paused=True)


def test_main_screen(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=SIZE)


def test_main_screen_80x24(snap_compare) -> None:
    """The smallest usual terminal: the side column folds into tabs, the heatmap keeps half the width."""
    assert snap_compare(replay(), terminal_size=(80, 24))


def test_main_screen_120x40(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=(120, 40))


def test_main_screen_200x60(snap_compare) -> None:
    """The fault at 40 s in the phase view with the worst GPUs listed under the map."""
    assert snap_compare(replay(41.0), terminal_size=(200, 60), press=["3", "w"])


def test_zoomed_to_a_pod(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=SIZE, press=["j", "l", "l", "enter"])


def test_zoomed_to_a_node(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=SIZE, press=["l", "l", "enter", "l", "l", "j", "j", "enter",
                                                             "enter"])


def test_phase_colouring_during_a_fault(snap_compare) -> None:
    assert snap_compare(replay(41.0), terminal_size=SIZE, press=["3"])


def test_help(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=SIZE, press=["question_mark"])


def test_compare(snap_compare) -> None:
    assert snap_compare(replay(30.0, FLAGSHIP_16K, FLAGSHIP_8K), terminal_size=SIZE)


def test_too_small_terminal(snap_compare) -> None:
    assert snap_compare(replay(), terminal_size=(59, 19))


def test_after_the_restart(snap_compare) -> None:
    """t = 55 s: the fault at 40 s and the restart at 51 s from the step-3 checkpoint in the log (wrapped,
    with component, cause and work lost); the job panel counts the interruption and the tokens lost."""
    assert snap_compare(replay(55.0), terminal_size=SIZE)


def test_sweep_results_table(snap_compare) -> None:
    from clustertop.engine.sweep.results import read_results
    from clustertop.tui.sweep import SweepApp

    assert snap_compare(SweepApp(read_results("recordings/sweep-16k.jsonl"), "sweep-16k.jsonl"),
                        terminal_size=SIZE)


def test_failed_gpus_at_site_zoom_in_utilization(snap_compare) -> None:
    """The fault at 40 s in the default utilization view: the failed node is red (it wins over its cells'
    mean), the degraded GPUs orange; the legend counts them."""
    assert snap_compare(replay(41.0), terminal_size=SIZE)


def test_search_lands_on_a_gpu(snap_compare) -> None:
    """`/ 9000 enter` at pod zoom: the view moves to pod 2 and the cursor (white) is on GPU 9,000."""
    assert snap_compare(replay(), terminal_size=SIZE, press=["enter", "slash", *"9000", "enter"])


def test_compare_at_80x24(snap_compare) -> None:
    """The smallest usual terminal: one side at a time under the A / B / table tabs, its title naming the
    accelerator and the scale-up; the links panel beside the map."""
    assert snap_compare(replay(30.0, FLAGSHIP_16K, FLAGSHIP_8K), terminal_size=(80, 24), press=["5"])


def test_a_serving_job_in_the_jobs_panel(snap_compare) -> None:
    """inference-serving at 30 s: the jobs panel gives a serving job's own figures (requests/s, TTFT and TPOT
    with their p99, batch against its limit, K/V cache use, saturated), not MFU and step time."""
    assert snap_compare(replay(30.0, SERVING), terminal_size=(120, 40))


@pytest.fixture(scope="module")
def congested(tmp_path_factory: pytest.TempPathFactory) -> str:
    """30 s of congested-fabric sampled every 5 s, as at its 6 h default (a fixed name: the title shows
    it)."""
    out = tmp_path_factory.mktemp("congested") / "congested-fabric.jsonl.gz"
    with contextlib.redirect_stderr(io.StringIO()):
        code = main(["record", "congested-fabric", "--duration", "30s", "--sample", "5s", "-o", str(out)])
    assert code == 0
    return str(out)


def test_congested_fabric_in_the_phase_view(snap_compare, congested: str) -> None:
    """congested-fabric at 25 s in the phase view: its GPUs wait on the network (TP, DP and PP together)
    about a fifth of the time, and about a fifth of the map's cells show that colour, scattered among
    computing and the bubble; the links panel highlights the degraded spine of pod 2."""
    assert snap_compare(replay(25.0, congested), terminal_size=(120, 40), press=["3"])
