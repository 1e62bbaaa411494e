"""Readings checked against physical bounds (issue 27): a power reading of 1e12 W or dcgm-exporter's blank
sentinel is missing, not a 2,112,000 MW site, and counted in one warning; DCGM_FI_PROF_GR_ENGINE_ACTIVE is the
utilization after SM_ACTIVE and before GPU_UTIL; memory is written to 0.1 GB."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from clustertop.cli import main
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import dcgm

CLUSTER = """\
name = "site"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 8
gpus_per_node = 8
gpus_per_rack = 8
"""
SENTINEL = "9223372036854775794"          # dcgm-exporter's blank int64


def _series(metric: str, gpu: int, values: list[str]) -> dict:
    return {"metric": {"__name__": metric, "Hostname": "n1", "gpu": str(gpu)},
            "values": [[1_717_000_000 + 15 * k, v] for k, v in enumerate(values)]}


def _import(tmp_path: Path, series: list[dict[str, Any]]) -> Path:
    """`clustertop import prometheus` of one range-query dump of `series` onto CLUSTER: the recording."""
    dump = tmp_path / "d.json"
    dump.write_bytes(orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}))
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER)
    out = tmp_path / "real.jsonl"
    assert main(["import", "prometheus", str(dump), "--cluster", str(cluster), "-o", str(out)]) == 0
    return out


def test_readings_out_of_bounds_are_missing_and_counted_in_one_warning(tmp_path: Path, capsys: Any) -> None:
    series = [_series(dcgm.POWER, g, ["500", "1e12" if g == 1 else SENTINEL if g == 2 else "510"])
              for g in range(8)]
    series += [_series(dcgm.GPU_UTIL, g, ["50", "150" if g == 3 else "60"]) for g in range(8)]
    series += [_series(dcgm.FB_USED, g, ["76200", SENTINEL if g == 4 else "76200"]) for g in range(8)]
    out = _import(tmp_path, series)
    err = capsys.readouterr().err
    assert err.count("outside their physical bounds") == 1, err
    assert "4 readings outside" in err and "DCGM_FI_DEV_POWER_USAGE 2" in err
    state = Reader(str(out)).fold()
    assert state.missing("power_w")[1] and state.missing("power_w")[2] and not state.missing("power_w")[0]
    assert state.missing("util")[3] and not state.missing("util")[2]
    assert state.missing("memory_gb")[4]
    samples = [e for e in Reader(str(out)).events() if e["type"] == "sample"]
    assert samples[1]["site_mw"] < 0.1                     # 8 GPUs: kilowatts, not 2,112,000 MW
    assert samples[1]["memory_gb"]["v"][0] == 79.9         # 76,200 MiB, rounded in float64


def test_gr_engine_active_is_the_utilization_after_sm_active(http_server: Any, tmp_path: Path) -> None:
    lines = []
    for g in range(8):
        lines.append(f'{dcgm.GPU_UTIL}{{gpu="{g}",Hostname="n1"}} 100')
        lines.append(f'{dcgm.GR_ENGINE}{{gpu="{g}",Hostname="n1"}} 0.75')
        if g == 0:
            lines.append(f'{dcgm.SM_ACTIVE}{{gpu="{g}",Hostname="n1"}} 0.5')
        if g == 1:
            lines.append(f'{dcgm.POWER}{{gpu="{g}",Hostname="n1"}} {SENTINEL}')
    page = ("\n".join(lines) + "\n").encode()
    server = http_server(lambda path, query: (200, "text/plain", page))
    out = tmp_path / "w.jsonl"
    done = subprocess.run([sys.executable, "-m", "clustertop", "watch", "--exporter", f"{server.url}/metrics",
                           "--interval", "0.2s", "--duration", "0.2s", "-o", str(out)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "2 readings outside their physical bounds" in done.stderr          # two rounds, GPU 1's power
    state = Reader(str(out)).fold()
    assert np.allclose(state.util, [0.5] + [0.75] * 7)
    assert state.missing("power_w")[1]


def test_nvlink_bandwidth_total_gives_the_links_where_the_byte_counters_are_absent(
        tmp_path: Path, capsys: Any) -> None:
    """dcgm-exporter's default DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (MB/s, both directions together) is half a
    GPU's load per direction where it has no DCGM_FI_PROF_NVLINK_*_BYTES; where it has those, they win; a
    total beyond 1.5 x both directions' line rate (a cumulative count) is out of bounds, not a full link."""
    series = [_series(dcgm.GPU_UTIL, g, ["50", "50"]) for g in range(8)]
    series += [_series(dcgm.NVLINK_TX, 0, ["225e9", "225e9"]), _series(dcgm.NVLINK_TX, 4, ["45e9", "45e9"])]
    series += [_series("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", g, [v, v])
               for g, v in ((1, "450000"), (2, "90000"), (3, "1e12"), (4, "900000"))]
    out = _import(tmp_path, series)
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL 2" in capsys.readouterr().err    # GPU 3's, twice
    samples = [e for e in Reader(str(out)).events() if e["type"] == "sample"]
    # GPUs 0 and 1 at half of NVLink 4's 450 GB/s, 2 and 4 at a tenth; 3 and the others no reading
    assert samples[0]["links"]["node"] == [0.3] and samples[1]["links"]["node"] == [0.3]
