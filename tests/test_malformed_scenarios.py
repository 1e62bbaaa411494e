"""Every error a user can cause in a scenario ends in one clear line on stderr with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from clustertop.cli import main

CORPUS = Path(__file__).parent / "malformed"
CASES = sorted(CORPUS.glob("*.toml"))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, f"expected one line, got {err!r}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


def test_corpus_covers_the_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_malformed_scenario(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    code, out, err = run_cli(capsys, "estimate", str(path))
    assert code == 2
    assert out == ""
    assert_one_line_error(err, str(path), expect)


@pytest.mark.parametrize("subcommand", ["estimate", "record", "run"])
def test_every_subcommand_validates(subcommand: str, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path) -> None:
    bad = CORPUS / "unknown_gpu.toml"
    extra = ["-o", str(tmp_path / "out.jsonl")] if subcommand == "record" else []
    code, _, err = run_cli(capsys, subcommand, str(bad), *extra)
    assert code == 2
    assert_one_line_error(err, "cluster.gpu: unknown name")
    assert not (tmp_path / "out.jsonl").exists(), "nothing is written for a bad scenario"


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("  \n")
    code, _, err = run_cli(capsys, "estimate", str(path))
    assert code == 2
    assert_one_line_error(err, str(path), "is empty")


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(bytes(range(256)) * 4)
    code, _, err = run_cli(capsys, "estimate", str(path))
    assert code == 2
    assert_one_line_error(err, str(path), "binary file")


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    code, _, err = run_cli(capsys, "estimate", str(path))
    assert code == 2
    assert_one_line_error(err, str(path), "not UTF-8")


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.toml"
    code, _, err = run_cli(capsys, "estimate", str(path))
    assert code == 2
    assert_one_line_error(err, str(path), "no such file")


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "estimate", str(tmp_path))
    assert code == 2
    assert_one_line_error(err, str(tmp_path), "is a directory")


def test_unknown_builtin_name_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "estimate", "llama3-405b-16")
    assert code == 2
    assert_one_line_error(err, "unknown scenario", "did you mean 'llama3-405b-16k'")


def test_bad_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "llama3-405b-16k", "--frobnicate"])
    assert exc.value.code == 2
    _, err = capsys.readouterr()
    assert_one_line_error(err, "--frobnicate")
