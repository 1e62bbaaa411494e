"""Real telemetry: importing Prometheus dumps, and the dashboard watching thousands of exporters.

- import_prometheus_16k_1h_s: `clustertop import prometheus` (run as a user runs it, a child process) of one
  hour of 16,384 GPUs at 15 s, four metrics (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_POWER_USAGE,
  DCGM_FI_DEV_FB_USED, DCGM_FI_PROF_NVLINK_TX_BYTES: one range-query dump each, 241 points per series,
  dcgm-exporter's full label set, every GPU's value different) into a .jsonl.gz. import_prometheus_16k_1h_mb
  is the dumps' size, import_prometheus_16k_1h_peak_mb the importer's peak RSS;
  import_prometheus_16k_2h_peak_mb the peak for two such hours (eight dumps): memory follows the window (one
  hour here), not the files.
- watch_2048_exporters_frame_ms: `clustertop watch --exporter @FILE --interval 5s` over 2,048 fake
  dcgm-exporters (a child process serving each node's page from its own loopback address, 127.77.x.y:9400, 25
  DCGM metrics per GPU), headless at 200x60: the median time of a frame that folds a new 16,384-GPU sample and
  redraws (the app's frame: reducer, panels, then the compositor's render of what changed, as bench_tui times
  it); watch_2048_exporters_frame_max_ms the slowest such frame, watch_2048_exporters_idle_frame_ms the median
  of the frames between samples; the budget is 1000/30 = 33 ms. watch_2048_exporters_round_s is the mean time
  between samples (5 s when every round of 2,048 scrapes fits in the interval) and
  watch_2048_exporters_answered the share of GPUs with data in the last sample.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import orjson

GPUS, PER_NODE, STEP, POINTS = 16384, 8, 15.0, 241
T0 = 1_717_000_000.0
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED",
           "DCGM_FI_PROF_NVLINK_TX_BYTES")
CLUSTER = """\
name = "real-16k"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 16384
gpus_per_node = 8
gpus_per_rack = 16
racks_per_pod = 192
"""


def _labels(metric: str, gpu: int) -> dict[str, str]:
    node, slot = divmod(gpu, PER_NODE)
    return {"__name__": metric, "DCGM_FI_DRIVER_VERSION": "550.54.15", "Hostname": f"dgx-{node + 1:04d}",
            "UUID": f"GPU-{node:04x}{slot:04x}-5e2f-4b7a-9c1d-3f6a8e0b2d71", "device": f"nvidia{slot}",
            "gpu": str(slot), "instance": f"10.{node // 250}.{node % 250}.1:9400", "job": "dcgm-exporter",
            "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"00000000:{0x18 + slot:02X}:00.0"}


def _dump(path: Path, metric: str, hour: int, rng: np.random.Generator) -> int:
    """One metric's range query over one hour: every GPU a series of 241 points (the last is the next hour's
    first, as consecutive range queries overlap by one step)."""
    t = T0 + hour * 3600 + STEP * np.arange(POINTS)
    stamps = [f"{x:.0f}" for x in t]
    with open(path, "wb") as f:
        f.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
        for gpu in range(GPUS):
            if metric == "DCGM_FI_DEV_GPU_UTIL":
                values = [str(v) for v in rng.integers(0, 101, POINTS)]
            elif metric == "DCGM_FI_DEV_POWER_USAGE":
                values = [f"{v:.3f}" for v in rng.uniform(90, 700, POINTS)]
            elif metric == "DCGM_FI_DEV_FB_USED":
                values = [str(v) for v in rng.integers(60000, 78000, POINTS)]
            else:
                values = [f"{v:.0f}" for v in rng.uniform(0, 4.5e11, POINTS)]
            series = {"metric": _labels(metric, gpu), "values": [[int(s), v] for s, v in zip(stamps, values)]}
            f.write((b"," if gpu else b"") + orjson.dumps(series))
        f.write(b"]}}")
    return path.stat().st_size


def _import(dumps: list[Path], cluster: Path, out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of `clustertop import prometheus`, run as a child process."""
    code = textwrap.dedent("""\
        import resource, sys, time
        from clustertop.cli import main
        start = time.perf_counter()
        rc = main(sys.argv[1:])
        print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        sys.exit(rc)
    """)
    done = subprocess.run([sys.executable, "-c", code, "import", "prometheus", *map(str, dumps), "--cluster",
                           str(cluster), "-o", str(out)], capture_output=True, text=True, check=True)
    seconds, peak = done.stdout.split()
    return float(seconds), float(peak)


def bench_import() -> dict[str, float]:
    rng = np.random.default_rng(18)
    with tempfile.TemporaryDirectory(prefix="clustertop-bench-") as tmp:
        directory = Path(tmp)
        cluster = directory / "cluster.toml"
        cluster.write_text(CLUSTER)
        hour1 = [directory / f"{m}-0.json" for m in METRICS]
        size = sum(_dump(path, m, 0, rng) for path, m in zip(hour1, METRICS))
        seconds, peak = _import(hour1, cluster, directory / "real.jsonl.gz")
        hour2 = [directory / f"{m}-1.json" for m in METRICS]
        for path, m in zip(hour2, METRICS):
            _dump(path, m, 1, rng)
        _, peak2 = _import(hour2 + hour1, cluster, directory / "real2.jsonl.gz")
    return {"import_prometheus_16k_1h_s": round(seconds, 2),
            "import_prometheus_16k_1h_mb": round(size / 1e6, 1),
            "import_prometheus_16k_1h_peak_mb": round(peak, 1),
            "import_prometheus_16k_2h_peak_mb": round(peak2, 1)}


