"""The `clustertop` command: one subcommand per way of using a scenario or a recording.

Errors a user can cause end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import clustertop
from clustertop import signals
from clustertop.commands.scenarios import DEFAULT_SCENARIO
from clustertop.engine.config import units
from clustertop.engine.config.errors import UserError, escape

DESCRIPTION = f"""\
clustertop simulates GPU clusters running real AI workloads (a 16K-GPU Llama 3.1 405B training run,
a 1 GW site) and shows what happens: per-GPU utilization, link saturation, power, failures.

A SCENARIO is a built-in name (see `clustertop scenarios`) or a path to a .toml file.
With no subcommand, clustertop runs the default scenario ({DEFAULT_SCENARIO}) live.
"""

EPILOG = """\
examples:
  clustertop                                   live dashboard of the default scenario
  clustertop scenarios                         list the built-in scenarios
  clustertop estimate llama3-405b-16k          step time, TFLOP/s per GPU, MFU, memory
  clustertop validate                          the model against published training runs
  clustertop record llama3-405b-16k -o run.jsonl.gz --duration 6h
  clustertop replay run.jsonl.gz               replay a recording in the dashboard
  clustertop compare pcie-8gpu nvswitch-8gpu   two scenarios side by side
  clustertop export run.jsonl.gz --format perfetto -o trace.json
  clustertop sweep llama3-405b-16k --vary jobs[0].tp=4,8 --vary jobs[0].pp=8,16
  clustertop import prometheus util.json power.json --cluster site.toml -o real.jsonl.gz
  clustertop watch --exporter http://node1:9400/metrics,http://node2:9400/metrics --cluster site.toml
"""


def _dispatch(name: str) -> Callable[[argparse.Namespace], int]:
    """The subcommand's module is imported only when it runs, so `--help` and errors stay fast."""

    def run(args: argparse.Namespace) -> int:
        module = importlib.import_module(f"clustertop.commands.{MODULES.get(name, name)}")
        command: Callable[[argparse.Namespace], int] = module.main
        return command(args)

    return run


MODULES = {"import": "import_telemetry"}     # subcommands whose name is not a module name


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line with exit code 2 (its default) and no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {escape(message)} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """--version: the version is looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        parser.exit(0, f"clustertop {clustertop.__version__}\n")


def _speed(text: str) -> float:
    """--speed: a number of simulated seconds per second in the dashboard's range."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of simulated seconds per second, got {text!r}") \
            from None
    if not 0.1 <= value <= 1e6:
        raise argparse.ArgumentTypeError(f"expected 0.1 to 1000000 simulated seconds per second, got {text}")
    return value


def duration_flag(text: str | None, flag: str, low: float = 0.0,
                  high: float = units.MAX_DURATION_S) -> float | None:
    """A duration flag's seconds ("90s", "6h"; None when it was not given), from `low` to `high`; a UserError
    naming the flag otherwise (record and watch check theirs when they run, after the parser)."""
    if text is None:
        return None
    try:
        value = units.parse_duration(text)
    except ValueError as exc:
        raise UserError(str(exc), flag) from None
    if not low <= value <= high:
        raise UserError(f"expected {units.seconds(low)} to {units.seconds(high)}, got {text}", flag)
    return value


def _view_flags(p: argparse.ArgumentParser) -> None:
    """How the dashboard starts: its speed and the heatmap's metric."""
    p.add_argument("--speed", type=_speed, default=1.0, metavar="N",
                   help="simulated seconds per second, 0.1 to 1000000 (default: 1)")
    _metric_flag(p)


def _metric_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metric", choices=("util", "power", "phase"), default="util",
                   help="what the heatmap colours by (default: util)")


def _scenario_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="built-in name or .toml path")


def _run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", nargs="?", default=DEFAULT_SCENARIO,
                   help=f"built-in name or .toml path (default: {DEFAULT_SCENARIO})")
    p.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    _view_flags(p)


def _replay_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a .jsonl or .jsonl.gz recording, or - for stdin")
    _view_flags(p)


