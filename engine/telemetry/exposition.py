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
# A page of the text format, whole: lines blank, comments or samples (`name[{labels}] value ...`), in one pass
# of the C matcher, and no control character but tab, CR and LF (deleted by translate: a page that loses
# none has none). Both together cost a fifth of the parse; _NOT_SAMPLE only says which line is wrong.
_GOOD_LINE = (rb"[ \t]*(?:#.*|[a-zA-Z_:][a-zA-Z0-9_:]*[ \t]*(?:\{.*\})?[ \t]+"
              rb"[-+]?(?:[0-9.]|[Ii]nf|[Nn]a[Nn]).*)?")
_PAGE = re.compile(rb"(?:" + _GOOD_LINE + rb"\n)*" + _GOOD_LINE)
_NOT_SAMPLE = re.compile(rb"^(?!" + _GOOD_LINE + rb"$)", re.MULTILINE)
CONTROL = bytes([*range(9), 11, 12, *range(14, 32), 127])
MAX_LABEL = 256

Sample = tuple[str, dict[str, str], float]


class PageError(ValueError):
    """The page is not the text exposition format (an HTML page, a JSON answer, garbage)."""


def check(page: bytes) -> None:
    """PageError unless the whole page is text of the exposition format: UTF-8 with no control characters,
    every line blank, a comment or a sample. A page with one bad line is rejected whole, as Prometheus fails
    such a scrape: a line of garbage can be the sign of a page that is not what it seems."""
    if len(page.translate(None, CONTROL)) != len(page):
        raise PageError("answered binary data (control bytes); expected a Prometheus metrics page "
                        "(text exposition format)")
    if _PAGE.fullmatch(page) is None:
        head = page.lstrip()[:1]
        if head == b"<" or head in (b"{", b"["):
            raise PageError(f"answered {'HTML' if head == b'<' else 'JSON'}; expected a Prometheus metrics "
                            "page (text exposition format)")
        bad = _NOT_SAMPLE.search(page)
        line = page.count(b"\n", 0, bad.start()) + 1 if bad is not None else 0
        raise PageError(f"answered a page whose line {line:,} is not a metric sample, a comment or blank; "
                        "expected a Prometheus metrics page (text exposition format)")
    try:
        page.decode("utf-8")
    except UnicodeDecodeError:
        raise PageError("answered bytes that are not UTF-8 text; expected a Prometheus metrics page "
                        "(text exposition format)") from None


def parse(page: bytes, wanted: Iterable[str]) -> list[Sample]:
    """(metric, labels, value) of every sample of the `wanted` metrics (NaN and infinities as NaN). PageError
    when the page is not the text format (check) or has no metric line at all."""
    check(page)
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
