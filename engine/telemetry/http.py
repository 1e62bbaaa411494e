"""HTTP GET for untrusted endpoints (exporters, Prometheus): http and https only, a deadline on the whole
answer (not only on each socket read), a cap on its size, and every failure as one short reason."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from ..config import units

MAX_BYTES = 64 << 20
READ = 1 << 16


# Only http(s): no file://, and a redirect to ftp:// or file:// fails as an unknown scheme.
_OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                 urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPRedirectHandler(),
                 urllib.request.HTTPErrorProcessor()):
    _OPENER.add_handler(_handler)


class FetchError(Exception):
    """Why a GET failed, in a few words
    ('connection refused', 'HTTP 404 Not Found', 'no answer within 3 s')."""


def check_url(url: str) -> str:
    """The URL if it is http(s)://host[:port]/...; ValueError with the reason otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url[:200]!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{url[:200]!r} names no host")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError(f"{url[:200]!r} has a bad port") from None
    return url


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
        if isinstance(exc, str):
            return exc
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)[:120] or type(exc).__name__


def get(url: str, timeout: float, limit: int = MAX_BYTES, accept: str = "*/*") -> bytes:
    """The body of a GET, within `timeout` seconds in all and at most `limit` bytes; FetchError otherwise."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "clustertop"})
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            chunks: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    raise FetchError(f"no complete answer within {units.seconds(timeout)}")
                chunk = answer.read(READ)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > limit:
                    raise FetchError(f"answer over {limit >> 20} MB")
                chunks.append(chunk)
    except FetchError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise FetchError(_reason(exc)) from None
