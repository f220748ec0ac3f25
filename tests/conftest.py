"""Shared fixtures: a responder app on a temporary store, driven through its HTTP API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from responder.app import create_app
from responder.clock import Clock, FakeClock, SystemClock
from responder.engine import Engine
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from tests.fake_k8s import FakeKube, FakeServer, serve
from tests.services import LOOPBACK, wait_until


@dataclass
class Responder:
    client: TestClient
    store: SqliteStore
    scheduler: RecordingScheduler
    registry: CollectorRegistry
    engine: Engine
    clock: Clock

    def post(self, payload: dict[str, Any], **kwargs: Any) -> Any:
        return self.client.post("/v1/alerts", json=payload, **kwargs)

    def decisions(self, **params: str) -> list[dict[str, Any]]:
        response = self.client.get("/v1/decisions", params=params)
        assert response.status_code == 200, response.text
        records: list[dict[str, Any]] = response.json()["decisions"]
        return [r for r in records if r["kind"] == "decision"]

    def wait_decisions(self, count: int = 1, timeout: float = 10.0, **params: str) -> list[dict[str, Any]]:
        wait_until(lambda: len(self.decisions(**params)) >= count, timeout, what=f"{count} decision(s)")
        return self.decisions(**params)

    def decide_now(self) -> list[dict[str, Any]]:
        """On a ``FakeClock``: move past the correlation window and decide what is due; the decisions.

        No sleeping and no waiting: what the engine would decide is decided here, so a test can also
        assert that nothing (more) was decided.
        """
        assert isinstance(self.clock, FakeClock), "decide_now needs make_responder(clock=FakeClock())"
        self.clock.advance(self.engine.settings.correlation_window_s + 1)
        self.engine.decide_due()
        return self.decisions()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value


@pytest.fixture
def make_responder(tmp_path: Path) -> Iterator[Callable[..., Responder]]:
    """Build responders on a temp store; ``settings`` keywords override Settings fields."""
    opened: list[tuple[TestClient, SqliteStore]] = []

    def build(scheduler: RecordingScheduler | None = None, clock: Clock | None = None, **settings: Any) -> Responder:
        values: dict[str, Any] = {"correlation_window_s": 0.2, "db_path": tmp_path / "trainguard.db"}
        values.update(settings)
        config = Settings(**values)
        store = SqliteStore(config.db_path, config.store_busy_timeout_s)
        sched = scheduler or RecordingScheduler(outcome="done")
        registry = CollectorRegistry()
        app = create_app(config, store, sched, clock or SystemClock(), registry=registry)
        client = TestClient(app, client=LOOPBACK, base_url="http://127.0.0.1")
        client.__enter__()
        opened.append((client, store))
        svc = app.state.services
        return Responder(client, store, sched, registry, svc.engine, svc.clock)

    yield build
    for client, store in opened:
        client.__exit__(None, None, None)
        store.close()


@pytest.fixture
def responder(make_responder: Callable[..., Responder]) -> Responder:
    return make_responder()


@pytest.fixture
def server(kube: FakeKube) -> Iterator[FakeServer]:
    """The fake Kubernetes API server (``tests/fake_k8s.py``) serving the test module's ``kube`` fixture."""
    yield from serve(kube)
