"""The built-in scenarios load, and `clustertop scenarios` lists each with its description."""

from __future__ import annotations

import pytest
from clustertop.cli import DEFAULT_SCENARIO, main
from clustertop.engine.config import scenario


def test_default_scenario_is_the_flagship() -> None:
    s = scenario.load(DEFAULT_SCENARIO)
    job = s.jobs[0]
    assert s.cluster.gpus == 16384 and s.cluster.gpu.name == "h100-sxm-80gb"
    assert (job.tp, job.cp, job.pp, job.dp) == (8, 1, 16, 128)
    assert job.tokens_per_step == 2048 * 8192


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_builtin_scenario_loads(name: str) -> None:
    s = scenario.load(name)
    assert s.name == name, "a scenario's name matches its file name"
    assert s.description
    for job in s.jobs:
        assert job.tp * job.cp * job.pp * job.dp == job.gpus
        assert job.first_gpu + job.gpus <= s.cluster.gpus


def test_scenarios_command_lists_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(scenario.builtin_names())
    for line, name in zip(out, scenario.builtin_names()):
        assert line.startswith(name + " ")
        assert scenario.load(name).description in line


def test_dp_is_derived_when_left_out(tmp_path) -> None:
    path = tmp_path / "derived.toml"
    path.write_text('name = "d"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 64\n'
                    '[[jobs]]\nmodel = "llama3.1-70b"\nseq_len = 4096\nglobal_batch = 64\ntp = 8\npp = 2\n')
    job = scenario.load(str(path)).jobs[0]
    assert job.dp == 4 and job.gpus == 64


def test_inline_model(tmp_path) -> None:
    path = tmp_path / "inline.toml"
    path.write_text('name = "i"\n[cluster]\ngpu = "a100-sxm-80gb"\ngpus = 8\n'
                    '[[jobs]]\nseq_len = 2048\nglobal_batch = 8\ntp = 8\n'
                    '[jobs.model]\nlayers = 40\nhidden = 5120\nheads = 40\nffn = 13824\nvocab = 32000\n')
    model = scenario.load(str(path)).jobs[0].model
    assert (model.layers, model.hidden, model.kv_heads, model.ffn_activation) == (40, 5120, 40, "swiglu")


def test_duration_defaults_to_one_hour(tmp_path) -> None:
    path = tmp_path / "short.toml"
    path.write_text('name = "s"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 8\n'
                    '[[jobs]]\nmodel = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 8\n')
    assert scenario.load(str(path)).duration_s == 3600.0     # a number, as a given "1h" becomes


def test_clusters_and_catalog_entries_are_hashed_once_as_dataclasses_hash_them() -> None:
    # the model's caches look clusters, GPUs, fabrics and models up thousands of times a sweep: each is hashed
    # once (the dataclass's own hash of its fields), and a pickle leaves the hash out (strings hash otherwise
    # in another process)
    import copy
    import dataclasses
    import pickle

    def fields_hash(obj: object) -> int:
        return hash(tuple(getattr(obj, f.name) for f in dataclasses.fields(obj)))  # type: ignore[arg-type]

    s = scenario.load("llama3-405b-16k")
    for shared in (s.cluster, s.cluster.gpu, s.cluster.scale_out, s.jobs[0].model):
        obj = copy.copy(shared)                   # (the catalog's own entries are not to be touched)
        assert obj == shared and hash(obj) == fields_hash(obj) == hash(shared)
        before = hash(obj)
        object.__setattr__(obj, "gpus" if obj is not shared and hasattr(obj, "gpus") else "name", "changed")
        assert hash(obj) == before != fields_hash(obj)          # not hashed again
        back = pickle.loads(pickle.dumps(obj))
        assert hash(back) == fields_hash(back) != before
    other = dataclasses.replace(s.cluster, gpus=8192)
    assert hash(other) == fields_hash(other) != hash(s.cluster)