def _record_flags(p: argparse.ArgumentParser) -> None:
    _scenario_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file (.jsonl, or .jsonl.gz for gzip), or - for stdout")
    p.add_argument("--duration", metavar="D",
                   help='simulated time, e.g. "90s", "6h", "54d" (default: the scenario\'s)')
    p.add_argument("--seed", type=int, metavar="N", help="random seed (default: the scenario's)")
    p.add_argument("--sample", metavar="D",
                   help="sampling interval, e.g. \"1s\" (default: suits the duration)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary on stdout when writing to a file")
    p.add_argument("--control", action="store_true",
                   help="live mode: pace the output and read commands (speed, pause, resume, inject_fault) "
                        "as JSON lines on stdin")


def _estimate_flags(p: argparse.ArgumentParser) -> None:
    _scenario_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def _compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="scenario name, .toml path or recording")
    p.add_argument("b", metavar="B", nargs="?",
                   help="scenario name, .toml path or recording (default: the twin A's compare_with names)")
    _view_flags(p)


def _export_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a .jsonl or .jsonl.gz recording, or - for stdin")
    p.add_argument("--format", choices=["perfetto"], default="perfetto",
                   help="output format (default: perfetto)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output file")


def _sweep_flags(p: argparse.ArgumentParser) -> None:
    _scenario_arg(p)
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a scenario key (jobs[0].tp, cluster.gpus, ...) and its values; "
                        "repeat for a cross product")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="stream one JSON object per point to FILE (JSON Lines)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="print the best N points (default 10)")
    p.add_argument("--rank", choices=["step_time", "tokens_per_s_per_gpu", "usd_per_mtoken",
                                      "energy_j_per_token", "tokens_per_s_per_mw"],
                   help="rank the points that fit by this objective (default: step time, or tokens/s per GPU "
                        "once the points differ in GPUs or tokens per step)")
    p.add_argument("--slo", metavar="KEY=D,...",
                   help="serving targets a point must meet to be ranked, e.g. ttft=2s,tpot=50ms (99th "
                        "percentiles; ttft_median, tpot_mean, ... also); a point whose replicas cannot "
                        "keep up misses it")
    p.add_argument("--best-to", metavar="FILE.toml", help="write the best point as a ready scenario file")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on an existing Dask distributed scheduler")


def _import_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=["prometheus"], help="the dumps' format: prometheus (query_range JSON)")
    p.add_argument("dumps", nargs="+", metavar="DUMP.json",
                   help="range-query results, any order, one or more")
    p.add_argument("--cluster", required=True, metavar="CLUSTER.toml",
                   help="a scenario file (or a file with only [cluster]) "
                        "whose cluster the GPUs are placed on")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output recording (.jsonl, or .jsonl.gz for gzip), or - for stdout")
    p.add_argument("--json", action="store_true", help="print a JSON summary when writing to a file")