# -- watching 2,048 exporters --------------------------------------------------------------------------------

EXPORTERS = 2048
FAKE_EXPORTERS = textwrap.dedent("""\
    import asyncio, resource, sys
    import numpy as np
    n, per_node = int(sys.argv[1]), 8
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    names = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
             "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
             "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
             "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE",
             "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
             "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
             "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"]
    rng = np.random.default_rng(5)
    def page(node, variant):
        lines = []
        for m in names:
            lines.append(f"# HELP {m} {m}.\\n# TYPE {m} gauge")
            for g in range(per_node):
                v = (0.0 if "XID" in m else rng.uniform(0, 1) if "PROF" in m
                     else rng.uniform(0, 100) if "UTIL" in m else rng.uniform(90, 700))
                lines.append(f'{m}{{gpu="{g}",UUID="GPU-{node:04x}{g:04x}-5e2f-4b7a-9c1d-3f6a8e0b2d71",'
                             f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
                             f'Hostname="dgx-{node + 1:04d}",DCGM_FI_DRIVER_VERSION="550.54.15"}} {v:.3f}')
        body = ("\\n".join(lines) + "\\n").encode()
        return (b"HTTP/1.1 200 OK\\r\\nContent-Type: text/plain; version=0.0.4\\r\\nConnection: close\\r\\n"
                b"Content-Length: " + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
    pages = [[page(k, 0), page(k, 1)] for k in range(n)]
    served = [0] * n
    def handler(k):
        async def handle(reader, writer):
            try:
                await reader.readuntil(b"\\r\\n\\r\\n")
                writer.write(pages[k][served[k] % 2]); served[k] += 1
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()
        return handle
    async def main():
        servers = [await asyncio.start_server(handler(k), f"127.77.{k // 250}.{k % 250 + 2}", 9400,
                                              backlog=64)
                   for k in range(n)]
        print("ready", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())
""")


async def _watch_frames(urls_file: Path, cluster: Path, seconds: float) -> dict[str, float]:
    from clustertop.tui.app import ClusterTopApp
    from clustertop.tui.sources.watch import WatchSource

    source = WatchSource("2,048 exporters", ["--exporter", f"@{urls_file}", "--cluster", str(cluster),
                                             "--interval", "5s", "--timeout", "4s"])
    app = ClusterTopApp([source])
    sample_frames: list[float] = []
    idle_frames: list[float] = []
    frame = app.frame

    def timed_frame() -> None:
        before = app.states[0].samples if app.states else 0
        t0 = time.perf_counter()
        frame()
        screen = app.screen
        dirty = {w for w in screen.walk_children() if w._repaint_required}
        screen._compositor.update_widgets(dirty)       # the render the screen's update would do next
        screen._compositor.render_update()
        took = (time.perf_counter() - t0) * 1000
        (sample_frames if app.states[0].samples != before else idle_frames).append(took)

    app.frame = timed_frame      # type: ignore[method-assign]  (the frame timer is set on mount)
    try:
        async with app.run_test(size=(200, 60)) as pilot:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await pilot.pause(0.2)
            state = app.states[0]
            with source.index.lock:
                times = list(source.index.sample_t)
            missing = state.missing("util")
            answered = 1.0 - (float(missing.mean()) if missing is not None else 0.0)
    finally:
        source.close()
    return {"watch_2048_exporters_frame_ms": round(statistics.median(sample_frames), 2),
            "watch_2048_exporters_frame_max_ms": round(max(sample_frames), 2),
            "watch_2048_exporters_idle_frame_ms": round(statistics.median(idle_frames), 2),
            "watch_2048_exporters_samples": float(len(times)),
            "watch_2048_exporters_round_s": round((times[-1] - times[0]) / max(1, len(times) - 1), 2),
            "watch_2048_exporters_answered": round(answered, 4)}


def bench_watch(seconds: float = 32.0) -> dict[str, float]:
    server = subprocess.Popen([sys.executable, "-c", FAKE_EXPORTERS, str(EXPORTERS)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the fake exporters did not start: "
                               f"{server.stderr.read() if server.stderr else ''}")
        with tempfile.TemporaryDirectory(prefix="clustertop-bench-") as tmp:
            urls = Path(tmp) / "exporters.txt"
            urls.write_text("".join(f"http://127.77.{k // 250}.{k % 250 + 2}:9400/metrics\n"
                                    for k in range(EXPORTERS)))
            cluster = Path(tmp) / "cluster.toml"
            cluster.write_text(CLUSTER)
            return asyncio.run(_watch_frames(urls, cluster, seconds))
    finally:
        server.terminate()
        server.wait(timeout=10)


def run() -> dict[str, float]:
    figures = bench_import()
    figures.update(bench_watch())
    return figures


if __name__ == "__main__":
    print(run())
