"""The stream's header and events checked against the schema (docs/events.md), once, in the reader.

Every field a reader of the stream uses (the reducer, the Perfetto export, the dashboard and its seek index)
is checked here for its type and range, so that a recording with valid JSON but wrong types ends in one line
naming the line and key, not a traceback somewhere downstream. What the readers do not use is not checked:
unknown keys and unknown event types pass (newer writers may add them), and sample keys beyond the ones below
are free.

A check returns None, or what is wrong ("util: expected ...") for the reader to put after the line's place.

Every event is checked, most in one step: a line's shape (its bytes with every digit made 0) fixes its keys,
the type of every value (a string is quoted; a number's sign, point, exponent and digit count are in the
shape) and every character of its strings but digits, which no check refuses. So once a line of a discrete
event passed the full walk, a later line of the same shape passes it too (`EventChecks.known`, `SHAPE`); the
reader still checks its time. Samples are walked each time: whether their runs cover the GPUs depends on the
digits.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable
from typing import Any

from ..config.cluster import MAX_GPUS
from ..config.errors import has_unsafe, quote
from ..config.scenario import MAX_JOBS
from . import schema

Check = Callable[[Any], str | None]
_NUMBERS = (int, float)


def number(value: Any) -> str | None:
    if type(value) in _NUMBERS and math.isfinite(value):
        return None
    return "expected a finite number"


def count(value: Any) -> str | None:
    if type(value) is int and value >= 0:
        return None
    return "expected a whole number >= 0"


def positive(value: Any) -> str | None:
    if type(value) is int and 1 <= value <= MAX_GPUS:
        return None
    return f"expected a whole number from 1 to {MAX_GPUS:,}"


def text(value: Any) -> str | None:
    if type(value) is str and not has_unsafe(value):
        return None
    return "expected plain text" if type(value) is str else "expected a string"


def boolean(value: Any) -> str | None:
    return None if type(value) is bool else "expected true or false"


def table(value: Any) -> str | None:
    return None if type(value) is dict else "expected an object"


def or_null(check: Check) -> Check:
    def nullable(value: Any) -> str | None:
        return None if value is None else check(value)
    return nullable


def numbers(value: Any) -> str | None:
    """A number or a list of numbers (one per pod, or per pipeline stage)."""
    if type(value) is list:
        try:
            total = sum(value)          # raises on anything but numbers
        except TypeError:
            return "expected a list of numbers"
        return None if math.isfinite(total) else "expected finite numbers"
    return number(value)


def fields(obj: dict[str, Any], spec: dict[str, Check], path: str = "") -> str | None:
    """The first key of `obj` that `spec` knows whose value fails its check (absent keys pass)."""
    for key, check in spec.items():
        if key in obj:
            why = check(obj[key])
            if why is not None:
                got = "" if isinstance(obj[key], (dict, list)) else f", got {show(obj[key])}"
                return f"{path}{key}{'' if why.startswith('[') else ': '}{why}{got}"   # jobs[0].gpus: ...
    return None


def show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else f"a list of {len(value):,}"
    text = quote(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- the header --------------------------------------------------------------------------------------------

_TOPOLOGY = {key: positive for key in ("gpus_per_node", "gpus_per_rack", "gpus_per_pod", "gpus_per_building")}
_TOPOLOGY.update({key: count for key in ("nodes", "racks", "pods", "buildings")})
_LAYOUT = {key: positive for key in ("tp", "cp", "pp", "dp", "ep")}
_JOB = {"name": text, "first_gpu": count, "gpus": positive, **_LAYOUT, "model": or_null(text),
        "kind": text, "fits": boolean, "memory_gb": or_null(numbers), "speed": or_null(number)}
_JOB.update({key: or_null(number) for key in ("step_time_s", "mfu", "ttft_s", "tpot_s", "ttft_p99_s",
                                                "tpot_p99_s", "requests_per_s", "mean_batch", "batch_limit",
                                                "kv_cache_use", "effective_training_time", "tokens_target",
                                                "train_tokens")})
_JOB["saturated"] = or_null(boolean)
_JOB.update({"uncertainty": or_null(number), "step_time_range_s": or_null(numbers)})
# schema.CONTENTION_KEYS, in a job's header entry and in a contention event
_CONTENTION_FIGURES: dict[str, Check] = {"contention_slowdown": or_null(number),
                                         "contention_tier": or_null(text),
                                         "contention_shares": lambda v: _shares(v)}
_JOB.update({"step_time_alone_s": or_null(number), **_CONTENTION_FIGURES})
_GPU = {"name": text, **{key: or_null(number) for key in ("hbm_gb", "tdp_w", "idle_w", "bf16_tflops")}}
_CLUSTER = {"node_fabric": text, "site_power_budget_mw": or_null(number),
            "pod_oversubscription": or_null(number)}
_HEADER = {"scenario": table, "topology": table,
           "jobs": lambda v: None if type(v) is list else "expected a list",
           "power": table, "duration_s": or_null(number), "sample_interval_s": or_null(number)}


def header_problem(header: dict[str, Any]) -> str | None:
    """What is wrong with a header whose schema and version are right, or None."""
    why = fields(header, _HEADER)
    if why:
        return why
    if "topology" not in header:
        return "expected a \"topology\" object (gpus, gpus_per_node, ...)"
    topology = header["topology"]
    if "gpus" not in topology:
        return "topology.gpus: missing; expected the number of GPUs"
    why = fields(topology, {"gpus": positive, **_TOPOLOGY}, "topology.")
    if why:
        return why
    scenario = header.get("scenario", {})
    why = fields(scenario, {"name": text, "cluster": table}, "scenario.")
    cluster = scenario.get("cluster", {})
    why = why or fields(cluster, _CLUSTER, "scenario.cluster.")
    gpu = cluster.get("gpu")
    if why is None and gpu is not None:
        why = fields(gpu, _GPU, "scenario.cluster.gpu.") if type(gpu) is dict else text(gpu)
    why = why or fields(header.get("power", {}), {"site_power_budget_mw": or_null(number)}, "power.")
    return why or _jobs_problem(header.get("jobs", []), topology["gpus"])


def _jobs_problem(jobs: list[Any], gpus: int) -> str | None:
    if len(jobs) > MAX_JOBS:
        return f"jobs: {len(jobs):,} jobs; expected at most {MAX_JOBS:,}"
    names: set[str] = set()
    for i, job in enumerate(jobs):
        if type(job) is not dict:
            return f"jobs[{i}]: expected an object, got {show(job)}"
        for key in ("name", "first_gpu", "gpus"):
            if key not in job:
                return f"jobs[{i}].{key}: missing"
        why = fields(job, _JOB, f"jobs[{i}].")
        if why:
            return why
        if job["first_gpu"] + job["gpus"] > gpus:
            return (f"jobs[{i}]: GPUs {job['first_gpu']:,} to {job['first_gpu'] + job['gpus'] - 1:,} are not "
                    f"all in the cluster's {gpus:,}")
        if job["name"] in names:
            return f"jobs[{i}].name: {quote(job['name'])} is another job's name too; expected unique names"
        names.add(job["name"])
    return None


# ---- events ------------------------------------------------------------------------------------------------

def _rle(gpus: int, phase: bool = False) -> Check:
    """A run-length encoded per-GPU array covering `gpus` GPUs: {"v": [numbers], "n": [counts]}. Checked with
    C-speed built-ins (a sample of 2M GPUs has ~10^5 runs): a sum is an int only when every term is one, and
    raises on anything but numbers. A sample's runs often repeat the last sample's: lists equal to the last
    that passed are not walked again, but for the counts' sum (1.0 == 1: the sum's type tells a float)."""
    passed: list[list[Any]] = [[], []]          # the counts and values that passed last

    def check(value: Any) -> str | None:
        if type(value) is not dict or type(value.get("v")) is not list or type(value.get("n")) is not list:
            return 'expected a run-length array {"v": [...], "n": [...]}'
        v, n = value["v"], value["n"]
        if len(v) != len(n):
            return f"{len(v):,} values but {len(n):,} counts; expected as many of each"
        seen = not phase and v == passed[1]     # numbers again (phase codes must be ints: 5.0 == 5)
        try:
            covered, total = sum(n), 0 if seen else sum(v)
        except TypeError:
            return "expected numbers in \"v\" and whole counts in \"n\""
        if type(covered) is not int or (n != passed[0] and not _unsigned(n, "Q")):
            return "expected whole counts >= 0"
        if phase and (type(total) is not int or not _unsigned(v, "B")):
            return "expected phase codes, whole numbers from 0 to 255"
        if not math.isfinite(total):
            return "expected finite numbers"
        if covered != gpus:
            return f"the runs cover {covered:,} GPUs; expected the {gpus:,} of the header's topology"
        passed[:] = n, v
        return None

    return check


def _unsigned(values: list[int], code: str) -> bool:
    """Whether whole numbers fit an unsigned C type ("Q": >= 0, "B": 0 to 255), in one C pass (min and max of
    10^5 Python ints cost more than their sum)."""
    try:
        array(code, values)
    except OverflowError:
        return code == "Q" and min(values) >= 0      # a count past 2^64: the runs' cover says what is wrong
    return True


def _links() -> Check:
    """A sample's "links": tier -> a load or a list of loads (tier names found plain text once are not
    searched again)."""
    names: set[str] = set()

    def check(value: Any) -> str | None:
        if type(value) is not dict:
            return "expected an object of tier loads"
        for tier, load in value.items():
            why = numbers(load)
            if why is None and tier not in names:
                why = text(tier)
                if len(names) < 64 and why is None:
                    names.add(tier)
            if why:
                return f"{quote(tier)}{why}"
        return None

    return check


_STATUS = {"running": boolean, "step": count, "interruptions": count, "tokens_lost": number,
           **{key: number for key in ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "tokens_total",
                                       "tokens")},
           **{key: or_null(number) for key in ("effective_training_time", "ttft_s", "tpot_s")}}


def _statuses(value: Any) -> str | None:
    if type(value) is not dict:
        return "expected an object of job statuses"
    for name, status in value.items():
        if type(status) is not dict:
            return f"{quote(name)}: expected an object"
        why = fields(status, _STATUS)
        if why:
            return f"{quote(name)}.{why}"          # (quoted only then: a sample has a status per job)
    return None


def _shares(value: Any) -> str | None:
    """Per shared tier, a job's share (engine/model/contention.py)."""
    if type(value) is not dict:
        return "expected an object of tier shares"
    return next((f"{quote(tier)}: {why}" for tier, share in value.items()
                 if (why := number(share)) or (why := text(tier))), None)


