"""Helpers for tests that run real services (Prometheus, Alertmanager, Slurm, ...).

Where a service's binary is missing, a test skips and says which package brings it; CI sets
``TRAINGUARD_REQUIRE_SERVICES=1`` so that a missing install step fails loudly instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "munged": "munge",
    "chromium": "chromium",
}


def require_binary(name: str) -> str:
    """The path of ``name``, or skip (fail under TRAINGUARD_REQUIRE_SERVICES=1) naming its package."""
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )
    if path:
        return path
    message = f"{name} not found: apt-get install {PACKAGES.get(name, name)}"
    if os.environ.get("TRAINGUARD_REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require_root(reason: str) -> None:
    if os.geteuid() != 0:
        if os.environ.get("TRAINGUARD_REQUIRE_SERVICES") == "1":
            pytest.fail(f"must run as root: {reason}")
        pytest.skip(f"needs root: {reason}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def poll(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    error: type[Exception] = TimeoutError,
) -> T:
    """Call ``predicate`` until it returns something truthy; ``error`` naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "") -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test with ``what`` on timeout."""
    try:
        return poll(predicate, timeout, what or str(predicate), interval)
    except TimeoutError as exc:
        pytest.fail(str(exc))


# The address TestClient presents as the client: a loopback one, as a local operator's would be
# (without it, starlette's TestClient says "testclient", which is no address at all).
LOOPBACK = ("127.0.0.1", 50000)
