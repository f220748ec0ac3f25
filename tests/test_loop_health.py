"""The decision loop's supervisor (responder.supervisor): failures are retried and reported, never fatal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from responder import supervisor
from responder.clock import FakeClock
from responder.supervisor import LoopHealth, retry
from tests.conftest import Responder


def test_a_failing_step_is_retried_until_it_succeeds_and_health_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "BACKOFF_S", 0.001)
    clock, registry = FakeClock(), CollectorRegistry()
    health = LoopHealth(clock, registry, stall_after_s=10)
    outcomes: list[Exception | None] = [OSError("disk full"), RuntimeError("database is locked"), None]
    seen: list[tuple[int, str]] = []

    async def step() -> str:
        seen.append((health.failures, health.last_error))
        outcome = outcomes.pop(0)
        if outcome is not None:
            clock.advance(6)
            raise outcome
        return "done"

    assert asyncio.run(retry(health, "a pass", step)) == "done"
    assert seen == [(0, ""), (1, "OSError: disk full"), (2, "RuntimeError: database is locked")]
    assert health.failures == 0
    assert registry.get_sample_value("trainguard_responder_loop_errors_total") == 2
    assert registry.get_sample_value("trainguard_responder_loop_last_success_timestamp_seconds") == clock.now()


def test_stalled_only_after_stall_after_s_without_a_good_pass() -> None:
    clock = FakeClock()
    health = LoopHealth(clock, CollectorRegistry(), stall_after_s=10)
    clock.advance(9)
    assert health.stalled_for() == 0
    clock.advance(2)
    assert health.stalled_for() == 11
    health.succeeded()
    assert health.stalled_for() == 0


def test_cancellation_gets_through(monkeypatch: pytest.MonkeyPatch) -> None:
    health = LoopHealth(FakeClock(), CollectorRegistry())

    async def step() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(retry(health, "a pass", step))


def test_healthz_follows_wall_time_not_the_injected_clock(make_responder: Callable[..., Responder]) -> None:
    clock = FakeClock()
    r = make_responder(clock=clock, loop_stall_after_s=5)
    clock.advance(30 * 86400)  # a test (or a replay) moving its clock is no stall of the loop
    assert r.client.get("/healthz").status_code == 200
