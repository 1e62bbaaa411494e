"""HTTP GET for untrusted endpoints (exporters, Prometheus): http and https only, a deadline on the whole
answer enforced while reading, a cap on its size, cancellation, and every failure as one short reason.

A socket timeout alone bounds each read, not the answer: a server that trickles a byte every half second
never trips it. So every request is registered with a watchdog thread that shuts its socket down at the
request's deadline (a blocked read returns at once, whatever phase it is in: headers, chunks, TLS), and
`cancel()` shuts down every request in flight and refuses new ones (a watcher told to stop ends within
milliseconds, whatever the network does).
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import orjson

from ..config import units

MAX_BYTES = 64 << 20
READ = 1 << 16
ERROR_BODY = 4096          # bytes of an HTTP error's body read for the server's own message


class FetchError(Exception):
    """Why a GET failed, in a few words
    ('connection refused', 'HTTP 404 Not Found', 'no complete answer within 3 s')."""


class _Call:
    """One request in flight: its deadline and the sockets it opened (redirects open more)."""

    __slots__ = ("deadline", "done", "expired", "socks")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.socks: list[socket.socket] = []
        self.expired = False
        self.done = False

    def shut(self) -> None:
        for sock in self.socks:
            try:            # the plain socket's shutdown, also under TLS: the fd ends, the read returns
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _Watchdog:
    """Shuts down the sockets of requests past their deadline (a heap of deadlines, one daemon thread)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.heap: list[tuple[float, int, _Call]] = []
        self.active: set[_Call] = set()
        self.count = itertools.count()
        self.thread: threading.Thread | None = None
        self.cancelled = False

    def begin(self, deadline: float) -> _Call:
        call = _Call(deadline)
        with self.cond:
            if self.cancelled:
                raise FetchError("cancelled")
            self.active.add(call)
            first = not self.heap or deadline < self.heap[0][0]
            heapq.heappush(self.heap, (deadline, next(self.count), call))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self.thread.start()
            elif first:
                self.cond.notify()
        return call

    def attach(self, call: _Call, sock: socket.socket) -> None:
        with self.cond:
            call.socks.append(sock)
            if call.expired:
                call.shut()

    def end(self, call: _Call) -> None:
        with self.cond:
            call.done = True
            self.active.discard(call)

    def cancel(self) -> None:
        """End every request in flight now, and refuse new ones."""
        with self.cond:
            self.cancelled = True
            for call in self.active:
                call.expired = True
                call.shut()

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                while self.heap and (self.heap[0][2].done or self.heap[0][0] <= now):
                    _, _, call = heapq.heappop(self.heap)
                    if not call.done:
                        call.expired = True
                        call.shut()
                self.cond.wait(self.heap[0][0] - now if self.heap else None)


_WATCHDOG = _Watchdog()
_LOCAL = threading.local()


def cancel() -> None:
    """End every request in flight at once and refuse new ones (the watcher is stopping)."""
    _WATCHDOG.cancel()


def _attach(sock: Any) -> None:
    call = getattr(_LOCAL, "call", None)
    if call is not None and sock is not None:
        _WATCHDOG.attach(call, sock)


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _attach(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _attach(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: Any) -> Any:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: Any) -> Any:
        return self.do_open(_HTTPSConnection, req, context=getattr(self, "_context", None))


# Only http(s): no file://, and a redirect to ftp:// or file:// fails as an unknown scheme.
_OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler(), _HTTPHandler(), _HTTPSHandler(),
                 urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPRedirectHandler(),
                 urllib.request.HTTPErrorProcessor()):
    _OPENER.add_handler(_handler)


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


def _server_message(exc: urllib.error.HTTPError) -> str:
    """Prometheus's own error text of an HTTP error's JSON body ({"error": ...}), or ''."""
    try:
        body = exc.read(ERROR_BODY)
        doc = orjson.loads(body)
    except (OSError, http.client.HTTPException, orjson.JSONDecodeError, ValueError):
        return ""
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return " ".join(doc["error"].split())[:200]
    return ""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        message = _server_message(exc)
        return f"HTTP {exc.code} {exc.reason}" + (f" ({message})" if message else "")
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


def get(url: str, timeout: float, limit: int = MAX_BYTES, accept: str = "*/*",
        deadline: float | None = None) -> bytes:
    """The body of a GET within `timeout` seconds in all (and by the monotonic `deadline` when given: a
    round's) and at most `limit` bytes; FetchError otherwise."""
    now = time.monotonic()
    end = now + timeout if deadline is None else min(now + timeout, deadline)
    budget = end - now
    if budget <= 0:
        raise FetchError("not asked: the round's deadline had passed")
    call = _WATCHDOG.begin(end)
    _LOCAL.call = call
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "clustertop"})
    late = FetchError(f"no complete answer within {units.seconds(timeout)}")
    try:
        with _OPENER.open(request, timeout=budget) as answer:
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = answer.read(READ)
                if call.expired or time.monotonic() > end:
                    raise late
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > limit:
                    raise FetchError(f"answer over {limit >> 20} MB")
                chunks.append(chunk)
    except FetchError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if call.expired or isinstance(exc, (TimeoutError, socket.timeout)):
            raise (FetchError("cancelled") if _WATCHDOG.cancelled else late) from None
        raise FetchError(_reason(exc)) from None
    finally:
        _LOCAL.call = None
        _WATCHDOG.end(call)
