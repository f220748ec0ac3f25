"""``POST /v1/decisions/{id}/approve`` and ``/reject`` (docs/interfaces.md §4): an operator's answer to a
decision waiting in approve mode. Same operator rule as mode changes (token, or loopback without one);
the token identity and the optional ``by`` name go into the record's ``approval`` field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from responder.approval import ApprovalConflict, record_fields
from responder.auth import operator_identity, read_capped
from responder.errors import BadRequest, Conflict, NotFound
from responder.model import AuditRecord, Outcome
from responder.services import Services, services


class AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field("", max_length=200, pattern=r"^[^\x00-\x1f]*$", description="the operator's name, for the record")
    note: str = Field("", max_length=2000)


def answer_decision(svc: Services, record_id: str, verdict: str, by: str, identity: str, note: str) -> AuditRecord:
    """Record the answer and, on approval, hand the now ``pending`` record to the engine's action loop."""
    try:
        record = svc.engine.answer(record_id, verdict, by or identity, identity, note)
    except KeyError as exc:
        raise NotFound(f"no decision {record_id!r}") from exc
    except ApprovalConflict as exc:
        raise Conflict(str(exc)) from exc
    if record.outcome == Outcome.PENDING:
        svc.engine.submit(AuditRecord.from_row(record_fields(record)))  # its own copy: the answer stays as given
    return record


def _body(raw: bytes) -> AnswerBody:
    if not raw.strip():
        return AnswerBody()
    try:
        return AnswerBody.model_validate_json(raw)
    except ValidationError as exc:
        raise BadRequest([{"loc": ".".join(map(str, e["loc"])), "msg": e["msg"]} for e in exc.errors()[:20]]) from exc


async def _answer(request: Request, verdict: str) -> Response:
    svc = services(request)
    identity = operator_identity(request, svc.operator_token)
    body = _body(await read_capped(request, svc.settings.max_body_bytes))
    record_id = request.path_params["id"]
    record = await run_in_threadpool(answer_decision, svc, record_id, verdict, body.by, identity, body.note)
    return JSONResponse(record.to_json())


async def approve(request: Request) -> Response:
    return await _answer(request, "approved")


async def reject(request: Request) -> Response:
    return await _answer(request, "rejected")


ROUTES: list[BaseRoute] = [
    Route("/v1/decisions/{id}/approve", approve, methods=["POST"]),
    Route("/v1/decisions/{id}/reject", reject, methods=["POST"]),
]
