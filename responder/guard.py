"""Requests refused before any endpoint runs: a foreign ``Host``, a cross-site write, a non-JSON body
where JSON is expected, and (when configured) a read without a token.

* DNS rebinding: a page of ``evil.example`` whose name is re-pointed at 127.0.0.1 reaches the
  responder as a same-origin page, with ``Host: evil.example``. Only IP literals, ``localhost`` and the
  names in ``allowed_hosts`` are served (a rebinding attack needs a name, never an IP literal).
* Cross-site writes: a browser marks them with ``Sec-Fetch-Site: cross-site``/``same-site`` and an
  ``Origin`` of another host; a state-changing request carrying either is refused. Alertmanager and
  curl send neither.
* JSON endpoints require ``Content-Type: application/json``: a cross-site "simple" request (a
  ``text/plain`` form post) cannot set it without a CORS preflight, which is never granted. A write with
  no body at all (``curl -X POST .../approve``) needs none; a browser sending one cross-site still
  carries ``Origin`` and is refused above.
* ``read_token``: when set, the audit API and the console need it (or the operator token) as
  ``Authorization: Bearer`` or as the password of HTTP Basic (what a browser prompts for).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from responder.auth import bearer_matches

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_WRITES = ("/v1/",)  # every write under /v1/ takes a JSON body; the console's forms are under /console
READS = ("/v1/", "/console")  # reads that need the read token when one is set
OPEN = frozenset({"/healthz", "/readyz", "/metrics", "/v1/alerts"})


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """Whether ``host`` (a Host header, port optional) is an IP literal, localhost or an allowed name."""
    name = urlsplit(f"//{host}").hostname or ""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return True
    if name == "localhost":
        return True
    for allowed_name in (a.lower() for a in allowed):
        if name == allowed_name or (allowed_name.startswith("*.") and name.endswith(allowed_name[1:])):
            return True
    return False


def presented_token(authorization: str) -> str | None:
    """The token of ``Bearer <token>`` or the password of ``Basic``; None if neither."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


class Guard:
    """ASGI middleware: the checks above, answered as JSON errors in the API's shape."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str], read_tokens: Sequence[str]) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.read_tokens = tuple(read_tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail, extra = refusal
        body = json.dumps({"error": _REASONS[status], "detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        host = headers.get("host", "")
        if not host_allowed(host, self.allowed_hosts):
            return 421, f"host {host[:100]!r} is not served here (allowed_hosts)", []
        if method in WRITES:
            site = headers.get("sec-fetch-site")
            if site is not None and site not in ("same-origin", "none"):
                return 403, f"cross-site request refused (Sec-Fetch-Site: {site[:40]})", []
            origin = headers.get("origin")
            if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
                return 403, f"request from another origin refused (Origin: {origin[:100]})", []
            media = headers.get("content-type", "").partition(";")[0].strip().lower()
            bodiless = not media and headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers
            if path.startswith(JSON_WRITES) and media != "application/json" and not bodiless:
                return 415, "this endpoint takes Content-Type: application/json", []
        if self.read_tokens and method in ("GET", "HEAD") and path.startswith(READS) and path not in OPEN:
            given = presented_token(headers.get("authorization", ""))
            if given is None or not any(bearer_matches(given, token) for token in self.read_tokens):
                challenge = [(b"www-authenticate", b'Basic realm="trainguard", charset="UTF-8"')]
                return 401, "reading the audit trail needs the read token (read_token)", challenge
        return None


_REASONS = {401: "unauthorized", 403: "forbidden", 415: "unsupported media type", 421: "misdirected request"}
