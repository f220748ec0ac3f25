"""The responder's HTTP API (CONTRACT §4), built by ``create_app`` from the dependencies passed in.

Alertmanager retries 5xx and transport errors, not 4xx: so the webhook answers 2xx only after the
alerts are stored, 5xx only when storing failed (asking for a resend), and 4xx for requests that
no resend can fix (bad token, bad JSON, too large).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from responder.alerts import Notification
from responder.clock import Clock, parse_rfc3339, rfc3339
from responder.console import console_routes
from responder.engine import Engine
from responder.enrichment import Enricher, PrometheusEnricher
from responder.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ResponderError,
    StoreUnavailable,
    Unauthorized,
)
from responder.loki import LokiMirror
from responder.metrics import ResponderMetrics
from responder.schedulers.base import Scheduler
from responder.settings import Settings
from responder.store import AuditStore, RecordQuery
from trainguard.identity import IdentityError, validate_cluster

log = logging.getLogger(__name__)

MAX_LIMIT = 1000
_Body = TypeVar("_Body", bound=BaseModel)


class ModeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = Field(pattern="^(monitor|act)$")


class ReviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: str = Field(pattern="^(correct|wrong)$")
    note: str = Field("", max_length=2000)


def create_app(
    settings: Settings,
    store: AuditStore,
    scheduler: Scheduler,
    clock: Clock,
    registry: CollectorRegistry | None = None,
    enricher: Enricher | None = None,
) -> Starlette:
    """The responder as an ASGI app. Nothing global: every dependency is an argument."""
    registry = registry or CollectorRegistry()
    metrics = ResponderMetrics(registry)
    if enricher is None and settings.prometheus_url:
        enricher = PrometheusEnricher(settings.prometheus_url, settings.prometheus_timeout_s)
    engine = Engine(settings, store, scheduler, clock, metrics, enricher)
    mirror = None
    if settings.loki is not None:
        mirror = LokiMirror(settings.loki, settings.db_path.with_name(settings.db_path.name + ".loki-spool"), registry)
        engine.sinks.append(mirror.submit)
    webhook_token = settings.webhook_secret()
    operator_token = settings.operator_secret()
    for cluster, mode in store.modes().items():
        metrics.mode.labels(cluster).set(1 if mode == "act" else 0)

    def require_token(request: Request, token: str | None, what: str) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise Unauthorized(f"{what} needs 'Authorization: Bearer <token>'")

    def require_operator(request: Request) -> str:
        if operator_token is not None:
            require_token(request, operator_token, "this operation")
            return "operator token"
        client = request.client.host if request.client else ""
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(client).is_loopback:
                return f"loopback client {client}"
        if client == "testclient":
            return "test client"
        raise Forbidden("no operator token is configured: mode changes and reviews are accepted from loopback only")

    async def read_body(request: Request) -> bytes:
        limit = settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise BadRequest("invalid Content-Length")
            if int(declared) > limit:
                raise PayloadTooLarge(f"body of {declared} bytes exceeds the limit of {limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def post_alerts(request: Request) -> Response:
        try:
            require_token(request, webhook_token, "the webhook")
            body = await read_body(request)
            try:
                payload = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise BadRequest(f"body is not JSON: {exc}") from exc
            try:
                notification = Notification.model_validate(payload)
            except ValidationError as exc:
                raise BadRequest(_validation_detail(exc)) from exc
        except ResponderError as exc:
            metrics.notifications.labels(type(exc).__name__.lower()).inc()
            raise
        try:
            result = await run_in_threadpool(engine.ingest, notification)
        except Exception as exc:
            metrics.notifications.labels("store_error").inc()
            log.exception("could not store a notification of %d alerts", len(notification.alerts))
            raise StoreUnavailable(str(exc)) from exc
        metrics.notifications.labels("stored").inc()
        if result.opened_incidents:
            engine.wake()
        return JSONResponse(
            {
                "status": "stored",
                "alerts": len(notification.alerts),
                "new": result.new,
                "duplicates": result.duplicates,
                "evidence": result.evidence,
                "rejected": result.rejected,
                "ignored": result.ignored,
                "resolved": result.resolved,
                "incidents_opened": list(result.opened_incidents),
            }
        )

    def record_query(request: Request, **fixed: str) -> RecordQuery:
        params = request.query_params
        allowed = {"cluster", "workload", "action", "mode", "since", "limit", "kind", "outcome"}
        unknown = set(params) - allowed
        if unknown:
            raise BadRequest(f"unknown query parameter(s): {', '.join(sorted(unknown))}")
        since = None
        if "since" in params:
            try:
                since = parse_rfc3339(params["since"])
            except ValueError as exc:
                raise BadRequest(f"since: not an RFC 3339 time: {params['since']!r}") from exc
        limit = params.get("limit", "100")
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
            raise BadRequest(f"limit: a number from 1 to {MAX_LIMIT}")
        columns = ("cluster", "workload", "action", "mode", "kind", "outcome")
        values: dict[str, Any] = {k: params.get(k) for k in columns}
        values.update(fixed)
        return RecordQuery(since=since, limit=int(limit), **values)

    async def list_decisions(request: Request) -> Response:
        query = record_query(request)
        records = await run_in_threadpool(store.records, query)
        return JSONResponse({"decisions": [r.to_json() for r in records], "count": len(records)})

    async def get_decision(request: Request) -> Response:
        record_id = request.path_params["id"]
        record = await run_in_threadpool(store.record, record_id)
        if record is None:
            raise NotFound(f"no decision {record_id!r}")
        body = record.to_json()
        body["reviews"] = await run_in_threadpool(store.reviews, record_id)
        if record.incident_id:
            alerts = await run_in_threadpool(store.incident_alerts, record.incident_id)
            body["late_evidence"] = [a.evidence() for a in alerts if a.received_at > record.decided_at]
        return JSONResponse(body)

    async def review_decision(request: Request) -> Response:
        require_operator(request)
        record_id = request.path_params["id"]
        review = _parse(ReviewBody, await read_body(request))
        record = await run_in_threadpool(store.record, record_id)
        if record is None:
            raise NotFound(f"no decision {record_id!r}")
        await run_in_threadpool(store.add_review, record_id, review.verdict, review.note, clock.now())
        precision = await run_in_threadpool(store.precision_by_pattern)
        for pattern, tally in precision.items():
            metrics.review_precision.labels(pattern).set(tally["precision"])
            metrics.reviewed.labels(pattern).set(tally["reviewed"])
        return JSONResponse({"id": record_id, "verdict": review.verdict, "precision": precision})

    async def precision(request: Request) -> Response:
        return JSONResponse({"patterns": await run_in_threadpool(store.precision_by_pattern)})

    async def recommendations(request: Request) -> Response:
        query = record_query(request, mode="monitor", kind="decision", outcome="planned")
        records = [r for r in await run_in_threadpool(store.records, query) if r.action != "none"]
        return JSONResponse({"recommendations": [r.to_json() for r in records], "count": len(records)})

    def cluster_param(request: Request) -> str:
        try:
            return validate_cluster(request.path_params["cluster"])
        except IdentityError as exc:
            raise BadRequest(str(exc)) from exc

    async def get_mode(request: Request) -> Response:
        cluster = cluster_param(request)
        return JSONResponse({"cluster": cluster, "mode": await run_in_threadpool(engine.mode, cluster)})

    async def put_mode(request: Request) -> Response:
        cluster = cluster_param(request)
        who = require_operator(request)
        body = _parse(ModeBody, await read_body(request))
        await run_in_threadpool(engine.set_mode, cluster, body.mode, who)
        return JSONResponse({"cluster": cluster, "mode": body.mode})

    async def list_clusters(request: Request) -> Response:
        names = set(settings.clusters) | set(await run_in_threadpool(store.modes))
        return JSONResponse({"clusters": [{"cluster": c, "mode": engine.mode(c)} for c in sorted(names)]})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            await run_in_threadpool(store.ping)
        except Exception as exc:  # noqa: BLE001 - any store failure means not ready
            return JSONResponse({"status": "not ready", "detail": f"store: {exc}"}, status_code=503)
        if loop_task is None or loop_task.done():
            return JSONResponse({"status": "not ready", "detail": "decision loop not running"}, status_code=503)
        return JSONResponse({"status": "ready", "time": rfc3339(clock.now())})

    async def metrics_endpoint(request: Request) -> Response:
        await run_in_threadpool(engine.refresh_gauges)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    loop_task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal loop_task
        if mirror is not None:
            await run_in_threadpool(mirror.start)
        loop_task = asyncio.create_task(engine.run(), name="trainguard-decisions")
        try:
            yield
        finally:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
            await engine.drain()
            engine.enricher.close()
            if mirror is not None:
                await run_in_threadpool(mirror.stop)

    routes = [
        Route("/v1/alerts", post_alerts, methods=["POST"]),
        Route("/v1/decisions", list_decisions, methods=["GET"]),
        Route("/v1/decisions/{id}", get_decision, methods=["GET"]),
        Route("/v1/decisions/{id}/review", review_decision, methods=["POST"]),
        Route("/v1/review/precision", precision, methods=["GET"]),
        Route("/v1/recommendations", recommendations, methods=["GET"]),
        Route("/v1/clusters", list_clusters, methods=["GET"]),
        Route("/v1/clusters/{cluster}/mode", get_mode, methods=["GET"]),
        Route("/v1/clusters/{cluster}/mode", put_mode, methods=["PUT"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *console_routes(engine, store, settings, require_operator),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={ResponderError: _responder_error, HTTPException: _http_error},  # type: ignore[dict-item]
    )
    app.state.engine = engine
    app.state.metrics = metrics
    return app


def _parse(model: type[_Body], body: bytes) -> _Body:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise BadRequest(_validation_detail(exc)) from exc


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]} for err in exc.errors(include_url=False)[:20]
    ]


async def _responder_error(request: Request, exc: ResponderError) -> Response:
    return JSONResponse({"error": exc.error, "detail": exc.detail}, status_code=exc.status_code)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": exc.detail, "detail": None}, status_code=exc.status_code)
