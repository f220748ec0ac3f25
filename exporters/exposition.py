"""``/metrics``: prometheus_client's exposition, with what did not change since the last scrape not formatted again.

The pattern counters are one series per (identity, catalog row): hundreds of lines that change only when a
line matches, and formatting them at every scrape was most of the exporter's CPU at rest. A collector with a
``generation`` (bumped at every change) is formatted again only when it changed; the others are collected at
every scrape and formatted again only when their samples differ from the last scrape's (at rest, the
exporter's own counters and the progress gauges mostly do not). A body equal to the last one is not
compressed again.
The body is byte for byte what prometheus_client renders for the same collectors in the same order, in the
format the scraper asks for (text or OpenMetrics, content negotiation and gzip by prometheus_client's own
rules; gzip at level 1, a quarter of the default's CPU for a few hundred bytes more).

The server speaks HTTP/1.1 and keeps the connection open between scrapes, as Prometheus's scraper expects:
a scrape on a kept connection costs no TCP set-up, accept or thread start (about half of a scrape's CPU
on a new connection).
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.registry import Collector, CollectorRegistry

_EOF = b"# EOF\n"  # OpenMetrics ends the whole body with it, once
KEEPALIVE_IDLE_S = 120  # a kept connection idle this long is closed (the scraper reconnects at its next scrape)


class _Fixed:
    """Metrics already collected (one collector's), as the registry an encoder formats."""

    def __init__(self, metrics: list[Any]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        return self.metrics


def _samples(metrics: list[Any]) -> list[tuple[Any, ...]]:
    """What an encoder's output depends on: compared (not hashed) with the last scrape's; a copy of each
    sample list, so a collector that updates its metrics in place cannot make the cached text look current."""
    return [(m.name, m.type, m.documentation, m.unit, tuple(m.samples)) for m in metrics]


class MetricsApp:
    """The WSGI application: GET any path for the metrics (as prometheus_client serves them)."""

    def __init__(self, collectors: Sequence[Collector], registry: CollectorRegistry) -> None:
        """``collectors`` in the registry's order; ``registry`` serves ``?name[]=`` filters (not cached)."""
        self.collectors = list(collectors)
        self.registry = registry
        # (collector, format) -> (its generation, or its samples when it has none; the text formatted from them)
        self._cache: dict[tuple[int, str], tuple[Any, bytes]] = {}
        self._gzip: tuple[bytes, bytes] = (b"", b"")  # (body, its compression): the last one
        self._lock = threading.Lock()

    def render(self, encoder: Callable[[Any], bytes], content_type: str) -> bytes:
        openmetrics = content_type.startswith("application/openmetrics-text")
        parts: list[bytes] = []
        for i, c in enumerate(self.collectors):
            generation = getattr(c, "generation", None)
            metrics = None if generation is not None else list(c.collect())
            key = generation if metrics is None else _samples(metrics)
            with self._lock:
                hit = self._cache.get((i, content_type))
            if hit is not None and hit[0] == key:
                parts.append(hit[1])
                continue
            text = encoder(_Fixed(list(c.collect()) if metrics is None else metrics))
            if openmetrics and text.endswith(_EOF):
                text = text[: -len(_EOF)]
            with self._lock:
                self._cache[(i, content_type)] = (key, text)
            parts.append(text)
        if openmetrics:
            parts.append(_EOF)
        return b"".join(parts)

    def _compress(self, body: bytes) -> bytes:
        """gzip at level 1; the last body's compression again when the body did not change."""
        with self._lock:
            last, packed = self._gzip
        if body == last:
            return packed
        packed = gzip.compress(body, compresslevel=1)
        with self._lock:
            self._gzip = (body, packed)
        return packed

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        headers: list[tuple[str, str]] = [("Allow", "OPTIONS,GET")]
        status, output = "200 OK", b""
        if method == "GET" and environ.get("PATH_INFO") != "/favicon.ico":
            encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
            params = parse_qs(environ.get("QUERY_STRING", ""))
            if "name[]" in params:
                output = encoder(self.registry.restricted_registry(params["name[]"]))
            else:
                output = self.render(encoder, content_type)
            headers = [("Content-Type", content_type)]
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
                output = self._compress(output)
                headers.append(("Content-Encoding", "gzip"))
        elif method == "GET":
            headers = []
        elif method != "OPTIONS":
            status = "405 Method Not Allowed"
            output = f"# HTTP {status}: {method}; use OPTIONS or GET\n".encode()
        start_response(status, headers)
        return [output]  # a list of one: wsgiref sets Content-Length from it, which keep-alive needs


class _Http11(ServerHandler):
    http_version = "1.1"


class _KeepAlive(WSGIRequestHandler):
    """wsgiref's handler, for HTTP/1.1 requests on a kept connection (wsgiref alone answers one and closes)."""

    protocol_version = "HTTP/1.1"
    timeout = KEEPALIVE_IDLE_S  # an idle connection does not hold its thread for ever
    # wsgiref writes the headers and the body in two sends: with Nagle's algorithm on, the body waited for
    # the scraper's delayed ACK of the headers, about 40 ms on every scrape of a kept connection
    disable_nagle_algorithm = True

    def handle(self) -> None:
        self.close_connection = True
        self._one()
        while not self.close_connection:
            self._one()

    def _one(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:  # as wsgiref answers it
            self.requestline, self.request_version, self.command = "", "", ""
            self.send_error(414)
            self.close_connection = True
            return
        if not self.raw_requestline:  # the scraper closed the connection
            self.close_connection = True
            return
        if not self.parse_request():  # it answered the error and set close_connection
            return
        wfile: Any = self.wfile  # a socket writer, as wsgiref passes it (its stubs ask for IO[bytes])
        handler = _Http11(self.rfile, wfile, self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref's back-pointer for logging
        handler.run(self.server.get_app())  # type: ignore[attr-defined]
        if (
            self.command not in ("GET", "OPTIONS")
            or self.headers.get("Content-Length", "0") != "0"
            or ("Transfer-Encoding" in self.headers)
        ):
            self.close_connection = True  # a body nobody read would be taken for the next request

    def log_message(self, format: str, *args: Any) -> None:
        """No access log."""


def serve_metrics(app: MetricsApp, port: int, address: str) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``app`` on a daemon thread, one thread per connection (kept open between scrapes)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(str(sockaddr[0]), port, app, Server, handler_class=_KeepAlive)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return httpd, thread
