"""Writes the hostile corpus: scenario files, recordings and sweep results an attacker would try, and
cases.tsv, what each case runs and how it must end. Run from the repository root:
`python tests/hostile/make.py`.

cases.tsv has one case per line: name, command (FILE is the case's file, OUT a fresh output path), the exit
code (0 or 2) and a fragment of the one line a refused case prints (after the file's name).
tests/test_hostile.py runs every case as a user would, plus the cases that need a FIFO, a device or tens of
megabytes, made at test time.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

from clustertop.cli import main as main_cli

HERE = Path(__file__).parent
REPO = HERE.parent.parent
BASE = """name = "tiny"
duration = "2s"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 16
[[jobs]]
model = "llama3.1-8b"
seq_len = 4096
global_batch = 16
tp = 8
"""
ESTIMATE, RECORD, EXPORT, REPLAY = "estimate FILE", "record FILE -o OUT", "export FILE -o OUT", "replay FILE"
cases: list[tuple[str, str, int, str]] = []


def toml(name: str, text: str, code: int = 2, fragment: str = "", command: str = ESTIMATE) -> None:
    (HERE / "scenarios" / f"{name}.toml").write_text(text, encoding="utf-8")
    cases.append((f"scenarios/{name}.toml", command, code, fragment))


def raw(folder: str, name: str, data: bytes, code: int, fragment: str, *commands: str) -> None:
    (HERE / folder / name).write_bytes(data)
    for command in commands:
        cases.append((f"{folder}/{name}", command, code, fragment))


def with_job(extra: str) -> str:
    return BASE + extra + "\n"


def scenarios() -> None:
    _nesting_and_sizes()
    _nan_and_infinity()
    _text_that_drives_a_terminal()
    _syntax_and_encodings()
    _wrong_types_and_huge_runs()


def _nesting_and_sizes() -> None:
    toml("deep_array", "a = " + "[" * 5_000 + "]" * 5_000 + "\n", fragment="nested more than 16")
    toml("deep_inline", "a = " + "{b = " * 2000 + "1" + "}" * 2000 + "\n", fragment="nested more than 16")
    toml("deep_mixed", "a = " + "[{b = " * 1000 + "1" + "}]" * 1000 + "\n", fragment="nested more than 16")
    toml("dotted_key", "a" + ".a" * 5_000 + " = 1\n", fragment="key path of more than 16 parts")
    toml("deep_header", "[" + "a." * 5_000 + "a]\n", fragment="table header of more than 16 parts")
    toml("deep_array_table", "[[" + "a." * 5_000 + "a]]\n", fragment="table header of more than 16 parts")
    toml("long_key_in_inline", "a = {" + ".".join(["b"] * 20) + " = 1}\n",
         fragment="key path of more than 16")
    toml("tp_1e400", with_job("pp = 1" + "0" * 400), fragment="a number of 401 digits")
    toml("int_5000_digits", with_job("pp = " + "9" * 5000), fragment="a number of 5,000 digits")
    toml("int_hex_huge", with_job("pp = 0x" + "f" * 300), fragment="is too large")
    toml("int_2_64", with_job("pp = 18446744073709551616"), fragment="is too large")
    toml("int_negative_huge", with_job("pp = -18446744073709551616"), fragment="is too large")
    toml("seed_2_63", "seed = 9223372036854775808\n" + BASE, fragment="seed")
    toml("float_1e400", with_job("request_rate = 1e400"), fragment="infinity")
    toml("gpus_auto_huge_budget", BASE.replace("gpus = 16", 'gpus = "auto"\nsite_power_budget_mw = 100000.0'),
         fragment="beyond the supported maximum of 10,000,000 GPUs")
    toml("gpus_auto_max_budget", BASE.replace("gpus = 16", 'gpus = "auto"\nsite_power_budget_mw = 1e308'),
         fragment="site_power_budget_mw")
    toml("gpus_above_max", BASE.replace("gpus = 16", "gpus = 10000008"), fragment="supported maximum")
    toml("pp_above_max", with_job("pp = 20000"), fragment="supported maximum of 16,384")
    toml("many_jobs", 'name = "many"\n' + "jobs = [" + ",".join(
        '{model = "llama3.1-8b", seq_len = 8, global_batch = 1, gpus = 8}' for _ in range(1001))
         + ']\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8008\n',
         fragment="1,001 jobs; expected at most 1,000")
    toml("rate_scale_max", BASE.replace('duration = "2s"', 'duration = "1h"')
         .replace("gpus = 16", "gpus = 16384")
         .replace("global_batch = 16", "global_batch = 2048") + "[faults]\nrate_scale = 1000000.0\n",
         command=RECORD, fragment="interruptions")
    toml("inject_many", BASE + "[faults]\n" + "".join(f'[[faults.inject]]\nat = "{1 + i % 100}s"\n'
                                                      f'gpu = {i % 16}\n' for i in range(5001)),
         command=RECORD, fragment="5,001 injected faults")
    toml("batch_1e8", with_job("global_batch = 100000000").replace("global_batch = 16\n", ""), code=0)
    toml("batch_1e8_pp2", with_job("global_batch = 100000000\npp = 2").replace("global_batch = 16\n", ""),
         code=0)
    toml("batch_1e8_auto", with_job('global_batch = 100000000\nmicro_batch = "auto"\nrecompute = "auto"')
         .replace("global_batch = 16\n", ""), code=0)
    toml("batch_1e8_gpipe", with_job('global_batch = 100000000\npp = 2\nschedule = "gpipe"')
         .replace("global_batch = 16\n", ""), code=0)
    toml("huge_pipeline", 'name = "x"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 16384\n'
         "[[jobs]]\nseq_len = 4096\n"
         "pp = 16384\nglobal_batch = 256\n[jobs.model]\nlayers = 100000\nhidden = 1000000\nheads = 1\n"
         "ffn = 10000000\nvocab = 100000000\n", fragment="of schedule arrays; expected at most")
    toml("huge_model_oom", 'name = "x"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n'
         "[[jobs]]\nseq_len = 10000000\n"
         "global_batch = 8\n[jobs.model]\nlayers = 100000\nhidden = 1000000\nheads = 1\nffn = 10000000\n"
         "vocab = 100000000\n", code=0)


def _nan_and_infinity() -> None:
    """NaN and infinities in every number a scenario takes."""
    numbers = {"cluster": ["pod_oversubscription", "rack_oversubscription", "building_oversubscription",
                           "pue", "site_power_budget_mw", "gpus_per_node", "gpus_per_rack", "racks_per_pod",
                           "ecmp_flows", "nics_per_node", "pods_per_building"],
               "jobs": ["seq_len", "global_batch", "request_rate", "prompt_tokens", "output_tokens",
                        "max_batch", "micro_batch", "tp", "cp", "pp", "dp", "ep", "virtual_stages", "zero",
                        "first_gpu", "gpus"],
               "faults": ["rate_scale", "spare_nodes", "planned_per_day"], "checkpoint": ["storage_tb_s"],
               "variability": ["straggler_sigma", "slow_gpu_fraction", "slow_gpu_factor",
                               "diurnal_amplitude"]}
    specials = ["nan", "inf", "-inf", "+nan"]
    k = 0
    for section, keys in numbers.items():
        for key in keys:
            value = specials[k % len(specials)]
            k += 1
            if section == "cluster":
                text = BASE.replace('gpu = "h100-sxm-80gb"\n', f'gpu = "h100-sxm-80gb"\n{key} = {value}\n')
            elif section == "jobs":
                text = BASE.replace("seq_len = 4096\n", f"seq_len = 4096\n{key} = {value}\n") \
                    if key != "seq_len" else BASE.replace("seq_len = 4096", f"seq_len = {value}")
            else:
                text = BASE + f"[{section}]\n{key} = {value}\n"
            toml(f"nan_{section}_{key}", text, fragment=key)
    toml("nan_model_layers", BASE.replace('model = "llama3.1-8b"\n', "") + "[jobs.model]\nlayers = nan\n"
         "hidden = 4096\nheads = 32\nffn = 14336\nvocab = 128000\n", fragment="layers")
    toml("nan_inject_gpu", BASE + "[[faults.inject]]\nat = \"1s\"\ngpu = inf\n", fragment="gpu")
    toml("nan_degraded", BASE.replace("gpus = 16\n", 'gpus = 16\n[[cluster.degraded]]\ntier = "leaf"\n'
                                      "capacity = nan\n"), fragment="capacity")


def _text_that_drives_a_terminal() -> None:
    """Unicode, escapes and newlines in keys and values."""
    toml("key_newline_forges_line", BASE + '"x\\nclustertop: all good" = 1\n', fragment=r"\n")
    toml("key_escape_sequence", BASE + '"\\u001b[2J\\u001b[31mred" = 1\n', fragment=r"\x1b[2J")
    toml("key_bidi_override", BASE + '"\\u202eevil" = 1\n', fragment=r"\u202e")
    toml("key_zero_width", BASE + '"tp\\u200b" = 8\n', fragment=r"\u200b")
    toml("key_bell_backspace", BASE + '"a\\u0007\\u0008b" = 1\n', fragment=r"\x07")
    toml("key_carriage_return", BASE + '"all good\\r" = 1\n', fragment=r"\r")
    toml("key_emoji", BASE + '"\U0001f680" = 1\n', fragment="unknown key")
    toml("name_escape", BASE.replace('name = "tiny"', 'name = "\\u001b]0;pwned\\u0007"'), fragment=r"\x1b]0;")
    toml("name_newline", BASE.replace('name = "tiny"', 'name = "a\\nclustertop: fine"'),
         fragment="plain text")
    toml("job_name_escape", with_job('name = "\\u001b[2Jjob"'), fragment="jobs[0].name")
    toml("job_name_traversal", with_job('name = "../../../../tmp/x"'), code=0)
    toml("model_source_escape", BASE.replace('model = "llama3.1-8b"\n', "")
         + '[jobs.model]\nsource = "\\u009b2J"\n'
         "layers = 32\nhidden = 4096\nheads = 32\nffn = 14336\nvocab = 128000\n", fragment=r"\x9b")
    toml("description_escape", 'description = "x\\u001b[2J"\n' + BASE, fragment="description")
    toml("description_lines", 'description = """two\nlines\tand a tab"""\n' + BASE, code=0)
    toml("unknown_value_escape", with_job('precision = "\\u001b[31mfp8"'), fragment="precision")
    toml("gpu_name_escape", BASE.replace('gpu = "h100-sxm-80gb"', 'gpu = "h100\\u001b[2J"'),
         fragment="cluster.gpu")
    toml("duration_escape", BASE.replace('duration = "2s"', 'duration = "2s\\u001b[2J"'), fragment="duration")


def _syntax_and_encodings() -> None:
    toml("duplicate_key", BASE + "tp = 4\n", fragment="TOML syntax error")
    toml("duplicate_table", BASE + "[cluster]\ngpu = \"a100\"\n", fragment="TOML syntax error")
    toml("unterminated_string", BASE + 'x = "abc\n', fragment="TOML syntax error")
    toml("unterminated_bracket_string", 'a = "[[[[[[[[[[[[[[[[[[[[[[[[[\n', fragment="")
    toml("unterminated_array", "a = [1, 2,\n", fragment="TOML syntax error")
    toml("crlf", BASE.replace("\n", "\r\n"), code=0)
    toml("cr_only", BASE.replace("\n", "\r"), fragment="TOML syntax error")
    (HERE / "scenarios" / "bom.toml").write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    cases.append(("scenarios/bom.toml", ESTIMATE, 2, "TOML syntax error"))
    (HERE / "scenarios" / "utf16.toml").write_bytes(BASE.encode("utf-16"))
    cases.append(("scenarios/utf16.toml", ESTIMATE, 2, "binary file"))
    (HERE / "scenarios" / "nul_byte.toml").write_bytes(BASE.encode() + b"\x00")
    cases.append(("scenarios/nul_byte.toml", ESTIMATE, 2, "binary file"))
    toml("empty", "", fragment="is empty")
    toml("only_comments", "# nothing\n# here\n", fragment="name")
    toml("whitespace", " \n\t\n", fragment="is empty")
    toml("surrogate_escape", BASE + 'x = "\\ud800"\n', fragment="TOML syntax error")


def _wrong_types_and_huge_runs() -> None:
    """Wrong types everywhere, and runs too big to record."""
    for name, text, fragment in [
        ("cluster_int", BASE.replace("[cluster]\n", "cluster = 5\n[cluster2]\n"), "cluster"),
        ("jobs_string", 'name = "x"\njobs = "all"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n', "jobs"),
        ("jobs_ints", 'name = "x"\njobs = [1, 2]\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n', "jobs[0]"),
        ("jobs_empty", 'name = "x"\njobs = []\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n', "jobs"),
        ("model_int", BASE.replace('model = "llama3.1-8b"', "model = 5"), "model"),
        ("model_array", BASE.replace('model = "llama3.1-8b"', "model = []"), "model"),
        ("gpus_bool", BASE.replace("gpus = 16", "gpus = true"), "cluster.gpus"),
        ("gpus_string", BASE.replace("gpus = 16", 'gpus = "16"'), "cluster.gpus"),
        ("gpus_date", BASE.replace("gpus = 16", "gpus = 1979-05-27"), "cluster.gpus"),
        ("seq_len_float", BASE.replace("seq_len = 4096", "seq_len = 4096.5"), "seq_len"),
        ("faults_array", BASE + "faults = [1]\n", "faults"),
        ("inject_string", BASE + '[faults]\ninject = "now"\n', "faults.inject"),
        ("degraded_int", BASE.replace("gpus = 16\n", "gpus = 16\ndegraded = 5\n"), "cluster.degraded"),
        ("name_table", BASE.replace('name = "tiny"', "name = {a = 1}"), "name"),
        ("seed_negative", "seed = -1\n" + BASE, "seed"),
        ("zero_gpus", BASE.replace("gpus = 16", "gpus = 0"), "cluster.gpus"),
        ("negative_tp", BASE.replace("tp = 8", "tp = -8"), "tp"),
        ("format_future", "format = 2\n" + BASE, "format"),
        ("first_gpu_beyond", with_job("first_gpu = 9999999\ngpus = 8"), "jobs[0]"),
        ("inject_gpu_beyond", BASE + '[[faults.inject]]\nat = "1s"\ngpu = 10000000\n', "gpu"),
        ("inject_cause_escape", BASE + '[[faults.inject]]\nat = "1s"\ngpu = 1\ncause = "\\u001b[2J"\n',
         "cause"),
        ("duplicate_job_names", BASE.replace("gpus = 16", "gpus = 32").replace("tp = 8", "tp = 8\ngpus = 16")
         + '[[jobs]]\nname = "job0"\nmodel = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 16\ntp = 8\n',
         "unique"),
    ]:
        toml(f"type_{name}", text, fragment=fragment)
    toml("sample_too_big", BASE.replace("gpus = 16", "gpus = 4000000").replace("tp = 8", "tp = 1\npp = 2")
         .replace("global_batch = 16", "global_batch = 2000000"), command=RECORD, fragment="MiB per line")
    toml("million_pods", BASE.replace("gpus = 16", "gpus = 4000000\ngpus_per_node = 1\ngpus_per_rack = 1\n"
                                      "racks_per_pod = 1")
         .replace("global_batch = 16", "global_batch = 4000000")
         .replace("tp = 8", "tp = 1"), command=RECORD, fragment="pods")
    toml("record_duration_huge", BASE.replace('duration = "2s"', 'duration = "3650d"'), command=RECORD,
         fragment="")


HEADER: dict[str, Any] = {}


def recordings() -> None:
    header, events, small = _tiny_recording()
    _bad_headers(header, small)
    _bad_events(header, events, small)
    _cut_and_compressed(small)


def _tiny_recording() -> tuple[dict[str, Any], list[dict[str, Any]], list[bytes]]:
    """A small real recording (16 GPUs, 4 s): its header, its events, and its lines as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tiny.toml").write_text(BASE.replace('duration = "2s"', 'duration = "4s"'))
        assert main_cli(["record", str(Path(tmp) / "tiny.toml"), "-o", str(Path(tmp) / "tiny.jsonl"),
                         "--sample", "1s"]) == 0
        plain = (Path(tmp) / "tiny.jsonl").read_bytes().split(b"\n")
    head, events = json.loads(plain[0]), [json.loads(x) for x in plain[1:] if x]
    small = [json.dumps(head).encode()] + [json.dumps(e).encode() for e in events]
    return head, events, small


