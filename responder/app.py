"""``create_app``: the responder as an ASGI app, built from the dependencies passed in.

It builds the engine and the one ``Services`` object the endpoints read (``responder/api.py`` for the
JSON API, ``responder/console.py`` for the HTML console), and runs the decision loop for the app's
lifetime. Nothing global: every dependency is an argument, so a test swaps one boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from responder import (
    api,
    api_goodput,
    api_node_groups,
    approval_api,
    console,
    console_approval,
    console_goodput,
    console_replay,
)
from responder.alertmanager import AlertmanagerClient
from responder.attribution import Enricher
from responder.clock import Clock
from responder.engine import Engine, precreate_failed
from responder.enrichment import PrometheusEnricher
from responder.errors import ResponderError
from responder.guard import Guard
from responder.housekeeping import retention_loop
from responder.lease import FencedScheduler, Leadership, Lease, lead
from responder.loki import LokiMirror
from responder.metrics import ResponderMetrics
from responder.model import Mode
from responder.operator_signals import OperatorSignals
from responder.schedulers.base import Scheduler
from responder.services import Services
from responder.settings import Settings
from responder.store import AuditStore


def create_app(
    settings: Settings,
    store: AuditStore,
    scheduler: Scheduler,
    clock: Clock,
    registry: CollectorRegistry | None = None,
    enricher: Enricher | None = None,
    lease: Lease | None = None,
) -> Starlette:
    """The responder as an ASGI app. Nothing global: every dependency is an argument.

    With a ``lease`` (a store shared by replicas) the decision loop runs only while this replica holds it.
    """
    registry = registry or CollectorRegistry()
    metrics = ResponderMetrics(registry)
    if lease is not None:
        scheduler = FencedScheduler(scheduler, lease)
    if enricher is None and settings.prometheus_url:
        enricher = PrometheusEnricher(settings.prometheus_url, settings.prometheus_timeout_s)
    engine = Engine(settings, store, scheduler, clock, metrics, enricher)
    svc = Services(
        settings, store, engine, clock, metrics, registry, settings.webhook_secret(), settings.operator_secret()
    )
    if lease is not None:
        svc.leadership = Leadership(lease, clock, registry)
    if settings.loki is not None:
        spool = settings.db_path.with_name(settings.db_path.name + ".loki-spool")
        svc.mirror = LokiMirror(settings.loki, spool, registry)
        engine.sinks.append(svc.mirror.submit)
    signals = None
    if settings.alertmanager is not None:
        signals = OperatorSignals(settings, store, clock, AlertmanagerClient(settings.alertmanager))
        engine.sinks.append(signals.submit)
    for cluster, mode in store.modes().items():
        metrics.mode.labels(cluster).set(1 if mode == Mode.ACT else 0)
    for cluster in set(settings.clusters) | set(store.modes()):
        precreate_failed(metrics, cluster)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if signals is not None:
            signals.start()
        try:
            async with _running(svc):
                yield
        finally:
            if signals is not None:
                await run_in_threadpool(signals.stop)

    app = Starlette(
        routes=[
            *api.ROUTES,
            *approval_api.ROUTES,
            *api_node_groups.ROUTES,
            *api_goodput.ROUTES,
            *console_approval.ROUTES,
            *console.ROUTES,
            *console_goodput.ROUTES,
            *console_replay.ROUTES,
        ],
        lifespan=lifespan,
        exception_handlers={ResponderError: api.responder_error, HTTPException: api.http_error},  # type: ignore[dict-item]
    )
    read_tokens = [t for t in (settings.read_secret(), svc.operator_token) if t] if settings.read_secret() else []
    app.add_middleware(Guard, allowed_hosts=settings.allowed_hosts, read_tokens=read_tokens)
    app.state.services = svc
    app.state.signals = signals
    return app


@contextlib.asynccontextmanager
async def _running(svc: Services) -> AsyncIterator[None]:
    """The decision loop (and the Loki mirror) for the app's lifetime; in-flight actions finish at exit."""
    if svc.mirror is not None:
        await run_in_threadpool(svc.mirror.start)
    engine, leadership = svc.engine, svc.leadership
    run = engine.run if leadership is None else partial(lead, leadership, engine.health, engine.run, engine.submit)
    svc.loop_task = asyncio.create_task(run(), name="trainguard-decisions")
    pruning = asyncio.create_task(retention_loop(svc), name="trainguard-retention")
    try:
        yield
    finally:
        pruning.cancel()
        svc.loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await svc.loop_task
        await svc.engine.drain()
        svc.engine.enricher.close()
        if svc.mirror is not None:
            await run_in_threadpool(svc.mirror.stop)
