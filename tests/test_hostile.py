"""The hostile corpus (tests/hostile/): every case run as a user would, the `clustertop` command in a
subprocess under a 2 GB address-space limit and a 20 s timeout. Each must end with exit 0 or 2, no traceback,
no control character echoed raw, and, when refused, one line on stderr naming the file (or flag) and saying
what is wrong.

The static cases are tests/hostile/cases.tsv (written by tests/hostile/make.py); the ones that need a FIFO, a
device, a symbolic link or tens of megabytes are made here, in a temporary folder (`{tmp}` in their command
lines). One test per case; the commands run two at a time, once, in a session fixture.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from clustertop.engine.config.errors import has_unsafe

CORPUS = Path(__file__).parent / "hostile"
LIMIT_AS = 2 << 30
TIMEOUT_S = 20.0
BASE = (CORPUS / "scenarios" / "crlf.toml").read_text().replace("\r\n", "\n")
RECORDING = CORPUS / "recordings" / "valid_prefix.jsonl"
CRLF = str(CORPUS / "scenarios" / "crlf.toml")
SWEEP = ["sweep", CRLF, "--vary", "jobs[0].tp=4,8"]


@dataclass
class Case:
    name: str
    argv: list[str]                  # "{tmp}" stands for the folder the made inputs are in
    code: int
    fragment: str = ""
    names: str = ""                  # what the one line must name (the file, or the flag)
    stdin: Path | None = None
    check: Callable[[Path], str | None] | None = None    # what must hold on disk afterwards (None: it does)
    outcome: dict[str, object] = field(default_factory=dict)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def static_cases() -> list[Case]:
    cases = []
    for i, line in enumerate((CORPUS / "cases.tsv").read_text(encoding="utf-8").splitlines()):
        if line.startswith("#"):
            continue
        file, command, code, fragment = line.split("\t")
        argv = [file if a == "FILE" else f"{{tmp}}/out/out{i}.json" if a == "OUT" else a
                for a in command.split()]
        cases.append(Case(f"{file} ({command.split()[0]})", argv, int(code), fragment, names=file))
    return cases


# ---- inputs made in the temporary folder -------------------------------------------------------------------

def _big_scenarios() -> dict[str, str | bytes]:
    """Scenario files too big to keep in the repository (name -> text)."""
    return {
        "issue_deep_array": "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
        "issue_dotted_key": "a" + ".a" * 40_000 + " = 1\n",
        "issue_deep_header": "[" + "a." * 200_000 + "a]\n",
        "issue_60000_jobs": 'name = "many"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 480000\n' + "".join(
            f'[[jobs]]\nname = "j{i}"\nmodel = "llama3.1-8b"\nseq_len = 8\nglobal_batch = 1\ngpus = 8\n'
            for i in range(60_000)),
        "too_big_file": BASE + "# " + "x" * 4_200_000 + "\n",
        "huge_name": BASE.replace('name = "tiny"', 'name = "' + "x" * 3_000_000 + '"'),
        "huge_duration": BASE.replace('duration = "2s"', 'duration = "' + "9" * 3_000_000 + '"'),
        "huge_unknown_key": BASE + "k" * 1_000_000 + " = 1\n",
        "huge_array": BASE + "x = [" + ",".join(["1.5"] * 500_000) + "]\n",
        "huge_inject_list": BASE + "[faults]\ninject = [" + ",".join(
            '{at = "1s", gpu = 1}' for _ in range(100_000)) + "]\n",
    }


def _big_recordings() -> dict[str, bytes]:
    header = RECORDING.read_bytes().split(b"\n")[0]
    return {
        "line_100mb.jsonl": header + b"\n" + b"x" * 100_000_000 + b"\n",
        "line_100mb_unterminated.jsonl": header + b"\n" + b"[" * 100_000_000,
        "gzip_bomb_zeros.jsonl.gz": gzip.compress(header + b"\n" + bytes(300_000_000), compresslevel=9,
                                                  mtime=0),
        "first_line_100mb.jsonl": b" " * 100_000_000,
    }


def prepare(tmp: Path) -> None:
    """Every input the made cases read or write: big files, FIFOs, symbolic links, a file to keep."""
    (tmp / "out").mkdir()
    for name, text in _big_scenarios().items():
        (tmp / f"{name}.toml").write_bytes(text if isinstance(text, bytes) else text.encode())
    for name, data in _big_recordings().items():
        (tmp / name).write_bytes(data)
    for fifo in ("fifo.toml", "fifo.jsonl", "out.fifo"):
        os.mkfifo(tmp / fifo)
    os.symlink(tmp / "loop.toml", tmp / "loop.toml")
    os.symlink(tmp / "nowhere.toml", tmp / "dangling.toml")
    (tmp / "target.json").write_text("keep")
    os.symlink(tmp / "target.json", tmp / "link.json")


# ---- the made cases ----------------------------------------------------------------------------------------

def _scenario_cases() -> list[Case]:
    refused = {"issue_deep_array": "nested more than 16",
               "issue_dotted_key": "key path of more than 16 parts",
               "issue_deep_header": "table header of more than 16 parts",
               "issue_60000_jobs": "larger than 4,194,304 bytes",
               "too_big_file": "larger than 4,194,304 bytes",
               "huge_name": "", "huge_duration": "duration", "huge_unknown_key": "unknown key",
               "huge_array": "unknown key", "huge_inject_list": "injected faults"}
    cases = []
    for name, fragment in refused.items():
        path = f"{{tmp}}/{name}.toml"
        command = ["record", path, "-o", f"{{tmp}}/{name}.out"] if name == "huge_inject_list" else \
            ["estimate", path]
        cases.append(Case(name, command, 2 if fragment else 0, fragment, names=path))
    cases.append(Case("scenario_fifo", ["estimate", "{tmp}/fifo.toml"], 2, "FIFO", names="{tmp}/fifo.toml"))
    for device in ("/dev/zero", "/dev/null", "/dev/urandom"):
        cases.append(Case(f"scenario {device}", ["estimate", device], 2, "character device", names=device))
        cases.append(Case(f"recording {device}", ["export", device, "-o", "{tmp}/x.json"], 2,
                          "character device", names=device))
    cases += [Case("symlink_loop", ["estimate", "{tmp}/loop.toml"], 2, "symbolic links",
                   names="{tmp}/loop.toml"),
              Case("dangling_symlink", ["estimate", "{tmp}/dangling.toml"], 2, "no such file",
                   names="{tmp}/dangling.toml"),
              Case("directory", ["estimate", "{tmp}/"], 2, "directory", names="{tmp}"),
              Case("name_too_long", ["estimate", "x" * 5000 + ".toml"], 2, "too long", names="xxxx")]
    return cases


def _recording_cases() -> list[Case]:
    cases = []
    for command in ("export", "replay", "compare"):
        extra = ["-o", "{tmp}/y.json"] if command == "export" else \
            [str(RECORDING)] if command == "compare" else []
        cases.append(Case(f"recording_fifo_{command}", [command, "{tmp}/fifo.jsonl", *extra], 2, "FIFO",
                          names="{tmp}/fifo.jsonl"))
    for name in _big_recordings():
        cases.append(Case(name, ["export", f"{{tmp}}/{name}", "-o", f"{{tmp}}/{name}.json"], 2, "longer than",
                          names=f"{{tmp}}/{name}"))
    cases.append(Case("stdin_bad_recording", ["export", "-", "-o", "{tmp}/stdin.json"], 2, "<stdin>:",
                      names="<stdin>", stdin=CORPUS / "recordings" / "event_type_int.jsonl"))
    cases.append(Case("stdin_good_recording", ["export", "-", "-o", "{tmp}/stdin2.json"], 0, stdin=RECORDING))
    return cases


def _link_kept(tmp: Path) -> str | None:
    if not (tmp / "link.json").is_symlink():
        return "the symbolic link was replaced"
    written = (tmp / "target.json").read_bytes().startswith(b'{"displayTimeUnit"')
    return None if written else "the link's target was not written"


def _output_cases() -> list[Case]:
    """Outputs: written through or refused, never replaced."""
    recording = ["export", str(RECORDING)]
    cases = [Case("export_to_symlink", [*recording, "-o", "{tmp}/link.json"], 0, check=_link_kept),
             Case("export_to_fifo_nobody_reads", [*recording, "-o", "{tmp}/out.fifo"], 2, "FIFO",
                  names="{tmp}/out.fifo"),
             Case("export_to_dev_null", [*recording, "-o", "/dev/null"], 0,
                  check=lambda tmp: None if Path("/dev/null").is_char_device() else "/dev/null was replaced"),
             Case("export_to_dev_stdout", [*recording, "-o", "/dev/stdout"], 0)]
    for command in (recording, ["record", CRLF], SWEEP):
        for target in ("/dev/full",) + (("/dev/full.missing/x.jsonl.gz",) if command[0] != "export" else ()):
            cases.append(Case(f"{command[0]}_to_{target}", [*command, "-o", target], 2,
                              "No space left" if target == "/dev/full" else "does not exist", names=target))
    for command in (recording, ["record", CRLF]):
        cases += [Case(f"{command[0]}_to_directory", [*command, "-o", "{tmp}"], 2, "directory",
                       names="{tmp}"),
                  Case(f"{command[0]}_to_dangling_link", [*command, "-o", "{tmp}/dangling.toml"], 2,
                       "missing file", names="{tmp}/dangling.toml"),
                  Case(f"{command[0]}_to_link_loop", [*command, "-o", "{tmp}/loop.toml"], 2, "symbolic links",
                       names="{tmp}/loop.toml")]
    cases.append(Case("best_to_missing_directory", [*SWEEP, "--best-to", "/nonexistent/b.toml"], 2,
                      "does not exist", names="/nonexistent/b.toml"))
    return cases


def _flag_cases() -> list[Case]:
    return [
        Case("vary_key_escape", [*SWEEP[:2], "--vary", "jobs[0].\x1b[2Jtp=4,8"], 2, r"\x1b[2J",
             names="--vary"),
        Case("vary_value_escape", [*SWEEP[:2], "--vary", 'jobs[0].name="\x1b[2J"'], 2,
             "cannot read the value", names="--vary"),
        Case("flag_newline", ["estimate", CRLF, "--x\nclustertop: ok"], 2, r"\n", names="--x"),
        Case("seed_2_70", ["record", CRLF, "-o", "{tmp}/s.jsonl", "--seed", str(2**70)], 2, "--seed",
             names="--seed"),
        Case("duration_inf", ["record", CRLF, "-o", "{tmp}/d.jsonl", "--duration", "1e400s"], 2, "--duration",
             names="--duration"),
        Case("output_name_escape", [*SWEEP, "-o", "{tmp}/a\x1b[2J\nb.jsonl",
                                    "--best-to", "{tmp}/c\x1b]0;x\x07.toml"], 0),
        Case("workers_fork_bomb", [*SWEEP, "--workers", "100000"], 2, "expected 1 to 256", names="--workers"),
        Case("dask_bad_scheme", [*SWEEP, "--dask", "notaproto://x"], 2, "not a Dask scheduler address",
             names="--dask"),
    ]


CASES = static_cases() + _scenario_cases() + _recording_cases() + _output_cases() + _flag_cases()


def test_the_corpus_is_whole() -> None:
    assert len(CASES) >= 250
    assert len({c.name for c in CASES}) == len(CASES), "two cases share a name"


# ---- running -----------------------------------------------------------------------------------------------

def run(case: Case, tmp: Path) -> dict[str, object]:
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    stdin = open(case.stdin, "rb") if case.stdin else subprocess.DEVNULL  # noqa: SIM115
    start = time.monotonic()
    outcome: dict[str, object]
    try:
        done = subprocess.run([sys.executable, "-m", "clustertop", *argv], cwd=CORPUS, stdin=stdin,
                              check=False, capture_output=True, timeout=TIMEOUT_S, preexec_fn=_limits)
        outcome = {"code": done.returncode, "out": done.stdout, "err": done.stderr.decode(errors="replace")}
    except subprocess.TimeoutExpired:
        outcome = {"timeout": True}
    finally:
        if case.stdin:
            stdin.close()  # type: ignore[union-attr]
    outcome["seconds"] = time.monotonic() - start
    return outcome


def problems(case: Case, outcome: dict[str, object], tmp: Path) -> list[str]:
    if outcome.get("timeout"):
        return [f"did not end within {TIMEOUT_S:.0f} s"]
    err, out = str(outcome["err"]), bytes(outcome["out"])  # type: ignore[arg-type]
    found = []
    if outcome["code"] != case.code:
        found.append(f"exit {outcome['code']}, expected {case.code}")
    if "Traceback" in err or "Exception ignored" in err:
        found.append("a traceback")
    if any(has_unsafe(line) for line in err.splitlines()):
        found.append("a control character on stderr")
    if any(has_unsafe(line.decode(errors="replace").replace("\t", " "))
           for line in out[:1_000_000].splitlines()):
        found.append("a control character on stdout")
    lines = err.splitlines()
    if len(lines) > 1:
        found.append(f"{len(lines)} lines on stderr")
    names = case.names.replace("{tmp}", str(tmp))
    if case.code == 2 and lines:
        if names and names not in lines[0]:
            found.append(f"the line does not name {names[:60]!r}")
        if case.fragment and case.fragment not in lines[0]:
            found.append(f"the line does not say {case.fragment!r}")
    if case.code == 2 and not lines:
        found.append("refused without a word")
    if case.check is not None and (why := case.check(tmp)):
        found.append(why)
    return found


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, object]]]:
    """Every case run once, two at a time (the machine has two cores)."""
    tmp = tmp_path_factory.mktemp("hostile")
    prepare(tmp)
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip((c.name for c in CASES), pool.map(lambda c: run(c, tmp), CASES)))
    if os.environ.get("HOSTILE_TIMES"):
        for name, o in sorted(done.items(),
                              key=lambda item: -float(item[1]["seconds"]))[:25]:  # type: ignore[arg-type]
            print(f"{float(o['seconds']):6.2f} s  {name}")  # type: ignore[arg-type]
    return tmp, done


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case: Case, outcomes: tuple[Path, dict[str, dict[str, object]]]) -> None:
    tmp, done = outcomes
    outcome = done[case.name]
    found = problems(case, outcome, tmp)
    assert not found, f"{', '.join(found)}; stderr: {str(outcome.get('err', ''))[:300]!r}"