def write(name: str, lines: list[bytes], code: int, fragment: str, tail: bytes = b"\n") -> None:
    """A recording of these lines: exported, and replayed too when it must be refused."""
    commands = [EXPORT] + ([REPLAY] if code == 2 else [])
    raw("recordings", f"{name}.jsonl", b"\n".join(lines) + tail, code, fragment, *commands)


def _bad_headers(header: dict[str, Any], small: list[bytes]) -> None:
    def with_header(name: str, change: Any, fragment: str) -> None:
        h = json.loads(json.dumps(header))
        change(h)
        write(name, [json.dumps(h).encode()] + small[1:], 2, fragment)

    write("valid_prefix", small, 0, "")
    write("valid_crlf", [x + b"\r" for x in small], 0, "")
    with_header("header_type_int", lambda h: h.update(type=3), "header")
    with_header("header_no_topology", lambda h: h.pop("topology"), "topology")
    with_header("header_gpus_negative", lambda h: h["topology"].update(gpus=-5), "topology.gpus")
    with_header("header_gpus_string", lambda h: h["topology"].update(gpus="many"), "topology.gpus")
    with_header("header_gpus_1e12", lambda h: h["topology"].update(gpus=1e12), "topology.gpus")
    with_header("header_gpus_huge_int", lambda h: h["topology"].update(gpus=10**19), "topology.gpus")
    with_header("header_gpus_zero", lambda h: h["topology"].update(gpus=0), "topology.gpus")
    with_header("header_per_node_zero", lambda h: h["topology"].update(gpus_per_node=0), "gpus_per_node")
    with_header("header_jobs_string", lambda h: h.update(jobs="all"), "jobs")
    with_header("header_job_list", lambda h: h["jobs"].__setitem__(0, []), "jobs[0]")
    with_header("header_job_no_name", lambda h: h["jobs"][0].pop("name"), "jobs[0].name")
    with_header("header_job_name_escape", lambda h: h["jobs"][0].update(name="\x1b[2Jx"), "jobs[0].name")
    with_header("header_job_beyond", lambda h: h["jobs"][0].update(first_gpu=10**7), "not all in the cluster")
    with_header("header_job_tp_zero", lambda h: h["jobs"][0].update(tp=0), "jobs[0].tp")
    with_header("header_job_memory_string", lambda h: h["jobs"][0].update(memory_gb="lots"), "memory_gb")
    with_header("header_version_future", lambda h: h.update(schema_version=99), "newer")
    with_header("header_version_string", lambda h: h.update(schema_version="1"), "schema_version")
    with_header("header_schema_other", lambda h: h.update(schema="other"), "not a clustertop recording")
    with_header("header_scenario_list", lambda h: h.update(scenario=[]), "scenario")
    with_header("header_cluster_gpu_int", lambda h: h["scenario"]["cluster"].update(gpu=5), "")
    with_header("header_budget_string", lambda h: h["scenario"]["cluster"].update(site_power_budget_mw="x"),
                "site_power_budget_mw")
    with_header("header_duplicate_jobs", lambda h: h["jobs"].append(dict(h["jobs"][0])), "")
    write("header_array", [b"[]"] + small[1:], 2, "header")
    write("header_not_json", [b"{nope"] + small[1:], 2, "not JSON")


