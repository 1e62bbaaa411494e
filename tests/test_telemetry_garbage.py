"""Pages and dumps that are not what they claim (binary garbage, even with lines that start with a letter;
text that is not the exposition format; JSON with garbage after it) are rejected whole: an exporter's page is
a `target_down` event once, the GPUs of its host missing; a first round of nothing else, a dump or a file of
URLs is one line and exit code 2. Servers on 127.0.0.1 only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from clustertop.cli import main
from clustertop.engine.stream.reader import Reader
from clustertop.engine.telemetry import dcgm, exposition

GOOD = (f"# HELP {dcgm.GPU_UTIL} GPU utilization (in %).\r\n# TYPE {dcgm.GPU_UTIL} gauge\r\n\n"
        + "".join(f'{dcgm.GPU_UTIL}{{gpu="{k}",UUID="GPU-{k}",modelName="NVIDIA H100 80GB HBM3",'
                  f'Hostname="n1",note="a }} and \\"quote\\""}} {10 * k}\n' for k in range(8))
        + "node_load1 NaN\nother_metric +Inf 1700000000000\n").encode()
GARBAGE = [
    b"abc\x00\xff\xfe\x01\x02\nxyz\x9c\x80\x00",                 # binary, a line starts with a letter
    GOOD + b"\x1b[2J\x00",                                                 # a good page with binary after it
    GOOD + b"Content-Type: text/html\n",                                   # a line of text that is no sample
    b"hello world\nthis is not a metrics page\n",
    GOOD.replace(b"n1", b"n\xff\xfe1"),                                    # not UTF-8
]


def test_a_page_of_the_text_format_passes_and_garbage_is_rejected_whole() -> None:
    samples = exposition.parse(GOOD, dcgm.METRICS)
    assert len(samples) == 8 and samples[3][2] == 30.0 and samples[3][1]["note"] == 'a } and "quote"'
    for page in GARBAGE:
        with pytest.raises(exposition.PageError):
            exposition.parse(page, dcgm.METRICS)


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustertop", "watch", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_an_exporter_serving_garbage_is_one_target_down_event_and_its_gpus_missing(
        http_server: Any, tmp_path: Path) -> None:
    good = http_server(lambda path, query: (200, "text/plain", GOOD))
    bad = http_server(lambda path, query: (200, "text/plain", GARBAGE[0]))
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", f"{good.url}/metrics,{bad.url}/metrics", "--interval", "0.2s",
                 "--duration", "0.6s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    reader = Reader(str(out))
    events = list(reader.events())
    down = [e for e in events if e["type"] == "target_down"]
    assert len(down) == 1 and "binary data" in down[0]["error"], down
    samples = [e for e in events if e["type"] == "sample"]
    assert len(samples) == 4
    hosts = reader.header["telemetry"]["hosts"]
    node = hosts.index(f"127.0.0.1:{bad.port}")
    for sample in samples:
        missing = np.repeat(sample["missing"]["util"]["v"], sample["missing"]["util"]["n"]).astype(bool)
        assert missing[node * 8:node * 8 + 8].all() and not missing[(1 - node) * 8:][:8].any()


@pytest.mark.parametrize("page", GARBAGE[:3], ids=["binary", "binary-after-a-page", "a-text-line"])
def test_a_first_round_of_garbage_is_one_line(http_server: Any, tmp_path: Path, page: bytes) -> None:
    server = http_server(lambda path, query: (200, "text/plain", page))
    out = tmp_path / "w.jsonl"
    done = watch("--exporter", f"{server.url}/metrics", "--interval", "0.2s", "-o", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "expected a Prometheus metrics page" in done.stderr
    assert all(c.isprintable() for c in done.stderr.rstrip("\n")) and not out.exists()


def test_a_file_of_urls_that_is_binary_is_one_line(tmp_path: Path) -> None:
    urls = tmp_path / "exporters.txt"
    urls.write_bytes(b"http://127.0.0.1:9/metrics\n\x00\xff\xfe\x01garbage\n")
    done = watch("--exporter", f"@{urls}", "-o", str(tmp_path / "w.jsonl"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{urls}: is binary data (not UTF-8 text)" in done.stderr


CLUSTER = ('name = "site"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 16\ngpus_per_node = 8\n'
           "gpus_per_rack = 16\n")


@pytest.mark.parametrize("after", [b"\x00\xff\xfe garbage", b"\nabc", b",{}"], ids=["binary", "text", "json"])
def test_a_dump_with_garbage_after_or_inside_its_json_is_one_line_and_writes_nothing(
        tmp_path: Path, capsys: Any, after: bytes) -> None:
    series = [orjson.dumps({"metric": {"__name__": dcgm.GPU_UTIL, "Hostname": "a", "gpu": str(k)},
                            "values": [[1, "2"], [2, "3"]]}) for k in range(2)]
    head = b'{"status":"success","data":{"resultType":"matrix","result":['
    cluster = tmp_path / "site.toml"
    cluster.write_text(CLUSTER)
    for n, content in enumerate([head + series[0] + b"]}}" + after,
                                 head + series[0] + b"," + after + series[1] + b"]}}"]):
        dump = tmp_path / f"d{n}.json"
        dump.write_bytes(content)
        out = tmp_path / f"o{n}.jsonl"
        assert main(["import", "prometheus", str(dump), "--cluster", str(cluster), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(dump) in err and "is not valid JSON" in err, err
        assert "b'" not in err and all(c.isprintable() for c in err.rstrip("\n")), err
        assert not out.exists()