_CONTENTION = {"job": text, **_CONTENTION_FIGURES}


def _list_of(check: Check, what: str) -> Check:
    def items(value: Any) -> str | None:
        if type(value) is not list:
            return f"expected a list of {what}"
        return next((f"[{i}]: {why}" for i, item in enumerate(value) if (why := check(item))), None)
    return items


def _contention_entry(value: Any) -> str | None:
    if type(value) is not dict:
        return "expected an object"
    return fields(value, _CONTENTION)


def _missing(gpus: int) -> Check:
    """Real telemetry's `missing`: per key, a run-length array of 0 and 1 over the GPUs."""
    flags = _rle(gpus)

    def check(value: Any) -> str | None:
        if type(value) is not dict:
            return "expected an object of run-length flags"
        for key, rle in value.items():
            why = text(key) or flags(rle)
            if why is None and any(x not in (0, 1) for x in set(rle["v"])):
                why = "expected flags 0 or 1"
            if why:
                return f"{quote(key)}: {why}"
        return None

    return check


_JOB_REF = {"job": or_null(text)}
_EVENTS: dict[str, dict[str, Check]] = {
    schema.STEP: {"job": text, "step": count, "step_time_s": number, "tokens": number, "tokens_per_s": number,
                  "tflops_per_gpu": number, "mfu": number, "tokens_total": number},
    schema.JOB_START: _JOB_REF,
    schema.JOB_STOP: {**_JOB_REF, "reason": text},
    schema.FAULT: {**_JOB_REF, "cause": text, "category": text, "component": text, "gpu": count,
                   "node": count, "scope": text, "injected": boolean, "extends_downtime": boolean,
                   "xid": count, "host": text},
    schema.MAINTENANCE: {**_JOB_REF, "cause": text, "component": text, "duration_s": number},
    schema.RESTART: {**_JOB_REF, "reason": text, "from_checkpoint_step": count, "tokens_total": number,
                     "lost_steps": count, "lost_tokens": number, "lost_s": number, "downtime_s": number,
                     "interruptions": count, "spare_nodes": count},
    schema.CHECKPOINT_START: {**_JOB_REF, "step": count, "mode": text, "gb": number},
    schema.CHECKPOINT_END: {**_JOB_REF, "step": count, "ok": boolean, "duration_s": number},
    schema.POWER_SWING: {"from_mw": number, "to_mw": number, "delta_mw": number, "over_budget": boolean},
    schema.CONTENTION: {"running": _list_of(text, "job names"),
                        "jobs": _list_of(_contention_entry, "objects")},
    schema.TARGET_DOWN: {"target": text, "error": text},
    schema.TARGET_UP: {"target": text},
    schema.HOSTS_PLACED: {"hosts": _list_of(text, "host names"), "first_node": count},
    schema.HOSTS_UNPLACED: {"hosts": _list_of(text, "host names"), "reason": text},
}


