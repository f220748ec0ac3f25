"""The decision loop's supervisor: every pass is retried with backoff, and the loop reports its health.

A storage fault (a full disk, an immutable file, another process holding the write lock) used to end
the decision loop for good while the webhook kept answering 200. Here no exception ends the loop: a
failed pass is logged, counted and retried after a growing pause (``BACKOFF_S`` doubling up to
``MAX_BACKOFF_S``), and the time of the last good pass is exported, so ``/healthz``, the metric
``trainguard_responder_loop_last_success_timestamp_seconds`` and the alert ``TrainguardResponderStalled``
all see a stall. The webhook never waits on the loop: they share only the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from responder.clock import Clock

log = logging.getLogger(__name__)

BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# A healthy loop finishes a pass at least every second (it wakes at least once a second).
STALL_AFTER_S = 60.0

_T = TypeVar("_T")


class LoopHealth:
    """When the decision loop last completed a pass, and how it has failed since."""

    def __init__(self, clock: Clock, registry: CollectorRegistry, stall_after_s: float = STALL_AFTER_S) -> None:
        self.clock = clock
        self.stall_after_s = stall_after_s
        self.started_at = clock.now()
        self.last_success: float | None = None
        self.failures = 0
        self.last_error = ""
        self._last_success = Gauge(
            "trainguard_responder_loop_last_success_timestamp_seconds",
            "When the decision loop last completed a pass (Unix time); stalls when storage keeps failing",
            registry=registry,
        )
        self._errors = Counter(
            "trainguard_responder_loop_errors_total",
            "Decision-loop passes that failed and were retried after a backoff",
            registry=registry,
        )
        self._last_success.set(self.started_at)

    def succeeded(self) -> None:
        self.last_success = self.clock.now()
        self.failures = 0
        self.last_error = ""
        self._last_success.set(self.last_success)

    def failed(self, exc: BaseException) -> float:
        """Record a failed pass; returns the pause before the next try."""
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        self._errors.inc()
        return min(MAX_BACKOFF_S, BACKOFF_S * float(2 ** min(self.failures - 1, 16)))

    def stalled_for(self) -> float:
        """Seconds since the last good pass (or the start), if that is longer than ``stall_after_s``; else 0."""
        since = self.clock.now() - (self.last_success if self.last_success is not None else self.started_at)
        return since if since > self.stall_after_s else 0.0

    def status(self) -> dict[str, object]:
        return {
            "last_success": self.last_success,
            "consecutive_failures": self.failures,
            "last_error": self.last_error or None,
            "stalled_for_s": round(self.stalled_for(), 3),
        }


async def retry(health: LoopHealth, what: str, step: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``step`` until it succeeds, pausing after each failure; only cancellation gets through."""
    while True:
        try:
            result = await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            pause = health.failed(exc)
            log.exception("decision loop: %s failed (%d in a row); retrying in %.1fs", what, health.failures, pause)
            await asyncio.sleep(pause)
            continue
        health.succeeded()
        return result
