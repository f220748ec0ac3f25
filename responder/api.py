"""The responder's JSON API (docs/interfaces.md §4): module-level endpoints over ``Services``.

Alertmanager retries 5xx and transport errors, not 4xx: so the webhook answers 2xx only after the
alerts are stored, 5xx only when storing failed (asking for a resend), and 4xx for requests that
no resend can fix (bad token, bad JSON, too large).
"""

from __future__ import annotations

import json
import logging
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from responder.alerts import Notification, parse_notification
from responder.auth import operator_identity, read_capped, require_bearer
from responder.clock import parse_rfc3339, rfc3339
from responder.errors import BadRequest, NotFound, ResponderError, StoreUnavailable
from responder.guardrails import check_switch, known_cluster
from responder.model import Kind, Mode, Outcome
from responder.services import Services, services
from responder.store import RecordQuery
from trainguard.identity import IdentityError, validate_cluster

log = logging.getLogger(__name__)

MAX_LIMIT = 1000
_Body = TypeVar("_Body", bound=BaseModel)


class ModeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Mode
    create: bool = False  # switch a cluster that is neither configured nor seen (guardrails.check_switch)


class ReviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: str = Field(pattern="^(correct|wrong)$")
    note: str = Field("", max_length=2000)


OFF_LOOP_BYTES = 64 * 1024  # larger bodies are parsed in a worker thread, so /healthz never waits on them


async def _notification(request: Request, svc: Services) -> tuple[Notification, list[dict[str, str]]]:
    require_bearer(request, svc.webhook_token, "the webhook")
    body = await read_capped(request, svc.settings.max_body_bytes)
    if len(body) > OFF_LOOP_BYTES:
        return await run_in_threadpool(_parse_notification, body)
    return _parse_notification(body)


def _parse_notification(body: bytes) -> tuple[Notification, list[dict[str, str]]]:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON (or nested too deep): {str(exc)[:200]}") from exc
    try:
        return parse_notification(payload)
    except ValidationError as exc:
        raise BadRequest(_validation_detail(exc)) from exc


async def post_alerts(request: Request) -> Response:
    svc = services(request)
    try:
        notification, invalid = await _notification(request, svc)
    except ResponderError as exc:
        svc.metrics.notifications.labels(type(exc).__name__.lower()).inc()
        raise
    try:
        result = await run_in_threadpool(svc.engine.ingest, notification)
    except Exception as exc:
        svc.metrics.notifications.labels("store_error").inc()
        log.exception("could not store a notification of %d alerts", len(notification.alerts))
        raise StoreUnavailable(str(exc)) from exc
    svc.metrics.notifications.labels("stored").inc()
    if invalid:
        svc.metrics.alerts.labels("invalid").inc(len(invalid))
        log.warning("left out %d invalid alert(s) of a notification: %s", len(invalid), invalid[:5])
    if result.opened_incidents:
        svc.engine.wake()
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
            "invalid": invalid,
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
    records = await run_in_threadpool(services(request).store.records, query)
    return JSONResponse({"decisions": [r.to_json() for r in records], "count": len(records)})


async def get_decision(request: Request) -> Response:
    store = services(request).store
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
    svc = services(request)
    operator_identity(request, svc.operator_token)
    record_id = request.path_params["id"]
    review = _parse(ReviewBody, await read_capped(request, svc.settings.max_body_bytes))
    record = await run_in_threadpool(svc.store.record, record_id)
    if record is None:
        raise NotFound(f"no decision {record_id!r}")
    await run_in_threadpool(svc.store.add_review, record_id, review.verdict, review.note, svc.clock.now())
    precision = await run_in_threadpool(svc.store.precision_by_pattern)
    for pattern, tally in precision.items():
        svc.metrics.review_precision.labels(pattern).set(tally["precision"])
        svc.metrics.reviewed.labels(pattern).set(tally["reviewed"])
    return JSONResponse({"id": record_id, "verdict": review.verdict, "precision": precision})


async def precision(request: Request) -> Response:
    return JSONResponse({"patterns": await run_in_threadpool(services(request).store.precision_by_pattern)})


