"""The console's Approve/Reject buttons on a decision waiting in approve mode.

The same guards as the console's mode switch (``console.console_form``): a same-origin form, the
per-process CSRF token, the operator token when one is configured (loopback otherwise); the answer
goes through the same path as the API's (``approval_api.answer_decision``), so it is recorded the same.
"""

from __future__ import annotations

import urllib.parse

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from responder.approval_api import answer_decision
from responder.auth import operator_identity
from responder.console import (
    Html,
    _decision_body,
    _error,
    _page,
    console_form,
    join,
    security_headers,
    tag,
)
from responder.errors import ResponderError
from responder.model import AuditRecord, Outcome
from responder.services import Services, services

VERDICTS = {"approve": "approved", "reject": "rejected"}


async def answer(request: Request) -> Response:
    svc = services(request)
    record_id = request.path_params["id"]
    form = await console_form(request, svc, "an approval")
    if isinstance(form, Response):
        return form
    verdict = VERDICTS.get(form.get("answer", ""))
    if verdict is None:
        return _error(request, 400, "Bad answer", "The answer is approve or reject.")
    try:
        who = operator_identity(request, svc.operator_token, presented=form.get("token", ""))
        by = form.get("by", "")[:200] or who
        await run_in_threadpool(answer_decision, svc, record_id, verdict, by, f"{who} (console)", form.get("note", ""))
    except ResponderError as exc:
        message = "The operator token is missing or wrong." if exc.status_code == 401 else str(exc.detail)
        return _error(request, exc.status_code, "Not answered", message)
    target = f"/console/decisions/{urllib.parse.quote(record_id)}?{urllib.parse.urlencode({'answered': verdict})}"
    return RedirectResponse(target, status_code=303, headers=security_headers())


def approval_form(svc: Services, record: AuditRecord) -> Html:
    """Approve/Reject for a waiting decision: CSRF token, operator token field when one is configured."""
    token = (
        tag("input", type="password", name="token", placeholder="operator token", required="required",
            autocomplete="off", aria_label="operator token")
        if svc.operator_token is not None else Html("")
    )  # fmt: skip
    deadline = float(record.approval.get("expires_at", 0))
    return tag("section", join([
        tag("h2", "Waiting for approval"),
        tag("p", f"Nothing has been done yet. Unanswered, this decision expires in "
                 f"{max(0, deadline - svc.clock.now()):.0f}s and nothing will be done."),
        tag("form", join([
            tag("input", type="hidden", name="csrf", value=svc.csrf),
            token,
            tag("input", type="text", name="by", placeholder="your name", aria_label="your name"),
            tag("input", type="text", name="note", placeholder="why (optional)", aria_label="note"),
            tag("button", "Approve", type="submit", name="answer", value="approve", class_="to-act"),
            tag("button", "Reject", type="submit", name="answer", value="reject", class_="to-monitor"),
        ]), method="post", action=f"/console/decisions/{urllib.parse.quote(record.id)}/answer", class_="approval"),
    ]), id="approval")  # fmt: skip


async def decision_page(request: Request) -> Response:
    """The console's decision page, with the approval form on top while the decision waits."""
    svc = services(request)
    record_id = request.path_params["id"]
    record = await run_in_threadpool(svc.store.record, record_id)
    if record is None:
        return _error(request, 404, "Not found", f"There is no audit record {record_id!r}.")
    reviews = await run_in_threadpool(svc.store.reviews, record_id)
    body = _decision_body(record, reviews)
    if record.outcome == Outcome.AWAITING:
        body = Html(approval_form(svc, record) + body)
    answered = request.query_params.get("answered")
    flash = tag("p", f"Decision {record.id} is now {record.outcome}.", class_="flash") if answered else None
    return _page(request, record.id, body, flash=flash)


# Listed before console.ROUTES: this page replaces the console's plain decision page.
ROUTES: list[BaseRoute] = [
    Route("/console/decisions/{id}", decision_page, methods=["GET"]),
    Route("/console/decisions/{id}/answer", answer, methods=["POST"]),
]