def _bad_events(header: dict[str, Any], events: list[dict[str, Any]], small: list[bytes]) -> None:
    sample = next(e for e in events if e["type"] == "sample")
    step = next(e for e in events if e["type"] == "step")
    bad_events = {
        "type_int": {"t": 9.0, "type": 3},
        "type_escape": {"t": 9.0, "type": "\x1b[2J"},
        "t_string": {"t": "x", "type": "step", "job": "pretrain"},
        "t_missing": {"type": "sample"},
        "t_backwards": {"t": -1.0, "type": "job_start", "job": "pretrain"},
        "step_job_list": {**step, "t": 9.0, "job": []},
        "step_no_job": {k: v for k, v in step.items() if k != "job"} | {"t": 9.0},
        "step_time_string": {**step, "t": 9.0, "step_time_s": "x"},
        "step_time_null": {**step, "t": 9.0, "step_time_s": None},
        "util_int": {**sample, "t": 9.0, "util": 5},
        "util_short": {**sample, "t": 9.0, "util": {"v": [1], "n": [3]}},
        "util_negative_count": {**sample, "t": 9.0,
                                "util": {"v": [1, 2], "n": [-8, header["topology"]["gpus"] + 8]}},
        "util_strings": {**sample, "t": 9.0, "util": {"v": ["x"], "n": [header["topology"]["gpus"]]}},
        "util_lengths": {**sample, "t": 9.0, "util": {"v": [1, 2], "n": [header["topology"]["gpus"]]}},
        "phase_300": {**sample, "t": 9.0, "phase": {"v": [300], "n": [header["topology"]["gpus"]]}},
        "phase_float": {**sample, "t": 9.0, "phase": {"v": [1.5], "n": [header["topology"]["gpus"]]}},
        "links_list": {**sample, "t": 9.0, "links": [1, 2]},
        "links_string_load": {**sample, "t": 9.0, "links": {"core": "x"}},
        "site_mw_string": {**sample, "t": 9.0, "site_mw": "x"},
        "status_not_object": {**sample, "t": 9.0, "jobs": {"pretrain": 5}},
        "status_step_string": {**sample, "t": 9.0, "jobs": {"pretrain": {"step": "x"}}},
        "restart_lost_string": {"t": 9.0, "type": "restart", "job": "pretrain", "lost_tokens": "x"},
        "fault_gpu_negative": {"t": 9.0, "type": "fault", "job": "pretrain", "gpu": -1},
        "checkpoint_ok_string": {"t": 9.0, "type": "checkpoint_end", "job": "pretrain", "ok": "yes"},
        "swing_null": {"t": 9.0, "type": "power_swing", "from_mw": None, "to_mw": 1.0},
        "job_stop_reason_escape": {"t": 9.0, "type": "job_stop", "job": "pretrain", "reason": "\x1b[2J"},
        "event_array": [1, 2],
        "contention_running_string": {"t": 9.0, "type": "contention", "running": "all"},
        "contention_shares_string": {"t": 9.0, "type": "contention", "running": ["pretrain"],
                                     "jobs": [{"job": "pretrain", "contention_shares": "x"}]},
        "contention_job_number": {"t": 9.0, "type": "contention", "jobs": [{"job": 5}]},
    }
    for name, event in bad_events.items():
        write(f"event_{name}", small + [json.dumps(event).encode()], 2, "")
    write("event_unknown_type",
          small + [json.dumps({"t": 9.0, "type": "future_thing", "x": "\x1b[2J"}).encode()], 0, "")
    write("event_extra_keys", small + [json.dumps({**sample, "t": 9.0, "phase_share": [[0.5]] * 3}).encode()],
          0, "")
    write("event_phase_mix_garbage", small + [json.dumps({**sample, "t": 9.0, "phase_mix": {
        "phases": ["nope"], "shares": [["x"]], "jobs": {"pretrain": [7]}, "other": -1,
        "gpus": {"at": [10 ** 9], "n": [1], "v": [0]}}}).encode()], 0, "")
    write("event_bad_json", small + [b'{"t": 9.0, "type": '] + [b'{"t": 9.1, "type": "x"}'], 2,
          "not valid JSON")
    write("last_line_truncated", small + [b'{"t": 9.0, "type": "st'], 0, "", tail=b"")
    write("last_line_bad_types", small + [json.dumps({"t": 9.0, "type": 3}).encode()], 2, "", tail=b"")
    write("empty_line_inside", small[:3] + [b""] + small[3:], 2, "not valid JSON")
    write("only_newline", [b""], 2, "not JSON")


