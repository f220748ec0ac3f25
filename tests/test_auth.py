"""``responder.auth``: the bearer check, the operator rule and the capped body reader, as plain functions."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from responder.auth import operator_identity, read_capped, require_bearer
from responder.errors import BadRequest, Forbidden, PayloadTooLarge, Unauthorized


def request(headers: dict[str, str] | None = None, client: str = "127.0.0.1", body: bytes = b"") -> Request:
    chunks = [body]

    async def receive() -> dict[str, object]:
        data = chunks.pop() if chunks else b""
        return {"type": "http.request", "body": data, "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": (client, 50000),
    }
    return Request(scope, receive)


def test_no_token_configured_means_open() -> None:
    require_bearer(request(), None, "the webhook")


@pytest.mark.parametrize("header", ["", "Bearer wrong", "Basic s3cret", "s3cret"])
def test_a_missing_or_wrong_bearer_token_is_unauthorized(header: str) -> None:
    with pytest.raises(Unauthorized, match="the webhook needs"):
        require_bearer(request({"Authorization": header}), "s3cret", "the webhook")


def test_the_right_bearer_token_passes() -> None:
    require_bearer(request({"Authorization": "bearer s3cret"}), "s3cret", "the webhook")


def test_without_an_operator_token_only_loopback_may_operate() -> None:
    assert operator_identity(request(client="127.0.0.1"), None) == "loopback client 127.0.0.1"
    assert operator_identity(request(client="::1"), None) == "loopback client ::1"
    with pytest.raises(Forbidden):
        operator_identity(request(client="10.0.0.7"), None)
    with pytest.raises(Forbidden):
        operator_identity(request(client="testclient"), None)  # not an address: no special case


def test_with_an_operator_token_the_header_or_a_presented_token_must_match() -> None:
    assert operator_identity(request({"Authorization": "Bearer op"}, client="10.0.0.7"), "op") == "operator token"
    assert operator_identity(request(client="10.0.0.7"), "op", presented="op") == "operator token"
    with pytest.raises(Unauthorized):
        operator_identity(request(client="127.0.0.1"), "op")  # loopback does not replace a configured token
    with pytest.raises(Unauthorized):
        operator_identity(request({"Authorization": "Bearer op"}), "op", presented="")  # the form's token counts


def test_read_capped_refuses_a_declared_or_streamed_body_over_the_limit() -> None:
    assert asyncio.run(read_capped(request(body=b"x" * 10), 10)) == b"x" * 10
    with pytest.raises(PayloadTooLarge):
        asyncio.run(read_capped(request({"Content-Length": "11"}, body=b"x" * 11), 10))
    with pytest.raises(PayloadTooLarge):
        asyncio.run(read_capped(request(body=b"x" * 11), 10))
    with pytest.raises(BadRequest):
        asyncio.run(read_capped(request({"Content-Length": "ten"}), 10))
