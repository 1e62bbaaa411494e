"""`clustertop watch --prometheus URL | --exporter URL[,URL...]`: the dashboard over a real cluster's
telemetry, live (engine/telemetry/watch.py; docs/telemetry.md).

With `-o FILE` it runs headless and writes the stream (what the dashboard's child process does, with `-o -`);
`--record FILE` writes it to a file as well, while watching. Every flag is checked, and the first round must
answer, before anything is written: a refused connection, a timeout, an HTTP error or a page with no DCGM
metric is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from clustertop.cli import duration_flag
from clustertop.engine.config import units
from clustertop.engine.config.errors import UserError, escape
from clustertop.engine.config.outfile import check_output


def child_args(args: argparse.Namespace) -> list[str]:
    """The flags the dashboard's child (`clustertop watch ... -o -`) gets:
    the same source, cluster and timing."""
    out: list[str] = []
    if args.prometheus:
        out += ["--prometheus", args.prometheus]
    for value in args.exporter or []:
        out += ["--exporter", value]
    for flag, value in (("--cluster", args.cluster), ("--interval", args.interval),
                        ("--timeout", args.timeout), ("--record", args.record),
                        ("--duration", args.duration)):
        if value is not None:
            out += [flag, os.path.abspath(value) if flag in ("--cluster", "--record") else value]
    return out


def headless(args: argparse.Namespace, interval: float, timeout: float, duration: float | None) -> int:
    from clustertop.engine.telemetry import watch

    outputs = [args.output] + ([args.record] if args.record else [])
    for path, flag in zip(outputs, ("-o", "--record")):
        check_output(path, flag)
    if args.prometheus:
        poller: Any = watch.PrometheusQueries(_url(args.prometheus), timeout, interval)
        source = "prometheus"
    else:
        poller = watch.Exporters(watch.exporter_urls(args.exporter), timeout)
        source = "exporter"

    def note(text: str) -> None:
        print(f"clustertop: {escape(text)}", file=sys.stderr)     # notes echo labels from the network

    stop = watch.Stop()

    def stopping(signum: int, frame: object) -> None:
        stop.signal = signum          # looked at every 50 ms; requests in flight are then cancelled

    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGTERM, signal.SIGINT)}
    if args.output == "-":
        _stop_with_parent(stop)
    try:
        watcher = watch.watch(poller, source=source, cluster_file=args.cluster, outputs=outputs,
                              interval=interval, duration=duration, note=note, stop=stop)
        line = watcher.summary()
        if line is not None:
            note(line)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # the dashboard went away
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + stop.signal if stop else 0


def _stop_with_parent(stop: Any) -> None:
    """The dashboard's child (`-o -`, its stdin a pipe from the dashboard): the end of that pipe (the
    dashboard quit, or died) stops the watcher, whatever the network does."""
    import stat
    import threading

    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return
    except OSError:
        return

    def wait() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        if not stop:
            stop.signal = signal.SIGTERM

    threading.Thread(target=wait, name="parent", daemon=True).start()


def _url(text: str) -> str:
    from clustertop.engine.telemetry.http import check_url

    try:
        return check_url(text)
    except ValueError as exc:
        raise UserError(f"{exc}; expected the Prometheus server's address, such as http://prometheus:9090",
                        "--prometheus") from None


def main(args: argparse.Namespace) -> int:
    if bool(args.prometheus) == bool(args.exporter):
        raise UserError("expected either --prometheus URL or --exporter URL[,URL...]", "watch")
    interval = duration_flag(args.interval, "--interval", 0.05, 86400.0) or 5.0
    timeout = (duration_flag(args.timeout, "--timeout", 0.05, 600.0)
               or min(interval, 10.0, max(0.5, 0.8 * interval)))
    if timeout > interval:
        raise UserError(f"{args.timeout} is longer than the interval ({units.seconds(interval)}); expected "
                        "a timeout at most the interval, so that a round ends before the next is due",
                        "--timeout")
    if args.record and args.output and args.output != "-" and \
            os.path.realpath(args.record) == os.path.realpath(args.output):
        raise UserError(f"{args.record} is also -o's file; expected two different files", "--record")
    duration = duration_flag(args.duration, "--duration")
    if args.prometheus:
        _url(args.prometheus)
    else:
        from clustertop.engine.telemetry.watch import exporter_urls

        exporter_urls(args.exporter)
    if args.cluster is not None:
        from clustertop.engine.config.scenario import load_cluster

        load_cluster(args.cluster)
    if args.output is not None:
        return headless(args, interval, timeout, duration)
    if args.record:
        check_output(args.record, "--record")
    from clustertop.tui.app import show
    from clustertop.tui.sources.watch import WatchSource

    urls = [] if args.prometheus else exporter_urls(args.exporter)
    name = args.prometheus or (urls[0] if len(urls) == 1 else f"{len(urls):,} exporters")
    show([WatchSource(name, child_args(args))], speed=1.0, metric=args.metric)
    return 0