def _cut_and_compressed(small: list[bytes]) -> None:
    """Empty, cut, corrupt and oddly compressed recordings."""
    raw("recordings", "empty.jsonl", b"", 2, "is empty", EXPORT, REPLAY)
    raw("recordings", "bom.jsonl", b"\xef\xbb\xbf" + b"\n".join(small) + b"\n", 2, "not JSON", EXPORT, REPLAY)
    gz = gzip.compress(b"\n".join(small) + b"\n", mtime=0)
    z = zlib.compressobj(6, zlib.DEFLATED, 31)          # as the recorder writes:
                                                        # a sync flush after every line
    pieces = [z.compress(line + b"\n") + z.flush(zlib.Z_SYNC_FLUSH) for line in small]
    cut = sum(map(len, pieces[:6])) + len(pieces[6]) // 2            # inside line 7
    raw("recordings", "gzip_cut_in_first_line.jsonl.gz", gz[:200], 2, "line 1", EXPORT, REPLAY)
    raw("recordings", "gzip_cut_later.jsonl.gz", b"".join(pieces)[:cut], 0, "", EXPORT)
    raw("recordings", "gzip_corrupt.jsonl.gz", gz[:40] + bytes(200) + gz[240:], 2, "", EXPORT, REPLAY)
    raw("recordings", "gzip_two_members.jsonl.gz", gz + gzip.compress(b"", mtime=0), 0, "", EXPORT)
    raw("recordings", "gzip_then_garbage.jsonl.gz", gz + b"garbage!", 2, "", EXPORT, REPLAY)
    raw("recordings", "gzip_magic_only.jsonl.gz", b"\x1f\x8b", 0 if False else 2, "", EXPORT, REPLAY)
    raw("recordings", "not_gzip.jsonl.gz", b"\n".join(small) + b"\n", 0, "", EXPORT)
    raw("recordings", "newline_bomb.jsonl.gz", gzip.compress(b"\n" * 50_000_000, mtime=0), 2, "not JSON",
        EXPORT, REPLAY)
    raw("recordings", "scenario_as_recording.jsonl", BASE.encode(), 2, "not JSON", EXPORT, REPLAY)


