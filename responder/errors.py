"""The few exceptions the responder raises on purpose; mapped to HTTP status only in ``app``."""

from __future__ import annotations

from typing import Any


class ResponderError(Exception):
    """An error with its HTTP status and the short ``error`` text; a subclass names both in its bases."""

    status_code = 500
    error = "internal error"

    def __init_subclass__(cls, status_code: int | None = None, error: str | None = None) -> None:
        super().__init_subclass__()
        if status_code is not None:  # a subclass may also set the attributes in its body
            cls.status_code = status_code
        if error is not None:
            cls.error = error

    def __init__(self, detail: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ResponderError, status_code=400, error="bad request"): ...


class Unauthorized(ResponderError, status_code=401, error="unauthorized"): ...


class Forbidden(ResponderError, status_code=403, error="forbidden"): ...


class NotFound(ResponderError, status_code=404, error="not found"): ...


class PayloadTooLarge(ResponderError, status_code=413, error="payload too large"): ...


class StoreUnavailable(
    ResponderError, status_code=503, error="could not store the notification; Alertmanager will retry"
): ...


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key and the value."""


class Conflict(ResponderError, status_code=409, error="conflict"): ...
