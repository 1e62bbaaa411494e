"""The sweep engine: --vary parsing, the cross product, dp derivation, invalid points,
ranking, records, --best-to."""

from __future__ import annotations

import io
import itertools
import os
import re
import threading
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
from clustertop.engine.config import overrides, scenario
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.fields import Context, Field, check_table, optional
from clustertop.engine.config.scenario import Scenario
from clustertop.engine.config.tomlfile import dumps
from clustertop.engine.config.units import parse_duration
from clustertop.engine.sweep import pool
from clustertop.engine.sweep.results import RATE_PER_GPU, STEP_TIME, Ranking, ranked
from clustertop.engine.sweep.run import sweep_to
from clustertop.engine.sweep.space import Sweep, best_scenario, plan, point_scenario

SMALL = """\
name = "small"
description = "a small base for sweeps"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 64
scale_out = "roce-400g"
[[jobs]]
name = "train"
model = "llama3.1-8b"
seq_len = 4096
global_batch = 64
tp = 8
pp = 2
dp = 4
"""

TWO_JOBS = """\
name = "two"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 128
[[jobs]]
name = "a"
model = "llama3.1-8b"
seq_len = 4096
global_batch = 64
tp = 8
dp = 4
[[jobs]]
name = "b"
model = "llama3.1-8b"
seq_len = 4096
global_batch = 336
tp = 8
dp = 12
"""

FLAGSHIP_AXES = ["jobs[0].tp=2,4,8,16,32", "jobs[0].pp=4,8,16,32,64", "jobs[0].micro_batch=1,2,4,8,16",
                 "jobs[0].virtual_stages=1,2", "jobs[0].recompute=selective,full", "jobs[0].zero=1,3"]


def write(tmp_path: Path, text: str = SMALL, name: str = "base.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def records(sw: Sweep, **kw: Any) -> tuple[list[dict[str, Any]], Ranking, bytes]:
    sink = io.BytesIO()
    ranking = sweep_to(sw, sink, **kw)
    data = sink.getvalue()
    return [orjson.loads(line) for line in data.splitlines()], ranking, data


# ---- --vary ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("token, value", [
    ("8", 8), ("7.0", 7.0), ("1e3", 1000.0), ("1_000", 1000), ("true", True), ("false", False),
    ("auto", "auto"), ("roce-400g", "roce-400g"), ("6h", "6h"), ('"a b"', "a b"), ("'x'", "x"),
])
def test_values_are_typed_like_toml(token: str, value: Any) -> None:
    parsed = overrides.parse_value(token)
    assert parsed == value and type(parsed) is type(value)


def test_quoted_values_may_hold_commas(tmp_path: Path) -> None:
    data = tomllib.loads(SMALL)
    axis = overrides.parse_vary('description="a, b",c', data)
    assert axis.values == ("a, b", "c")
    assert axis.path == ("description",)


def test_keys_are_checked_and_canonical() -> None:
    data = tomllib.loads(TWO_JOBS)
    axis = overrides.parse_vary(" jobs[01].tp = 1, 2 ", data)
    assert (axis.key, axis.path, axis.values) == ("jobs[1].tp", ("jobs", 1, "tp"), (1, 2))
    assert overrides.parse_vary("cluster.pod_oversubscription=1,3,7", data).values == (1, 3, 7)
    assert overrides.parse_vary("faults.rate_scale=0.5,2", data).path == ("faults", "rate_scale")