def sweeps() -> None:
    lines = (REPO / "recordings" / "sweep-16k.jsonl").read_bytes().split(b"\n")
    first = json.loads(lines[0])

    def write(name: str, records: list[bytes], code: int = 2, fragment: str = "") -> None:
        raw("sweeps", f"{name}.jsonl", b"\n".join(records) + b"\n", code, fragment, REPLAY)

    def changed(name: str, change: Any, fragment: str) -> None:
        record = json.loads(json.dumps(first))
        change(record)
        write(name, [json.dumps(record).encode()] + lines[1:-1], 2, fragment)

    changed("index_string", lambda r: r.update(index="0"), "index")
    changed("index_negative", lambda r: r.update(index=-1), "index")
    changed("point_list", lambda r: r.update(point=[]), "point")
    changed("point_key_traversal", lambda r: r["point"].update({"../../../../tmp/x": 1}),
            "not a scenario key")
    changed("point_value_escape", lambda r: r["point"].update({"jobs[0].tp": "\x1b[2J"}), "point")
    changed("point_value_list", lambda r: r["point"].update({"jobs[0].tp": [1]}), "point")
    changed("scenario_escape", lambda r: r.update(scenario="\x1b[2Jx"), "scenario")
    changed("jobs_string", lambda r: r.update(jobs="x"), "jobs")
    changed("jobs_gpus_string", lambda r: r["jobs"][0].update(gpus="many"), "gpus")
    changed("jobs_fits_string", lambda r: r["jobs"][0].update(fits="yes"), "fits")
    changed("jobs_step_string", lambda r: r["jobs"][0].update(step_time_s="x"), "step_time_s")
    changed("error_int", lambda r: r.update(error=5), "error")
    write("duplicate_index", [lines[0], lines[0]] + lines[1:-1], 2, "another record's")
    write("not_json_line", [lines[0], b"{nope", lines[1]], 2, "not JSON")


def main() -> None:
    for folder in ("scenarios", "recordings", "sweeps"):
        shutil.rmtree(HERE / folder, ignore_errors=True)
        (HERE / folder).mkdir()
    scenarios()
    recordings()
    sweeps()
    with open(HERE / "cases.tsv", "w", encoding="utf-8") as f:
        f.write("# file\tcommand\texit code\tfragment of the one line a refused case prints "
                "(written by make.py)\n")
        f.writelines("\t".join(str(x) for x in case) + "\n" for case in cases)
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
