"""Who may call what, and how much they may send: plain functions the API and the console share.

* ``require_bearer``: the webhook's and the operator's ``Authorization: Bearer <token>`` check, in
  constant time;
* ``operator_identity``: an operation that changes state (a mode switch, a review) needs the operator
  token when one is configured, and otherwise comes from a loopback client only;
* ``read_capped``: a request body read up to a limit, refusing early on a declared size above it.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress

from starlette.requests import Request

from responder.errors import BadRequest, Forbidden, PayloadTooLarge, Unauthorized


def bearer_matches(presented: str, token: str) -> bool:
    """Whether ``presented`` is the token, compared in constant time."""
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def require_bearer(request: Request, token: str | None, what: str) -> None:
    """Raise ``Unauthorized`` unless the request carries ``token`` as a bearer token (no token: open)."""
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not bearer_matches(given, token):
        raise Unauthorized(f"{what} needs 'Authorization: Bearer <token>'")


def operator_identity(request: Request, token: str | None, presented: str | None = None) -> str:
    """Who is operating, for the audit trail; raises ``Unauthorized`` or ``Forbidden``.

    ``presented`` is a token given some other way than the ``Authorization`` header (the console's
    form field); without it the header is checked.
    """
    if token is not None:
        if presented is None:
            require_bearer(request, token, "this operation")
        elif not bearer_matches(presented, token):
            raise Unauthorized("this operation needs the operator token")
        return "operator token"
    client = request.client.host if request.client else ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(client).is_loopback:
            return f"loopback client {client}"
    raise Forbidden("no operator token is configured: mode changes and reviews are accepted from loopback only")


async def read_capped(request: Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes; ``PayloadTooLarge`` beyond, declared or streamed.

    A declared size over the limit is refused before any of the body is read; a body without one
    (chunked) is read up to the limit and refused there. Nothing of it is stored either way.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("invalid Content-Length")
        if int(declared) > limit:
            raise PayloadTooLarge(_too_large(f"body of {int(declared)} bytes", limit))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(_too_large("body (sent without Content-Length)", limit))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(what: str, limit: int) -> str:
    return f"{what} exceeds max_body_bytes ({limit} bytes); nothing of it was stored"
