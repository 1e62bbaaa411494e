"""Exporter pages (the Prometheus text exposition format of dcgm-exporter's and node_exporter's /metrics): the
samples of the metrics clustertop reads, with their labels.

prometheus-client's parser is the reference, but it spends ~85 us per sample in pure Python (17 ms for one
8-GPU DCGM page): 2,048 exporters every 5 s would need seven cores. So only lines of wanted metrics are looked
at, plain lines (`name{a="b",...} value [timestamp]` with no escapes) are read with two regular expressions,
and every other line (escapes, unusual spacing, anything the fast pattern does not take whole) goes to
prometheus-client's parser. tests/test_telemetry_watch.py (test_fast_exporter_parse_is_the_librarys) checks
that both give the same samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

_LINE = re.compile(rb"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"\\]*\",?)*)\})? "
                   rb"([-+0-9.eEinfINFaN]+)(?: -?[0-9]+)?")
_LABEL = re.compile(rb"([a-zA-Z_][a-zA-Z0-9_]*)=\"([^\"\\]*)\"")
MAX_LABEL = 256

Sample = tuple[str, dict[str, str], float]


class PageError(ValueError):
    """The page is not the text exposition format (an HTML page, a JSON answer, garbage)."""


def parse(page: bytes, wanted: Iterable[str]) -> list[Sample]:
    """(metric, labels, value) of every sample of the `wanted` metrics (NaN and infinities as NaN). PageError
    when the page has no metric line at all."""
    names = frozenset(wanted)
    prefixes = tuple(name.encode() for name in names)
    out: list[Sample] = []
    slow: list[bytes] = []
    any_metric = False
    match, labels_of = _LINE.fullmatch, _LABEL.findall
    for line in page.split(b"\n"):
        if not line.startswith(prefixes):
            if not any_metric and line[:1].isalpha():
                any_metric = True
            continue
        any_metric = True
        found = match(line.rstrip(b"\r"))
        if found is None:
            slow.append(line)
            continue
        name = found.group(1).decode()
        if name not in names:
            continue
        raw = found.group(2)
        labels = {k.decode(): v[:MAX_LABEL].decode(errors="replace")
                  for k, v in labels_of(raw)} if raw else {}
        try:
            value = float(found.group(3))
        except ValueError:
            slow.append(line)
            continue
        out.append((name, labels, value if math.isfinite(value) else math.nan))
    if slow:
        out.extend(_library(slow, names))
    if not any_metric and page.strip():
        head = page.lstrip()[:1]
        what = "HTML" if head == b"<" else "JSON" if head in (b"{", b"[") else "text without metric lines"
        raise PageError(f"answered {what}; expected a Prometheus metrics page (text exposition format)")
    return out


def _library(lines: list[bytes], names: frozenset[str]) -> list[Sample]:
    """The lines the fast pattern did not take, read by prometheus-client; a line it rejects is dropped."""
    out: list[Sample] = []
    for line in lines:
        try:
            families = list(text_string_to_metric_families(line.decode(errors="replace") + "\n"))
        except (ValueError, IndexError, TypeError):
            continue
        for family in families:
            for sample in family.samples:
                if sample.name in names:
                    value = float(sample.value)
                    labels = {str(k): str(v)[:MAX_LABEL] for k, v in sample.labels.items()}
                    out.append((sample.name, labels, value if math.isfinite(value) else math.nan))
    return out
