"""The tests' side of the harness (``trainguard.lab``): what a missing service means to a test.

Where a service or tool is missing, a test skips and says what brings it; CI sets
``TRAINGUARD_REQUIRE_SERVICES=1`` so that a missing install step fails loudly instead. ``unavailable``
is that rule, the one place it is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

import pytest

from trainguard.lab.common import find_binary, free_port, missing_message, poll

__all__ = ["LOOPBACK", "free_port", "require_binary", "require_root", "unavailable", "wait_until"]

# The address TestClient presents as the client: a loopback one, as a local operator's would be
# (without it, starlette's TestClient says "testclient", which is no address at all).
LOOPBACK = ("127.0.0.1", 50000)


def unavailable(message: str) -> NoReturn:
    """Skip the test for want of ``message``'s service; fail instead under TRAINGUARD_REQUIRE_SERVICES=1."""
    if os.environ.get("TRAINGUARD_REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message, allow_module_level=True)


def require_binary(name: str) -> str:
    """The path of ``name``, or ``unavailable`` naming its package."""
    path = find_binary(name)
    if path is None:
        unavailable(missing_message(name))
    return path


def require_root(reason: str) -> None:
    if os.geteuid() != 0:
        unavailable(f"needs root: {reason}")


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "") -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test with ``what`` on timeout."""
    try:
        return poll(predicate, timeout, what or str(predicate), interval)
    except TimeoutError as exc:
        pytest.fail(str(exc))