def _watch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", metavar="URL",
                   help="a Prometheus server (its HTTP API) that scrapes dcgm-exporter")
    p.add_argument("--exporter", action="append", metavar="URL[,URL...]",
                   help="dcgm-exporter (and node_exporter) /metrics URLs, comma-separated or @FILE (one a "
                        "line); repeatable")
    p.add_argument("--cluster", metavar="CLUSTER.toml",
                   help="a scenario file (or [cluster] alone) to place the GPUs on "
                        "(default: the hosts that answer)")
    p.add_argument("--interval", metavar="D", help='time between rounds, e.g. "5s" (default: 5s)')
    p.add_argument("--timeout", metavar="D",
                   help="deadline of one request (default: 0.8 x the interval, at most 10s)")
    p.add_argument("--record", metavar="FILE",
                   help="also write what is watched to FILE (.jsonl or .jsonl.gz)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="headless: write the stream to FILE (or - for stdout) instead of showing it")
    p.add_argument("--duration", metavar="D",
                   help='stop after this long, e.g. "1h" (default: until interrupted)')
    _metric_flag(p)


def _validate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the table as JSON")


# Each subcommand: its help line, the example(s) under its --help, and its flags.
SUBCOMMANDS: tuple[tuple[str, str, str, Callable[[argparse.ArgumentParser], None] | None], ...] = (
    ("run", "run a scenario live in the dashboard", "example: clustertop run llama3-405b-16k", _run_flags),
    ("replay", "replay a recording in the dashboard",
     "examples:\n  clustertop replay run.jsonl.gz\n  clustertop record X -o - | clustertop replay -",
     _replay_flags),
    ("record", "simulate a scenario headless and write its event stream",
     "example: clustertop record llama3-405b-16k -o run.jsonl.gz --duration 6h --json", _record_flags),
    ("estimate", "what one training step costs: time, throughput, MFU, memory",
     "examples:\n  clustertop estimate llama3-405b-16k\n  clustertop estimate my.toml --json",
     _estimate_flags),
    ("compare", "two scenarios or recordings side by side, in sync",
     ("examples:\n  clustertop compare pcie-8gpu nvswitch-8gpu\n"
     "  clustertop compare mi300x-vs-h100          the scenario beside its twin (compare_with)"),
     _compare_flags),
    ("export", "convert a recording to another format (Perfetto / Chrome trace)",
     "example: clustertop export run.jsonl.gz --format perfetto -o trace.json", _export_flags),
    ("scenarios", "list the built-in scenarios", "example: clustertop scenarios", None),
    ("sweep", "estimate every combination of scenario settings; the best first",
     ("examples:\n"
     "  clustertop sweep llama3-405b-16k --vary jobs[0].tp=4,8 --vary jobs[0].pp=8,16 --top 5\n"
     "  clustertop sweep llama3-405b-16k --vary cluster.scale_out=roce-400g,ib-ndr-400g "
     "-o results.jsonl --best-to best.toml\n"
     "  clustertop sweep X --vary ... --dask tcp://scheduler:8786"), _sweep_flags),
    ("import", "convert real telemetry (Prometheus range-query dumps of DCGM metrics) into a recording",
     ("examples:\n"
     "  clustertop import prometheus util.json power.json --cluster site.toml -o real.jsonl.gz\n"
     "  clustertop compare real.jsonl.gz site.toml      the real run beside its simulated twin\n"
     "a dump is the JSON of /api/v1/query_range (resultType matrix), plain or gzip; see docs/telemetry.md"),
     _import_flags),
    ("watch", "the dashboard over a real cluster: DCGM telemetry from Prometheus or the exporters, live",
     ("examples:\n"
     "  clustertop watch --prometheus http://prometheus:9090 --cluster site.toml\n"
     "  clustertop watch --exporter http://node1:9400/metrics,http://node2:9400/metrics\n"
     "  clustertop watch --exporter @exporters.txt --record real.jsonl.gz\n"
     "  clustertop watch --prometheus http://prometheus:9090 -o real.jsonl.gz --duration 1h   "
     "(headless)\nsee docs/telemetry.md"), _watch_flags),
    ("validate", "compare the performance model with published training runs", "example: clustertop validate",
     _validate_flags),
)


def _unknown(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> NoReturn:
    """Flags the subcommand does not know: one line naming them, the closest flag it has, and its --help."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = subparsers.choices[command]
    flags = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    unknown = [e for e in extra if e.startswith("-")] or extra
    close = difflib.get_close_matches(unknown[0].split("=")[0], flags, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    sub.exit(2, f"{sub.prog}: {escape('unrecognized arguments: ' + ' '.join(extra))}{hint} "
                f"(see `{sub.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clustertop", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", parser_class=_Parser)
    for name, help, epilog, flags in SUBCOMMANDS:
        p = sub.add_parser(name, help=help, description=help, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=_dispatch(name))
        if flags is not None:
            flags(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        signals.interrupts_as_usual()
        parser = build_parser()
        given = list(sys.argv[1:] if argv is None else argv)
        args, extra = parser.parse_known_args(given)
        if args.command is None:
            given = ["run", *given]
            args, extra = parser.parse_known_args(given)
        if extra:
            _unknown(parser, args.command, extra)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except UserError as exc:
        print(f"clustertop: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return signals.INTERRUPTED
    except BrokenPipeError:
        return 0
    except MemoryError:
        print("clustertop: out of memory; expected an input this machine can hold (see Limits in the README)",
              file=sys.stderr)
        return 2
