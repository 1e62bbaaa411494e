"""Dashboard speed: the render work of one frame after a state change, and how far live mode trails the
engine.

- tui_frame_16k_ms: median time to redraw one frame of the main screen, headless at 200x60, with the
  16,384-GPU flagship (TP8 PP16 DP128, 1F1B stages filling and draining) right after a new sample changed the
  state: the panels' update and the compositor's update of what changed (the heatmap's render_lines:
  aggregation, colours, segments; the panels whose text changed), as the screen's update timer does it.
  Pilot.pause() is not timed: it waits for the next frame tick (pacing, not cost).
- tui_frame_16k_heatmap_ms: the heatmap's share of it.
- tui_frame_500k_ms: the same for a 524,288-GPU site (6 buildings) at site zoom.
- live_lag_s: `clustertop run` at maximum speed: how long after the engine's reader receives an event the
  screen shows its simulated time (median over ~8 s), and live_rss_growth_mb over that time (memory stays
  flat).
  Needs `clustertop record ... -o -`; omitted with a note on stderr while it is not available.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import Any

import numpy as np
from clustertop.engine.config.phases import CODE
from clustertop.engine.stream import schema
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.index import EventIndex
from clustertop.tui.sources import Source
from clustertop.tui.widgets.heatmap import Heatmap

SIZE = (200, 60)
FRAMES = 40


def _site(gpus: int, per_building: int, jobs: list[tuple[int, int, int, int]]) -> dict[str, Any]:
    """A header for a synthetic cluster of H100 nodes (8 per node, 16 per rack, pods of 3,072)."""
    topology = {"gpus": gpus, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 3072,
                "gpus_per_building": per_building, "nodes": gpus // 8, "racks": gpus // 16,
                "pods": -(-gpus // 3072), "buildings": -(-gpus // per_building)}
    entries, first = [], 0
    for i, (tp, cp, pp, dp) in enumerate(jobs):
        n = tp * cp * pp * dp
        entries.append({"name": f"job{i}", "first_gpu": first, "gpus": n, "tp": tp, "cp": cp, "pp": pp,
                        "dp": dp, "ep": 1, "model": "llama3.1-405b"})
        first += n
    return {"type": "header", "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
            "scenario": {"name": "bench", "cluster": {"gpu": {"name": "h100-sxm-80gb", "tdp_w": 700.0,
                                                                "hbm_gb": 80.0}}},
            "topology": topology, "jobs": entries, "seed": 1, "sample_interval_s": 1.0, "duration_s": 3600.0}


def _sample(header: dict[str, Any], t: float) -> dict[str, Any]:
    """Per-GPU phases of 1F1B at `t` in a 7 s step: stage p starts p slots late and drains p slots early."""
    gpus = header["topology"]["gpus"]
    phase = np.full(gpus, CODE["idle"], dtype=np.uint8)
    x = (t % 7.0) / 7.0
    for job in header["jobs"]:
        local = np.arange(job["gpus"])
        stage = local // (job["tp"] * job["cp"]) % job["pp"]
        start, end = stage * 0.03, 0.9 - (job["pp"] - 1 - stage) * 0.03
        ph = np.where((x >= start) & (x < end), CODE["compute"], CODE["bubble"]).astype(np.uint8)
        ph[(ph == CODE["compute"]) & ((stage + int(x * 160)) % 9 == 0)] = CODE["tp"]
        phase[job["first_gpu"]:job["first_gpu"] + job["gpus"]] = ph
    phase[gpus // 3: gpus // 3 + 8] = CODE["failed"]
    util = np.select([phase == CODE["compute"], phase == CODE["tp"]], [97, 35], 3)
    power = np.select([phase == CODE["compute"], phase == CODE["idle"]], [690, 90], 260)
    return {"t": t, "type": "sample", "util": schema.rle_encode(util), "power_w": schema.rle_encode(power),
            "phase": schema.rle_encode(phase),
            "links": {"node": 0.4, "leaf": 0.3, "spine": 0.5, "core": [0.9] * 6},
            "site_mw": float(power.sum()) * 1.2e-6}


def _source(header: dict[str, Any], samples: int) -> Source:
    index = EventIndex(header)
    for k in range(samples):
        index.add(_sample(header, k * 0.25))
    index.finish()
    return Source("bench", index)


async def _frames(header: dict[str, Any]) -> tuple[float, float]:
    """Median (frame, heatmap) milliseconds over FRAMES state changes."""
    source = _source(header, 2 * FRAMES + 2)
    app = ClusterTopApp([source], start_t=0.0, paused=True)
    totals, heatmaps = [], []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        heatmap = screen.query_one(Heatmap)
        for k in range(1, FRAMES + 1):
            app.playback.seek(k * 0.5)
            app.set_time(app.playback.t)               # the state changes (not timed: that is the reducer)
            t0 = time.perf_counter()
            # panels and heatmap read the new state; changed ones refresh
            screen.update_frame()
            dirty = {w for w in screen.walk_children() if w._repaint_required}
            screen._compositor.update_widgets(dirty)   # what the screen's update timer does next...
            # ...re-render the dirty regions (the heatmap's every line)
            screen._compositor.render_update()
            totals.append((time.perf_counter() - t0) * 1000)
            await pilot.pause()
            app.playback.seek(k * 0.5 + 0.25)
            app.set_time(app.playback.t)
            t0 = time.perf_counter()
            heatmap.show(app.states[0])
            heatmap.render_lines(heatmap.size.region)  # the heatmap alone: aggregate, colour, segments
            heatmaps.append((time.perf_counter() - t0) * 1000)
            await pilot.pause()
    return statistics.median(totals), statistics.median(heatmaps)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _record_available() -> bool:
    probe = subprocess.run([sys.executable, "-m", "clustertop", "record", "llama3-405b-16k", "-o", "-",
                            "--duration", "60s"], capture_output=True, timeout=300, check=False)
    if probe.returncode != 0:
        message = probe.stderr.decode(errors="replace").strip().splitlines()
        print(f"bench_tui: live_lag_s skipped: {message[-1] if message else 'record failed'}",
              file=sys.stderr)
        return False
    return True


async def _live_lag(seconds: float = 8.0, command: list[str] | None = None) -> tuple[float, float]:
    from clustertop.tui.sources.live import LiveSource, record_command

    command = command or record_command("llama3-405b-16k", extra=["--duration", "54d"])
    source = LiveSource("llama3-405b-16k", command=command)
    arrivals: deque[tuple[float, float]] = deque(maxlen=100_000)
    add = source.index.add

    def timed_add(event: dict[str, Any]) -> None:
        add(event)
        arrivals.append((time.monotonic(), float(event["t"])))

    source.index.add = timed_add   # type: ignore[method-assign]
    app = ClusterTopApp([source], speed=1e6)
    lags: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)
        rss0 = _rss_mb()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await pilot.pause(0.1)
            shown = app.playback.t
            now = time.monotonic()
            received = next((wall for wall, t in list(arrivals) if t >= shown), now)
            lags.append(now - received)
        rss1 = _rss_mb()
    source.close()
    return statistics.median(lags), rss1 - rss0


def run() -> dict[str, float]:
    flagship = _site(16384, 16384, [(8, 1, 16, 128)])
    site = _site(524288, 98304, [(8, 1, 16, 1024), (8, 1, 16, 1024), (8, 1, 8, 1024), (8, 2, 16, 256)])
    frame_16k, heat_16k = asyncio.run(_frames(flagship))
    frame_500k, heat_500k = asyncio.run(_frames(site))
    figures = {"tui_frame_16k_ms": round(frame_16k, 2), "tui_frame_16k_heatmap_ms": round(heat_16k, 2),
               "tui_frame_500k_ms": round(frame_500k, 2), "tui_frame_500k_heatmap_ms": round(heat_500k, 2)}
    if _record_available():
        lag, growth = asyncio.run(_live_lag())
        figures["live_lag_s"] = round(lag, 3)
        figures["live_rss_growth_mb"] = round(growth, 1)
    return figures


if __name__ == "__main__":
    print(run())