SHAPE = bytes.maketrans(b"123456789", b"000000000")   # a line's shape: line.translate(SHAPE), every digit 0
_NEGATIVE_ZERO = re.compile(rb"-0(?![.eE])")     # the int 0: its shape is that of -5, which a count refuses
MAX_SHAPES = 4096                                 # shapes kept per stream (a hostile file: each line new)
MAX_SHAPE_BYTES = 2048                            # longer lines are samples or alike: walked, not looked up



class EventChecks:
    """The checks of one stream's events (a sample's arrays must cover the header's GPUs)."""

    def __init__(self, header: dict[str, Any]) -> None:
        gpus = header["topology"]["gpus"]
        self.specs = dict(_EVENTS)
        self.known: set[bytes] = set()        # shapes of lines that passed (remember)
        self.specs[schema.SAMPLE] = {"util": _rle(gpus), "power_w": _rle(gpus),
                                     "phase": _rle(gpus, phase=True),
                                     "links": _links(), "site_mw": number, "over_budget": boolean,
                                     "jobs": _statuses, "memory_gb": _rle(gpus), "missing": _missing(gpus)}

    def problem(self, event: Any) -> str | None:
        """What is wrong with a parsed line as an event, or None: an object with a finite number "t" and a
        plain-text "type", and the fields its type defines."""
        if type(event) is not dict:
            return "expected an event object with \"t\" (a number) and \"type\""
        if "t" not in event or "type" not in event:
            return f"expected an event object with \"t\" (a number) and \"type\"; " \
                   f"{'t' if 't' not in event else 'type'} is missing"
        why = fields(event, {"t": number, "type": text})
        if why:
            return why
        spec = self.specs.get(event["type"])
        if spec is None:
            return None
        if event["type"] == schema.STEP and "job" not in event:
            return "a step event needs \"job\" (the job's name)"
        return fields(event, spec)

    def remember(self, event: Any, line: bytes, line_shape: bytes) -> None:
        """`event` (parsed from `line`) passed `problem`: later lines of its shape pass too, unless the shape
        does not decide the walk: a sample (its runs must cover the GPUs), an unknown type (a type name's
        digits are not in the shape), an escape in a string (\\u0007 has the shape of \\u0041), a number of 20
        digits or more (an int or a float), or an int -0."""
        if (len(self.known) < MAX_SHAPES and len(line) <= MAX_SHAPE_BYTES and type(event) is dict
                and event.get("type") in _EVENTS
                and b"\\" not in line and b"00000000000000000000" not in line_shape
                and not _NEGATIVE_ZERO.search(line)):
            self.known.add(line_shape)
