"""The decision loop's supervisor (responder.supervisor): failures are retried and reported, never fatal."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from responder import supervisor
from responder.clock import FakeClock, parse_rfc3339
from responder.supervisor import LoopHealth, retry
from tests.conftest import Responder
from tests.services import wait_until

ROOT = Path(__file__).resolve().parents[1]


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


LOOP_KEYS = {"last_success", "consecutive_failures", "last_error", "stalled_for_s"}


def test_health_bodies_are_as_docs_interfaces_md_says(make_responder: Callable[..., Responder]) -> None:
    r = make_responder()
    svc = r.client.app.state.services  # type: ignore[attr-defined]
    wait_until(lambda: r.engine.health.last_success is not None, 10, what="a first good pass")
    ok = r.client.get("/healthz")
    assert (ok.status_code, set(ok.json()), ok.json()["status"]) == (200, {"status", "loop"}, "ok")
    loop = ok.json()["loop"]
    assert set(loop) == LOOP_KEYS
    assert isinstance(loop["last_success"], float)  # Unix time
    assert (loop["consecutive_failures"], loop["last_error"], loop["stalled_for_s"]) == (0, None, 0.0)
    ready = r.client.get("/readyz")
    assert (ready.status_code, set(ready.json()), ready.json()["status"]) == (200, {"status", "time"}, "ready")
    assert parse_rfc3339(ready.json()["time"]) == pytest.approx(time.time(), abs=60)

    r.engine.health.stall_after_s = 0.0  # no good pass "for longer than 0 s": stalled, as after a long fault
    stalled = r.client.get("/healthz")
    assert (stalled.status_code, stalled.json()["status"]) == (503, "decision loop stalled")
    assert set(stalled.json()["loop"]) == LOOP_KEYS
    assert stalled.json()["loop"]["stalled_for_s"] > 0

    async def end_the_loop() -> None:
        svc.loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await svc.loop_task

    r.client.portal.call(end_the_loop)  # type: ignore[union-attr]
    ended = r.client.get("/healthz")
    assert (ended.status_code, set(ended.json()), ended.json()["status"]) == (
        503,
        {"status", "loop"},
        "decision loop ended",
    )
    gone = r.client.get("/readyz")
    assert (gone.status_code, gone.json()) == (503, {"status": "not ready", "detail": "decision loop not running"})

    documented = (ROOT / "docs" / "interfaces.md").read_text()
    for text in ('"decision loop stalled"', '"decision loop ended"', '"not ready"', '"decision loop not running"',
                 *(f'"{key}"' for key in LOOP_KEYS)):  # fmt: skip
        assert text in documented, f"docs/interfaces.md does not show {text}"