@pytest.mark.parametrize("flag, needle", [
    ("jobs[0].tp", "expected KEY=V1,V2"),
    ("=1,2", "expected KEY=V1,V2"),
    ("jobs[0].tp=", "empty value"),
    ("jobs[0].tp=1,,2", "empty value"),
    ("jobs[0].tq=1,2", "unknown scenario key (did you mean 'jobs[0].tp'?)"),
    ("cluster.gpu_count=8", "unknown scenario key"),
    ("jobs.tp=1,2", "expected jobs[N].tp"),
    ("jobs[2].tp=1", "has 2 job(s); expected an index below 2"),
    ("cluster=1", "is a table"),
    ("format=1", "unknown scenario key"),
    ("jobs[0].model.layers=4", "catalog model 'llama3.1-8b'"),
    ("jobs[0].tp=1,x", "expected an integer, got 'x'"),
    ("jobs[0].tp=0,8", "must be greater than zero"),
    ("jobs[0].tp=4,4", "given twice"),
    ("jobs[0].recompute=full,some", "unknown value 'some'"),
    ("cluster.scale_out=roce-400", "unknown name 'roce-400' (did you mean 'roce-400g'?)"),
    ("jobs[0].model=llama3.1-9b", "unknown name 'llama3.1-9b'"),
    ("cluster.pod_oversubscription=nan", "NaN is not a valid value"),
    ("jobs[0].tp=[1,2]", "cannot read the value"),
    ('description="open', "unterminated"),
])
def test_bad_vary_flags(flag: str, needle: str) -> None:
    with pytest.raises(UserError) as err:
        overrides.parse_vary(flag, tomllib.loads(TWO_JOBS))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_apply_copies_only_what_changes() -> None:
    data = tomllib.loads(SMALL)
    before = orjson.dumps(data)
    out = overrides.apply(data, [(("jobs", 0, "tp"), 4), (("jobs", 0, "dp"), overrides.DELETE),
                                 (("faults", "enabled"), False)])
    assert orjson.dumps(data) == before, "the base table is not modified"
    assert out["jobs"][0]["tp"] == 4 and "dp" not in out["jobs"][0] and out["faults"] == {"enabled": False}
    assert out["cluster"] is data["cluster"], "untouched tables are shared"


# ---- the cross product and dp ------------------------------------------------------------------------------