async def recommendations(request: Request) -> Response:
    query = record_query(request, mode=Mode.MONITOR, kind=Kind.DECISION, outcome=Outcome.PLANNED)
    records = [r for r in await run_in_threadpool(services(request).store.records, query) if r.action != "none"]
    return JSONResponse({"recommendations": [r.to_json() for r in records], "count": len(records)})


def cluster_param(request: Request) -> str:
    try:
        return validate_cluster(request.path_params["cluster"])
    except IdentityError as exc:
        raise BadRequest(str(exc)) from exc


async def get_mode(request: Request) -> Response:
    svc = services(request)
    cluster = cluster_param(request)
    mode = await run_in_threadpool(svc.engine.mode, cluster)
    known = await run_in_threadpool(known_cluster, svc, cluster)
    return JSONResponse({"cluster": cluster, "mode": mode, "known": known})


async def put_mode(request: Request) -> Response:
    svc = services(request)
    cluster = cluster_param(request)
    who = operator_identity(request, svc.operator_token)
    body = _parse(ModeBody, await read_capped(request, svc.settings.max_body_bytes))
    await run_in_threadpool(check_switch, svc, cluster, body.mode, body.create)
    await run_in_threadpool(svc.engine.set_mode, cluster, body.mode, who)
    return JSONResponse({"cluster": cluster, "mode": body.mode})


async def list_clusters(request: Request) -> Response:
    svc = services(request)
    names = set(svc.settings.clusters) | set(await run_in_threadpool(svc.store.modes))
    return JSONResponse({"clusters": [{"cluster": c, "mode": svc.engine.mode(c)} for c in sorted(names)]})


async def healthz(request: Request) -> Response:
    """Alive, and the decision loop is passing: 503 once it has stalled or ended (docs/operations.md)."""
    svc = services(request)
    loop = svc.engine.health.status()
    if svc.leadership is not None:
        loop["lease"] = svc.leadership.status()
    if svc.loop_task is not None and svc.loop_task.done():
        return JSONResponse({"status": "decision loop ended", "loop": loop}, status_code=503)
    if loop["stalled_for_s"]:
        return JSONResponse({"status": "decision loop stalled", "loop": loop}, status_code=503)
    return JSONResponse({"status": "ok", "loop": loop})


async def readyz(request: Request) -> Response:
    svc = services(request)
    try:
        await run_in_threadpool(svc.store.ping)
    except Exception as exc:  # noqa: BLE001 - any store failure means not ready
        return JSONResponse({"status": "not ready", "detail": f"store: {exc}"}, status_code=503)
    if svc.loop_task is None or svc.loop_task.done():
        return JSONResponse({"status": "not ready", "detail": "decision loop not running"}, status_code=503)
    return JSONResponse({"status": "ready", "time": rfc3339(svc.clock.now())})


async def metrics_endpoint(request: Request) -> Response:
    svc = services(request)
    await run_in_threadpool(svc.engine.refresh_gauges)
    return Response(generate_latest(svc.registry), media_type=CONTENT_TYPE_LATEST)


# The API's reads (GET), then its writes.
_READS = {
    "/v1/decisions": list_decisions,
    "/v1/decisions/{id}": get_decision,
    "/v1/review/precision": precision,
    "/v1/recommendations": recommendations,
    "/v1/clusters": list_clusters,
    "/v1/clusters/{cluster}/mode": get_mode,
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics_endpoint,
}
ROUTES: list[BaseRoute] = [
    *(Route(path, endpoint, methods=["GET"]) for path, endpoint in _READS.items()),
    Route("/v1/alerts", post_alerts, methods=["POST"]),
    Route("/v1/decisions/{id}/review", review_decision, methods=["POST"]),
    Route("/v1/clusters/{cluster}/mode", put_mode, methods=["PUT"]),
]


def _parse(model: type[_Body], body: bytes) -> _Body:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise BadRequest(_validation_detail(exc)) from exc


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]} for err in exc.errors(include_url=False)[:20]
    ]


async def responder_error(request: Request, exc: ResponderError) -> Response:
    return JSONResponse({"error": exc.error, "detail": exc.detail}, status_code=exc.status_code)


async def http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": exc.detail, "detail": None}, status_code=exc.status_code)
