"""The hostile corpus (tests/hostile/): every case run as a user would, the `clustertop` command in a subprocess
under a 2 GB address-space limit and a 20 s timeout. Each must end with exit 0 or 2, no traceback, no control
character echoed raw, and, when refused, one line on stderr naming the file (or flag) and saying what is wrong.

The static cases are tests/hostile/cases.tsv (written by tests/hostile/make.py); the ones that need a FIFO, a
device, a symbolic link or tens of megabytes are made here.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clustertop.engine.config.errors import has_unsafe

CORPUS = Path(__file__).parent / "hostile"
LIMIT_AS = 2 << 30
TIMEOUT_S = 20.0
BASE = (CORPUS / "scenarios" / "crlf.toml").read_text().replace("\r\n", "\n")
RECORDING = CORPUS / "recordings" / "valid_prefix.jsonl"


@dataclass
class Case:
    name: str
    argv: list[str]
    code: int
    fragment: str = ""
    names: str = ""                  # what the one line must name (the file, or the flag)
    stdin: Path | None = None
    check: object = None             # a callable run after the command (what must hold on disk)
    outcome: dict[str, object] = field(default_factory=dict)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def static_cases(out: Path) -> list[Case]:
    cases = []
    for i, line in enumerate((CORPUS / "cases.tsv").read_text(encoding="utf-8").splitlines()):
        if line.startswith("#"):
            continue
        file, command, code, fragment = line.split("\t")
        argv = [file if a == "FILE" else str(out / f"out{i}.json") if a == "OUT" else a for a in command.split()]
        cases.append(Case(f"{file} ({command.split()[0]})", argv, int(code), fragment, names=file))
    return cases


def made_cases(tmp: Path) -> list[Case]:
    """Cases whose input is made here: too big to keep, or not a regular file."""
    cases: list[Case] = []

    def scenario(name: str, text: str | bytes, code: int, fragment: str, command: str = "estimate") -> None:
        path = tmp / f"{name}.toml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        out = ["-o", str(tmp / f"{name}.out")] if command == "record" else []
        cases.append(Case(name, [command, str(path), *out], code, fragment, names=str(path)))

    scenario("issue_deep_array", "a = " + "[" * 100_000 + "]" * 100_000 + "\n", 2, "nested more than 16")
    scenario("issue_dotted_key", "a" + ".a" * 40_000 + " = 1\n", 2, "key path of more than 16 parts")
    scenario("issue_deep_header", "[" + "a." * 200_000 + "a]\n", 2, "table header of more than 16 parts")
    scenario("issue_60000_jobs", 'name = "many"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 480000\n' + "".join(
        f'[[jobs]]\nname = "j{i}"\nmodel = "llama3.1-8b"\nseq_len = 8\nglobal_batch = 1\ngpus = 8\n'
        for i in range(60_000)), 2, "larger than 4,194,304 bytes")
    scenario("too_big_file", BASE + "# " + "x" * 4_200_000 + "\n", 2, "larger than 4,194,304 bytes")
    scenario("huge_name", BASE.replace('name = "tiny"', 'name = "' + "x" * 3_000_000 + '"'), 0, "")
    scenario("huge_duration", BASE.replace('duration = "2s"', 'duration = "' + "9" * 3_000_000 + '"'), 2,
             "duration")
    scenario("huge_unknown_key", BASE + "k" * 1_000_000 + " = 1\n", 2, "unknown key")
    scenario("huge_array", BASE + "x = [" + ",".join(["1.5"] * 500_000) + "]\n", 2, "unknown key")
    scenario("huge_inject_list", BASE + "[faults]\ninject = [" + ",".join(
        '{at = "1s", gpu = 1}' for _ in range(100_000)) + "]\n", 2, "injected faults", command="record")
    fifo = tmp / "fifo.toml"
    os.mkfifo(fifo)
    cases.append(Case("scenario_fifo", ["estimate", str(fifo)], 2, "FIFO", names=str(fifo)))
    for device in ("/dev/zero", "/dev/null", "/dev/urandom"):
        cases.append(Case(f"scenario {device}", ["estimate", device], 2, "character device", names=device))
        cases.append(Case(f"recording {device}", ["export", device, "-o", str(tmp / "x.json")], 2,
                          "character device", names=device))
    loop = tmp / "loop.toml"
    os.symlink(loop, loop)
    cases.append(Case("symlink_loop", ["estimate", str(loop)], 2, "symbolic links", names=str(loop)))
    dangling = tmp / "dangling.toml"
    os.symlink(tmp / "nowhere.toml", dangling)
    cases.append(Case("dangling_symlink", ["estimate", str(dangling)], 2, "no such file", names=str(dangling)))
    cases.append(Case("directory", ["estimate", str(tmp) + "/"], 2, "directory", names=str(tmp)))
    long_name = "x" * 5000 + ".toml"
    cases.append(Case("name_too_long", ["estimate", long_name], 2, "too long", names="xxxx"))
    rfifo = tmp / "fifo.jsonl"
    os.mkfifo(rfifo)
    for command in ("export", "replay", "compare"):
        extra = ["-o", str(tmp / "y.json")] if command == "export" else [str(RECORDING)] if command == "compare" else []
        cases.append(Case(f"recording_fifo_{command}", [command, str(rfifo), *extra], 2, "FIFO", names=str(rfifo)))

    def recording(name: str, data: bytes, code: int, fragment: str) -> None:
        path = tmp / name
        path.write_bytes(data)
        cases.append(Case(name, ["export", str(path), "-o", str(tmp / f"{name}.json")], code, fragment,
                          names=str(path)))

    header = RECORDING.read_bytes().split(b"\n")[0]
    recording("line_100mb.jsonl", header + b"\n" + b"x" * 100_000_000 + b"\n", 2, "longer than")
    recording("line_100mb_unterminated.jsonl", header + b"\n" + b"[" * 100_000_000, 2, "longer than")
    recording("gzip_bomb_zeros.jsonl.gz", gzip.compress(header + b"\n" + bytes(300_000_000), compresslevel=9,
                                                        mtime=0), 2, "longer than")
    recording("first_line_100mb.jsonl", b" " * 100_000_000, 2, "longer than")
    cases.append(Case("stdin_bad_recording", ["export", "-", "-o", str(tmp / "stdin.json")], 2, "<stdin>:",
                      names="<stdin>", stdin=CORPUS / "recordings" / "event_type_int.jsonl"))
    cases.append(Case("stdin_good_recording", ["export", "-", "-o", str(tmp / "stdin2.json")], 0,
                      stdin=RECORDING))

    # outputs: written through or refused, never replaced
    target = tmp / "target.json"
    target.write_text("keep")
    link = tmp / "link.json"
    os.symlink(target, link)

    def link_kept() -> str | None:
        if not link.is_symlink():
            return "the symbolic link was replaced"
        return None if target.read_bytes().startswith(b'{"displayTimeUnit"') else "the link's target was not written"

    cases.append(Case("export_to_symlink", ["export", str(RECORDING), "-o", str(link)], 0, check=link_kept))
    ofifo = tmp / "out.fifo"
    os.mkfifo(ofifo)
    cases.append(Case("export_to_fifo_nobody_reads", ["export", str(RECORDING), "-o", str(ofifo)], 2, "FIFO",
                      names=str(ofifo)))
    cases.append(Case("export_to_dev_null", ["export", str(RECORDING), "-o", "/dev/null"], 0,
                      check=lambda: None if Path("/dev/null").is_char_device() else "/dev/null was replaced"))
    cases.append(Case("export_to_dev_stdout", ["export", str(RECORDING), "-o", "/dev/stdout"], 0))
    for command in (["export", str(RECORDING)], ["record", str(CORPUS / "scenarios" / "crlf.toml")],
                    ["sweep", str(CORPUS / "scenarios" / "crlf.toml"), "--vary", "jobs[0].tp=4,8"]):
        for target_name in ("/dev/full",) + (("/dev/full.missing/x.jsonl.gz",) if command[0] != "export" else ()):
            cases.append(Case(f"{command[0]}_to_{target_name}", [*command, "-o", target_name], 2,
                              "No space left" if target_name == "/dev/full" else "does not exist", names=target_name))
    for command in (["export", str(RECORDING)], ["record", str(CORPUS / "scenarios" / "crlf.toml")]):
        cases.append(Case(f"{command[0]}_to_directory", [*command, "-o", str(tmp)], 2, "directory", names=str(tmp)))
        cases.append(Case(f"{command[0]}_to_dangling_link", [*command, "-o", str(dangling)], 2, "missing file",
                          names=str(dangling)))
        cases.append(Case(f"{command[0]}_to_link_loop", [*command, "-o", str(loop)], 2, "symbolic links",
                          names=str(loop)))
    sweep = ["sweep", str(CORPUS / "scenarios" / "crlf.toml"), "--vary", "jobs[0].tp=4,8"]
    cases.append(Case("best_to_missing_directory", [*sweep, "--best-to", "/nonexistent/b.toml"], 2,
                      "does not exist", names="/nonexistent/b.toml"))
    # flags
    cases.append(Case("vary_key_escape", [*sweep[:2], "--vary", "jobs[0].\x1b[2Jtp=4,8"], 2, r"\x1b[2J",
                      names="--vary"))
    cases.append(Case("vary_value_escape", [*sweep[:2], "--vary", 'jobs[0].name="\x1b[2J"'], 2,
                      "cannot read the value", names="--vary"))
    cases.append(Case("flag_newline", ["estimate", str(CORPUS / "scenarios" / "crlf.toml"), "--x\nclustertop: ok"],
                      2, r"\n", names="--x"))
    cases.append(Case("seed_2_70", ["record", str(CORPUS / "scenarios" / "crlf.toml"), "-o", str(tmp / "s.jsonl"),
                                    "--seed", str(2**70)], 2, "--seed", names="--seed"))
    cases.append(Case("duration_inf", ["record", str(CORPUS / "scenarios" / "crlf.toml"), "-o", str(tmp / "d.jsonl"),
                                       "--duration", "1e400s"], 2, "--duration", names="--duration"))
    cases.append(Case("workers_fork_bomb", [*sweep, "--workers", "100000"], 2, "expected 1 to 256", names="--workers"))
    cases.append(Case("dask_bad_scheme", [*sweep, "--dask", "notaproto://x"], 2, "not a Dask scheduler address",
                      names="--dask"))
    return cases


def run(case: Case, cwd: Path) -> Case:
    stdin = open(case.stdin, "rb") if case.stdin else subprocess.DEVNULL  # noqa: SIM115
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "clustertop", *case.argv], cwd=cwd, stdin=stdin, check=False,
                              capture_output=True, timeout=TIMEOUT_S, preexec_fn=_limits)
        case.outcome = {"code": done.returncode, "out": done.stdout, "err": done.stderr.decode(errors="replace")}
    except subprocess.TimeoutExpired:
        case.outcome = {"timeout": True}
    finally:
        if case.stdin:
            stdin.close()  # type: ignore[union-attr]
    case.outcome["seconds"] = time.monotonic() - start
    return case


def problems(case: Case) -> list[str]:
    o = case.outcome
    if o.get("timeout"):
        return [f"did not end within {TIMEOUT_S:.0f} s"]
    err, out = str(o["err"]), bytes(o["out"])  # type: ignore[arg-type]
    found = []
    if o["code"] != case.code:
        found.append(f"exit {o['code']}, expected {case.code}")
    if "Traceback" in err or "Exception ignored" in err:
        found.append("a traceback")
    if any(has_unsafe(line) for line in err.splitlines()):
        found.append("a control character on stderr")
    if any(has_unsafe(line.decode(errors="replace").replace("\t", " ")) for line in out[:1_000_000].splitlines()):
        found.append("a control character on stdout")
    lines = err.splitlines()
    if len(lines) > 1:
        found.append(f"{len(lines)} lines on stderr")
    if case.code == 2 and lines:
        if case.names and case.names not in lines[0]:
            found.append(f"the line does not name {case.names[:60]!r}")
        if case.fragment and case.fragment not in lines[0]:
            found.append(f"the line does not say {case.fragment!r}")
    if case.code == 2 and not lines:
        found.append("refused without a word")
    if case.check is not None and (why := case.check()):  # type: ignore[operator]
        found.append(str(why))
    return found


def test_hostile_corpus(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    cases = static_cases(out) + made_cases(tmp_path)
    assert len(cases) >= 250
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda c: run(c, CORPUS), cases))
    failures = [f"{c.name}: {', '.join(p)}; stderr: {str(c.outcome.get('err', ''))[:300]!r}"
                for c in done if (p := problems(c))]
    if os.environ.get("HOSTILE_TIMES"):
        for c in sorted(done, key=lambda c: -float(c.outcome["seconds"]))[:25]:  # type: ignore[arg-type]
            print(f"{float(c.outcome['seconds']):6.2f} s  {c.name}")  # type: ignore[arg-type]
    assert not failures, f"{len(failures)} of {len(done)} cases failed:\n" + "\n".join(failures)
