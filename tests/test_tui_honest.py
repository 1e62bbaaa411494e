"""Every state on screen is honest: the clock never passes the run's end or the live edge, a finished job says
finished, a down job shows no rates, the plan's figures stand in (marked) before the first step, and a piped
recording is a replay from its start."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
from clustertop.engine.stream.state import JobStatus
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.display import DisplayState
from clustertop.tui.playback import Playback
from clustertop.tui.sources.stream import StreamSource, stream_events
from clustertop.tui.widgets.jobs import PLANNED, figures, inference_figures, status
from test_tui_model import header, sample
from tui_pilot import SIZE, app_at, rendered, sync


def test_the_clock_never_passes_the_runs_end_or_the_live_edge_at_top_speed() -> None:
    """Defect: at 1,000,000x the live clock of a 6-hour run read `3d 02:39:05` before snapping back."""
    p = Playback(t=0.0, start=0.0, end=0.0, speed=1e6, follow=True, edge=0.0, lead=10.0, horizon=21600.0)
    end = 0.0
    for _ in range(400):                         # the engine writes 120 simulated seconds a frame
        end = min(21600.0, end + 120.0)
        t = p.tick(1 / 30, end)
        assert p.edge is not None and t <= p.edge <= 21600.0      # the engine's clock, within the run
    assert p.t == 21600.0


@sync
async def test_a_job_at_the_end_of_the_run_says_finished() -> None:
    app = app_at(60.0)                                       # the recording's end (duration 60 s)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        jobs = rendered(app.screen.query_one("#jobs"))
        assert "finished" in jobs and "running" not in jobs
        app.seek(30.0)
        await pilot.pause()
        assert "running" in rendered(app.screen.query_one("#jobs"))


def _serving(down: bool) -> tuple[JobStatus, DisplayState]:
    info = {"name": "serve", "first_gpu": 0, "gpus": 8, "kind": "inference", "requests_per_s": 40.0,
            "ttft_s": 0.2, "tpot_s": 0.03, "mean_batch": 60.0, "batch_limit": 128, "kv_cache_use": 0.7,
            "saturated": False}
    state = DisplayState({"type": "header", "topology": {"gpus": 8, "gpus_per_node": 8}, "jobs": [info],
                          "duration_s": 100.0})
    job = state.jobs["serve"]
    job.running, job.down = True, down
    return job, state


def test_a_down_serving_job_shows_no_rates() -> None:
    """Defect: a down serving job showed its last requests/s, latencies, batch and K/V cache use."""
    job, state = _serving(down=True)
    shown = inference_figures(job, state, 10.0)
    assert all(shown[k] == "—" for k in ("tokens/s", "requests/s", "TTFT", "TPOT", "batch", "KV cache",
                                          "saturated"))
    assert status(job, 10.0)[0].startswith("▲ down")
    job, state = _serving(down=False)
    assert inference_figures(job, state, 10.0)["batch"] == "60/128"


def test_before_the_first_step_the_plans_figures_show_marked_planned() -> None:
    """Defect: before the first step every rate was '—' although the plan's figures are known."""
    h = header()
    h["jobs"][0].update(step_time_s=6.5, mfu=0.4, economics={"tokens_per_s_per_mw": 1e5, "power_mw": 25.0})
    state = DisplayState(h)
    state.fold([{"t": 0.0, "type": "job_start", "job": "train"}])
    shown = figures(state.jobs["train"], state, 1.0)
    assert shown["step time"] == f"6.50 s{PLANNED}" and shown["MFU"] == f"40.0%{PLANNED}"
    assert shown["tokens/s"] == f"2.50M{PLANNED}"
    state.fold([{"t": 7.0, "type": "step", "job": "train", "step": 1, "step_time_s": 7.0, "tokens_per_s": 2e6,
                 "tflops_per_gpu": 400, "mfu": 0.38, "tokens_total": 1.4e7}])
    shown = figures(state.jobs["train"], state, 7.0)
    assert shown["step time"] == "7.00 s" and shown["MFU"] == "38.0%"
    assert status(state.jobs["train"], 0.0)[0] != "○ stopped"


class _SlowPipe(io.RawIOBase):
    """A pipe whose writer is still writing: everything written so far, then it blocks until released."""

    def __init__(self, data: bytes) -> None:
        self.data, self.release = data, threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.data:
            self.release.wait(5)
            return 0
        n = min(len(buffer), len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n


def _lines() -> Iterator[bytes]:
    yield orjson.dumps(header(), option=orjson.OPT_APPEND_NEWLINE)
    for t in range(60):
        yield orjson.dumps(sample(float(t), util=50), option=orjson.OPT_APPEND_NEWLINE)


@sync
async def test_a_piped_recording_replays_from_its_start_and_says_so() -> None:
    """Defect: `record X -o - | replay -` jumped to the end within a second and was labelled LIVE."""
    pipe = _SlowPipe(b"".join(_lines()))
    source = StreamSource("<stdin>", stream_events(io.BufferedReader(pipe), "<stdin>"))
    app = ClusterTopApp([source])
    async with app.run_test(size=SIZE) as pilot:
        started = time.monotonic()
        while source.index.end_t < 59.0 and time.monotonic() - started < 20:   # slower on a loaded machine
            await pilot.pause(0.1)
        await pilot.pause(max(0.2, 0.6 - (time.monotonic() - started)))    # the defect jumped within 1 s
        assert source.index.end_t >= 59.0 and not source.done        # all arrived, the writer still open
        # playing at 1x from the start: no further than the wall seconds since (not at the end, 59 s)
        assert not app.playback.follow and app.playback.t <= time.monotonic() - started + 1.0
        transport = rendered(app.screen.query_one("#transport"))
        assert "LIVE" not in transport and "PLAYING" in transport and "back to live" not in transport
        assert "replay" in app.sub_title
        pipe.release.set()