def test_cross_product_in_order(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4,8", "jobs[0].pp=1,2,4"], estimator)
    assert sw.size == 12
    recs, ranking, _ = records(sw, workers=1)
    assert [r["index"] for r in recs] == list(range(12))
    expected = [{"jobs[0].tp": tp, "jobs[0].pp": pp} for tp, pp in itertools.product([1, 2, 4, 8], [1, 2, 4])]
    assert [r["point"] for r in recs] == expected
    assert ranking.total == 12 and ranking.fit + ranking.oom + ranking.invalid == 12


def test_dp_is_derived_when_tp_or_pp_vary(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4,8", "jobs[0].pp=1,2,4"], estimator)
    assert sw.derived == ("jobs[0].dp",)
    for i in range(sw.size):
        job = scenario.parse(sw.data(i), scenario.Context(sw.path)).jobs[0]
        assert job.gpus == 64 and job.dp == 64 // (job.tp * job.pp)
    recs, _, _ = records(sw, workers=1)
    assert all(r["jobs"][0]["gpus"] == 64 for r in recs if "jobs" in r)


def test_dp_follows_the_cluster_and_other_jobs_keep_their_size(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path, TWO_JOBS), ["cluster.gpus=128,256", "jobs[0].tp=4,8"], estimator)
    assert sw.derived == ("jobs[0].dp", "jobs[1].dp")
    shapes = []
    for i in range(sw.size):
        a, b = scenario.parse(sw.data(i), scenario.Context(sw.path)).jobs
        shapes.append((a.gpus, a.dp, b.first_gpu, b.gpus, b.dp))
    assert shapes == [(32, 8, 32, 96, 12), (32, 4, 32, 96, 12), (32, 8, 32, 224, 28), (32, 4, 32, 224, 28)]


def test_a_job_that_fills_the_cluster_follows_it(tmp_path: Path, estimator: Any) -> None:
    base = write(tmp_path, SMALL.replace("dp = 4\n", "dp = 4\ngpus = 64\n"))
    sw = plan(base, ["cluster.gpus=64,128"], estimator)
    assert sw.derived == ("jobs[0].dp", "jobs[0].gpus")
    jobs = [scenario.parse(sw.data(i), scenario.Context(sw.path)).jobs[0] for i in range(2)]
    assert [(j.gpus, j.dp) for j in jobs] == [(64, 4), (128, 8)]
    _, ranking, _ = records(sw, workers=1)
    best = tmp_path / "best.toml"
    best.write_text(best_scenario(sw, ranking.best(1)[0].index, ranking.objective))
    raw = tomllib.loads(best.read_text())
    job = scenario.load(str(best)).jobs[0]
    assert (raw["jobs"][0]["dp"], raw["jobs"][0]["gpus"]) == (job.dp, job.gpus) == (
        jobs[ranking.best(1)[0].index].dp, jobs[ranking.best(1)[0].index].gpus)


def test_dp_is_kept_when_varied_or_when_nothing_changes_the_gpus(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=4,8", "jobs[0].dp=4,8"], estimator)
    assert sw.derived == ()
    recs, _, _ = records(sw, workers=1)
    assert [r["jobs"][0]["gpus"] if "jobs" in r else r["error"][:12]
            for r in recs] == [32, 64, 64, "jobs[0].dp: "]
    assert plan(write(tmp_path), ["jobs[0].zero=0,1"], estimator).derived == ()


def test_invalid_points_are_counted_with_their_reason(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=3,8", "jobs[0].micro_batch=1,3"], estimator)
    recs, ranking, _ = records(sw, workers=1)
    assert ranking.invalid == 3 and ranking.fit + ranking.oom == 1
    assert [("error" in r) for r in recs] == [True, True, False, True]
    assert recs[0] == {"index": 0, "point": {"jobs[0].tp": 3, "jobs[0].micro_batch": 1},
                       "error": "jobs[0].tp: tp*cp*pp = 6 does not divide the job's 64 GPUs; "
                                "expected dp = gpus / (tp*cp*pp) to be whole"}
    assert recs[3]["error"].startswith("jobs[0].global_batch: 64 is not divisible by dp*micro_batch = 4*3")
    assert ranking.reason_summary() == [(2, recs[0]["error"]), (1, recs[3]["error"])]


def test_records_carry_the_estimate_json(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["cluster.scale_out=roce-400g,ib-ndr-400g"], estimator)
    recs, _, _ = records(sw, workers=1)
    for rec, fabric in zip(recs, ["roce-400g", "ib-ndr-400g"]):
        data = overrides.apply(tomllib.loads(SMALL), [(("cluster", "scale_out"), fabric)])
        expected = estimator(scenario.parse(data, scenario.Context("x")))
        assert rec == {"index": rec["index"], "point": {"cluster.scale_out": fabric}, **expected}
        assert set(rec["jobs"][0]) >= {"name", "gpus", "step_time_s", "tokens_per_s", "mfu",
                                       "memory_gb_per_gpu", "fits", "breakdown_s", "memory_gb", "chosen"}


def test_estimator_errors_do_not_stop_the_sweep(tmp_path: Path, estimator: Any) -> None:
    def raising(s: Scenario) -> dict[str, Any]:
        if s.jobs[0].tp == 2:
            raise ZeroDivisionError("boom")
        return estimator(s)

    def model_refuses(s: Scenario) -> dict[str, Any]:
        if s.jobs[0].tp == 2:
            raise UserError("jobs[0].tp: the model cannot run this layout", "somewhere")
        return estimator(s)

    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4"], raising)
    recs, ranking, _ = records(sw, workers=1)
    assert ranking.failed == 1 and ranking.total == 3
    assert recs[1]["error"] == "the estimator failed: ZeroDivisionError: boom"
    assert "jobs" in recs[0] and "jobs" in recs[2]
    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4"], model_refuses)
    recs, ranking, _ = records(sw, workers=1)
    assert ranking.invalid == 1 and recs[1]["error"] == "jobs[0].tp: the model cannot run this layout"


# ---- ranking -----------------------------------------------------------------------------------------------

def _by_tp(s: Scenario) -> dict[str, Any]:
    """Step time 1/tp except tp = 2 (slowest, ties with tp = 1 broken by order) and tp = 8 (out of memory)."""
    job = s.jobs[0]
    step = {1: 3.0, 2: 3.0, 4: 1.0, 8: None, 16: 2.0}[job.tp]
    return {"scenario": s.name, "cluster": {}, "jobs": [{
        "name": job.name, "gpus": job.gpus, "step_time_s": step, "fits": step is not None,
        "tokens_per_s": job.tokens_per_step / step if step else None, "mfu": 0.5 if step else None,
        "memory_gb_per_gpu": 90.0 + job.tp if step is None else 40.0}]}


def test_best_by_step_time_and_out_of_memory_last(tmp_path: Path) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=8,2,4,1,16"], _by_tp)
    _, ranking, _ = records(sw, workers=1, top=10)
    assert ranking.objective == STEP_TIME
    assert [sw.point(o.index)["jobs[0].tp"] for o in ranking.best()] == [4, 16, 2, 1, 8]
    assert [o.fits for o in ranking.best()] == [True, True, True, True, False]
    assert [sw.point(o.index)["jobs[0].tp"] for o in ranking.best(2)] == [4, 16]
    _, small, _ = records(sw, workers=1, top=2)
    assert [o.index for o in small.best()] == [o.index for o in ranking.best(2)], \
        "bounded heaps keep the best"


def test_tokens_per_gpu_when_the_gpu_counts_differ(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["cluster.gpus=64,128,256", "jobs[0].tp=4,8"], estimator)
    recs, ranking, _ = records(sw, workers=1, top=6)
    assert ranking.objective == RATE_PER_GPU
    rate = {r["index"]: r["jobs"][0]["tokens_per_s"] / r["jobs"][0]["gpus"]
            for r in recs if r["jobs"][0]["fits"]}
    best = [o.index for o in ranking.best() if o.fits]
    assert best == sorted(rate, key=lambda i: (-rate[i], i)) and len(best) >= 3
    gpus = {r["jobs"][0]["gpus"] for r in recs}
    assert gpus == {64, 128, 256}


@pytest.mark.parametrize("axes, by_tp", [(["jobs[0].tp=8,2,4,1,16"], True),
                                         (["cluster.gpus=64,128,256", "jobs[0].tp=4,8,16"], False)],
                         ids=["axes0-_by_tp", "axes1-estimate_json"])
def test_the_dashboard_table_ranks_as_the_sweep_does(tmp_path: Path, axes: list[str], by_tp: bool,
                                                      estimator: Any) -> None:
    sw = plan(write(tmp_path), axes, _by_tp if by_tp else estimator)
    recs, ranking, _ = records(sw, workers=1, top=100)
    table, by = ranked(recs)
    assert by == ranking.objective
    best = [o.index for o in ranking.best()]
    assert [r["index"] for r in table][: len(best)] == best
    assert all("error" in r for r in table[len(best):]) and len(table) == len(recs)


# ---- workers -----------------------------------------------------------------------------------------------

def test_one_and_two_workers_give_identical_records(tmp_path: Path, estimator: Any) -> None:
    sw = plan("llama3-405b-16k", FLAGSHIP_AXES, estimator)
    assert sw.size == 1000
    one, r1, data1 = records(sw, workers=1)
    _, r2, data2 = records(sw, workers=2)
    _, r3, data3 = records(sw, workers=3)
    assert data1 == data2 == data3
    assert [r["index"] for r in one] == list(range(1000))
    assert 0 < r1.invalid < 1000 and r1.fit > 0 and r1.oom > 0
    assert [o.index for o in r1.best()] == [o.index for o in r2.best()] == [o.index for o in r3.best()]


def test_a_record_point_rebuilds_its_scenario(estimator: Any) -> None:
    sw = plan("llama3-405b-16k", FLAGSHIP_AXES, estimator)
    recs, ranking, _ = records(sw, workers=1)
    for o in ranking.best(3):
        rec = recs[o.index]
        built, table = point_scenario("llama3-405b-16k", rec["point"])
        assert estimator(built)["jobs"] == rec["jobs"]
        assert table == sw.data(o.index)          # the table the sweep loaded: what a TOML of the point holds
    invalid = next(r for r in recs if "error" in r)
    with pytest.raises(UserError) as err:
        point_scenario("llama3-405b-16k", invalid["point"])
    assert invalid["error"] in str(err.value)


def test_two_workers_run_in_two_processes(tmp_path: Path, pid_estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4,8", "jobs[0].pp=1,2,4,8"], pid_estimator)
    recs, _, _ = records(sw, workers=2)
    pids = {r["pid"] for r in recs if "pid" in r}
    assert len(pids) == 2 and os.getpid() not in pids


def test_workers_started_beside_other_threads_are_spawned_and_give_the_same_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=1,2,4,8", "jobs[0].pp=1,2,4"], estimator)
    _, _, expected = records(sw, workers=1)
    methods: list[str | None] = []
    get_context = pool.multiprocessing.get_context
    monkeypatch.setattr(pool.multiprocessing, "get_context", lambda method=None: (methods.append(method),
                                                                                   get_context(method))[1])
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    try:
        _, _, spawned = records(sw, workers=2)
    finally:
        done.set()
        other.join()
    _, _, forked = records(sw, workers=2)
    assert methods == ["spawn", "fork"] and spawned == forked == expected


def test_a_worker_that_dies_ends_the_sweep_in_one_line(tmp_path: Path, child_cli: Any,
                                                       dying_estimator: Any) -> None:
    """As when the OOM killer takes a worker. multiprocessing.Pool started another worker and waited forever
    for the task the dead one had taken."""
    out = tmp_path / "r.jsonl"
    cli = child_cli({"clustertop.commands.sweep.ESTIMATOR": dying_estimator})
    done = cli("sweep", write(tmp_path), "--vary", "jobs[0].tp=1,2,4,8", "--vary", "jobs[0].pp=1,2,4",
               "--workers", "2", "-o", str(out))
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1, err
    assert re.fullmatch(r"clustertop: sweep: worker process \d+ died with points to run "
                        r"\(killed by SIGKILL\); expected it to run to the end\n", err), err
    written = [r["index"] for r in map(orjson.loads, out.read_bytes().splitlines())]
    assert written == list(range(len(written))) and len(written) <= 6     # complete records, before tp = 4


# ---- --best-to ---------------------------------------------------------------------------------------------

def test_best_point_round_trips_through_the_loader(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path), ["jobs[0].tp=2,4,8", "jobs[0].pp=1,2", "jobs[0].recompute=none,full"],
                    estimator)
    recs, ranking, _ = records(sw, workers=1)
    best = ranking.best(1)[0]
    path = tmp_path / "best.toml"
    path.write_text(best_scenario(sw, best.index, ranking.objective))
    loaded = scenario.load(str(path))
    job = loaded.jobs[0]
    point = sw.point(best.index)
    assert (job.tp, job.pp, job.recompute) == (point["jobs[0].tp"], point["jobs[0].pp"],
                                               point["jobs[0].recompute"])
    assert job.dp == 64 // (job.tp * job.pp) and job.gpus == 64
    assert loaded.name == "small-sweep-best" and "sweep" in loaded.description
    assert "a small base for sweeps" in loaded.description
    raw = tomllib.loads(path.read_text())
    assert set(raw["jobs"][0]) == {*tomllib.loads(SMALL)["jobs"][0], "recompute"}, \
        "the base's keys and the point's"
    assert raw["jobs"][0]["dp"] == job.dp
    assert estimator(loaded)["jobs"] == recs[best.index]["jobs"], "the same estimate"


def test_toml_writer_round_trips() -> None:
    data = {"name": 'quote " and \\ back', "description": "tab\tnew\nline é \x7f", "seed": 3, "x": 1e16,
            "flag": True, "list": [1, 2.5, "a"],
            "cluster": {"gpu": "h100-sxm-80gb", "gpus": 8},
            "jobs": [{"name": "a", "model": {"layers": 2, "hidden": 64}, "tp": 2},
                     {"name": "b", "model": "llama3.1-8b"}],
            "faults": {}, "odd key": {"k": 1}}
    text = dumps(data, "header line\nsecond")
    assert text.startswith("# header line\n# second\n")
    assert tomllib.loads(text) == data


def test_large_sweeps_are_refused_before_running(tmp_path: Path, estimator: Any) -> None:
    values = ",".join(str(i) for i in range(1, 4001))
    with pytest.raises(UserError, match="at most 10,000,000"):
        plan(write(tmp_path), [f"seed={values}", f"jobs[0].global_batch={values}"], estimator)


INLINE = SMALL.replace('model = "llama3.1-8b"\n', "") + """\
[jobs.model]
layers = 32
hidden = 4096
heads = 32
kv_heads = 8
ffn = 14336
vocab = 128256
"""


def test_inline_model_keys_vary(tmp_path: Path, estimator: Any) -> None:
    sw = plan(write(tmp_path, INLINE), ["jobs[0].model.layers=16,32,1"], estimator)
    recs, _, _ = records(sw, workers=1)
    assert [r["point"] for r in recs] == [{"jobs[0].model.layers": n} for n in (16, 32, 1)]
    assert recs[2]["error"] == "jobs[0].pp: pp = 2 exceeds the model's 1 layers; expected pp <= layers"
    small, large = (r["jobs"][0]["memory_gb"]["weights"] for r in recs[:2])
    assert small < large
    with pytest.raises(UserError, match=r"jobs\[0\]\.model is varied too"):
        plan(write(tmp_path, INLINE), ["jobs[0].model=llama3.1-8b", "jobs[0].model.layers=16,32"], estimator)


def test_tables_a_point_shares_with_the_base_are_checked_once_and_changed_ones_again(tmp_path: Path,
                                                                                     estimator: Any) -> None:
    # the injected fault's GPU 100 exists in a 128-GPU cluster, not in a 64-GPU one: the faults table is the
    # base's own object at every point, but the cluster it is checked against changes, so it is checked again
    text = SMALL.replace("gpus = 64", "gpus = 128").replace("dp = 4", "dp = 8") + \
        "[[faults.inject]]\nat = \"1h\"\ngpu = 100\ncause = \"Faulty GPU\"\n"
    sw = plan(write(tmp_path, text), ["cluster.gpus=128,64,256", "jobs[0].tp=8,3"], estimator)
    recs, ranking, _ = records(sw, workers=1)
    assert ranking.total == 6 and ranking.invalid == 4
    assert "error" not in recs[0] and "error" not in recs[4]
    assert recs[2]["error"] == "faults.inject[0].gpu: GPU 100 is not in the cluster; expected 0 to 63"
    assert recs[1]["error"].startswith("jobs[0].tp: tp*cp*pp = 6 does not divide")
    # the memo hands back the very objects validated for the same tables, and validates new ones
    data = sw.data(0)
    first = scenario.parse(data, scenario.Context("x"), "x", sw.sections)
    again = scenario.parse(sw.data(4), scenario.Context("x"), "x", sw.sections)
    assert again.checkpoint is first.checkpoint and again.variability is first.variability
    assert again.cluster.gpus == 256 and again.faults == first.faults and again.faults is not first.faults
    changed = overrides.apply(data, [(("checkpoint", "interval"), "bad")])
    with pytest.raises(UserError, match="checkpoint.interval"):
        scenario.parse(changed, scenario.Context("x"), "x", sw.sections)


def test_a_table_checked_again_checks_only_the_values_it_has_not_seen() -> None:
    spec = {"d": Field("str", parse=parse_duration), "n": Field("int", low=1), "s": Field("str")}
    ctx = Context("x")
    before = {"d": "1h", "n": 2, "s": "a"}
    checked = check_table(ctx, "t", before, spec)
    assert checked == {"d": 3600.0, "n": 2, "s": "a"}
    # the very objects checked before are taken from that result (marked here to see it), others are checked
    known = (before, {**checked, "d": "from before"})
    assert check_table(ctx, "t", {**before, "s": "b"}, spec, known) == {"d": "from before", "n": 2, "s": "b"}
    with pytest.raises(UserError, match=r"t\.n: must be at least 1, got 0"):
        check_table(ctx, "t", {**before, "n": 0}, spec, known)
    with pytest.raises(UserError, match=r"t\.d"):
        check_table(ctx, "t", {**before, "d": "soon"}, spec, known)


def test_a_table_with_the_keys_of_one_checked_before_names_its_first_bad_value_in_the_spec_order() -> None:
    # the values a point changed are checked in the spec's order, whatever the table's order: the same error
    # as a full check; unchanged values come from the earlier result, the defaults with them
    spec = {"a": Field("int", low=1), "b": Field("int", low=1), "c": optional("int", 5)}
    ctx = Context("x")
    before = {"b": 2, "a": 1}
    known = (before, check_table(ctx, "t", before, spec))
    assert known[1] == {"a": 1, "b": 2, "c": 5}
    for table in ({"b": 0, "a": 0}, {"a": 0, "b": 0}):
        with pytest.raises(UserError, match=r"t\.a: must be at least 1, got 0"):
            check_table(ctx, "t", table, spec, known)
    later = {"b": 7, "a": 1}
    assert check_table(ctx, "t", later, spec, known) == check_table(ctx, "t", later, spec)
    assert list(check_table(ctx, "t", {"b": 7, "a": 3}, spec, known)) == ["a", "b", "c"]


def test_outcomes_cross_a_pipe_whole() -> None:
    # a worker pickles its outcomes as their values: every field comes back, the facts' too
    import pickle

    from clustertop.engine.sweep.results import Facts, Outcome

    facts = Facts(3, "ok", 1.5, 2.0e6, 16, 3.0, 40.0, 5.0, 0.02, (("ttft", 0.1), ("tpot", 0.02)), True)
    outcome = Outcome(3, b'{"index": 3}\n', "ok", facts, "why")
    back = pickle.loads(pickle.dumps([outcome, Facts(4, "invalid")], protocol=pickle.HIGHEST_PROTOCOL))
    assert repr(back) == repr([outcome, Facts(4, "invalid")])      # (repr: an invalid point's nan figures)
    assert [type(x) for x in (back[0], back[0].facts)] == [Outcome, Facts]
