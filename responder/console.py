"""The console: server-rendered HTML at ``/console`` for operators and demos without Grafana.

Pages: the overview (clusters with their mode and a switch, workloads, recent incidents and
decisions), the decision list with filters, one decision with its evidence, and the node ledger.
No JavaScript and no front-end build: the templates in ``responder/templates`` are filled with
values escaped here (``render`` escapes everything that is not already ``Html``).

Changing a cluster's mode is the one state change, and it is a ``POST`` (never a ``GET``) that:

* carries a CSRF token derived from a per-process secret (a page of another origin cannot read it),
  and, where the browser sends ``Origin`` or ``Sec-Fetch-Site``, must come from this origin;
* passes the API's own operator check (``responder.auth.operator_identity``) with the operator
  token typed into the form; without a configured token the API's loopback rule applies.

Every response forbids framing and scripts (Content-Security-Policy) and is not cached.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import string
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from responder import breaker, experiments, isolation
from responder.auth import operator_identity, read_capped
from responder.clock import rfc3339
from responder.errors import PayloadTooLarge, ResponderError
from responder.guardrails import check_switch
from responder.model import AuditRecord, Kind, Mode, Outcome
from responder.services import Services, services
from responder.store import RecordQuery
from trainguard.identity import IdentityError, validate_cluster

RECENT = 500  # records read for the overview's workloads and incidents
MAX_FORM_BYTES = 4096
_VOID = frozenset({"input", "br", "meta", "link", "img"})
_STANDING_BADGE = {"drain recorded": "bad", "drain due": "bad", "watch": "warn", "faded": "ok"}
PAGES = (("/console", "Overview"), ("/console/decisions", "Decisions"), ("/console/nodes", "Node ledger"),
         ("/console/goodput", "Goodput"), ("/console/replay", "Replay"))  # fmt: skip


class Html(str):
    """Markup that is already safe (built by ``render`` or from escaped parts)."""

    __slots__ = ()


def esc(value: object) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


def tag(name: str, content: object = "", /, **attrs: object) -> Html:
    """``<name attr="...">content</name>`` with attributes and content escaped (``class_`` -> class)."""
    rendered = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)
    if name in _VOID:
        return Html(f"<{name}{rendered}>")
    return Html(f"<{name}{rendered}>{esc(content)}</{name}>")


@cache
def _template(name: str) -> string.Template:
    return string.Template(resources.files("responder.templates").joinpath(name).read_text(encoding="utf-8"))


def render(name: str, **values: object) -> Html:
    """Fill a template; every value is escaped unless it is ``Html``. A missing value is an error."""
    return Html(_template(name).substitute({k: esc(v) for k, v in values.items()}))


@cache
def _style_hash() -> str:
    text = _template("base.html").template
    style = text.split("<style>", 1)[1].split("</style>", 1)[0]
    return base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()


def security_headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'sha256-{_style_hash()}'; img-src 'self' data:; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


def when(ts: float | None) -> str:
    text = rfc3339(ts)
    return "" if text is None else text.replace("T", " ").replace(".000Z", "Z")


def badge(text: str, kind: str) -> Html:
    return tag("span", text, class_=f"badge {kind}")


def mode_badge(mode: str) -> Html:
    return badge(mode, f"mode-{mode}" if mode in set(Mode) else "warn")


def outcome_badge(outcome: str) -> Html:
    kinds: dict[str, str] = {Outcome.DONE: "ok", Outcome.PLANNED: "mode-monitor", Outcome.PENDING: "warn",
                             Outcome.SKIPPED: "warn", Outcome.FAILED: "bad"}  # fmt: skip
    return badge(outcome, kinds.get(outcome, "warn"))


def decision_link(record: AuditRecord) -> Html:
    return tag("a", record.id, href=f"/console/decisions/{urllib.parse.quote(record.id)}", class_="mono")


def decision_table(records: list[AuditRecord]) -> Html:
    if not records:
        return tag("p", "No audit records yet.", class_="muted")
    rows = []
    for r in records:
        action = Html(esc(r.action) + (Html(" " + esc(r.node)) if r.node else Html("")))
        cells = [
            tag("td", when(r.time)), tag("td", decision_link(r)), tag("td", r.kind), tag("td", r.cluster),
            tag("td", r.workload), tag("td", r.attempt or ""), tag("td", action), tag("td", mode_badge(r.mode)),
            tag("td", outcome_badge(r.outcome)), tag("td", r.reason[:240]),
        ]  # fmt: skip
        rows.append(tag("tr", join(cells)))
    columns = ("When", "Record", "Kind", "Cluster", "Workload", "Attempt", "Action", "Mode", "Outcome", "Reason")
    head = join(tag("th", h) for h in columns)
    return tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join(rows))]))


def empty_row(columns: int, text: str) -> Html:
    return tag("tr", tag("td", text, class_="muted", colspan=columns))


@dataclass(frozen=True, slots=True)
class ClusterView:
    name: str
    mode: str
    breaker_open: bool
    breaker_reason: str
    records: int


def _page(request: Request, title: str, body: Html, status: int = 200, flash: Html | None = None) -> Response:
    path = request.url.path.rstrip("/") or "/console"
    here = max((href for href, _ in PAGES if path == href or path.startswith(href + "/")), key=len, default="")
    nav = join(tag("a", label, href=href, class_="here" if href == here else None) for href, label in PAGES)
    now = when(services(request).clock.now())
    text = render("base.html", title=title, nav=nav, body=body, flash=flash or Html(""), now=now)
    return HTMLResponse(text, status_code=status, headers=security_headers())


def _error(request: Request, status: int, heading: str, message: str) -> Response:
    return _page(request, heading, render("error.html", heading=heading, message=message), status)


# -- pages --------------------------------------------------------------------------------------


async def overview(request: Request) -> Response:
    svc = services(request)
    body = await run_in_threadpool(_overview_body, svc)
    flash = None
    changed = request.query_params.get("changed")
    if changed:
        try:
            cluster = validate_cluster(changed)
        except IdentityError:
            cluster = None
        if cluster is not None:
            mode = await run_in_threadpool(svc.engine.mode, cluster)
            flash = tag("div", Html(f"Cluster {esc(cluster)} is now in {mode_badge(mode)} mode."), class_="flash")
    return _page(request, "Overview", body, flash=flash)


def _clusters(svc: Services, records: list[AuditRecord]) -> list[ClusterView]:
    now = svc.clock.now()
    seen: dict[str, int] = {}
    for r in records:
        if r.kind == Kind.DECISION:
            seen[r.cluster] = seen.get(r.cluster, 0) + 1
    names = set(svc.settings.clusters) | set(svc.store.modes()) | set(seen)
    views = []
    for name in sorted(names):
        last = svc.store.last_trip(name)
        is_open = breaker.is_open(svc.store, name, now, svc.settings.breaker)
        views.append(ClusterView(name, svc.engine.mode(name), is_open, last[1] if last else "", seen.get(name, 0)))
    return views


def _mode_form(svc: Services, cluster: str, mode: str) -> Html:
    target = Mode.MONITOR if mode == Mode.ACT else Mode.ACT
    token = (
        tag("input", type="password", name="token", placeholder="operator token", required="required",
            autocomplete="off", aria_label=f"operator token for {cluster}")
        if svc.operator_token is not None else Html("")
    )  # fmt: skip
    return tag(
        "form",
        join([
            tag("input", type="hidden", name="csrf", value=svc.csrf),
            token,
            tag("button", f"Switch to {target}", type="submit", name="mode", value=target,
                class_=f"to-{target}"),
        ]),
        method="post", action=f"/console/clusters/{urllib.parse.quote(cluster)}/mode", class_="mode",
        data_cluster=cluster,
    )  # fmt: skip


def _cluster_rows(svc: Services, records: list[AuditRecord]) -> list[Html]:
    return [
        tag("tr", join([
            tag("td", tag("strong", c.name)),
            tag("td", mode_badge(c.mode), class_="mode", data_mode=c.mode),
            tag("td", Html(badge("open", "bad") + " " + esc(c.breaker_reason)) if c.breaker_open
                else badge("closed", "ok")),
            tag("td", str(c.records), class_="num"),
            tag("td", _mode_form(svc, c.name, c.mode)),
        ]), id=f"cluster-{c.name}")
        for c in _clusters(svc, records)
    ] or [empty_row(5, "No cluster configured or seen yet.")]  # fmt: skip


def _workload_and_incident_rows(records: list[AuditRecord]) -> tuple[list[Html], list[Html]]:
    workloads: dict[tuple[str, str], list[AuditRecord]] = {}
    incidents: dict[str, list[AuditRecord]] = {}
    for r in records:
        if r.kind != Kind.DECISION:
            continue
        workloads.setdefault((r.cluster, r.workload), []).append(r)
        if r.incident_id:
            incidents.setdefault(r.incident_id, []).append(r)
    workload_rows = []
    for (cluster, workload), recs in list(workloads.items())[:30]:
        last = recs[0]
        workload_rows.append(tag("tr", join([
            tag("td", cluster), tag("td", tag("strong", workload)), tag("td", last.scheduler or ""),
            tag("td", last.attempt or ""), tag("td", str(len({r.incident_id for r in recs})), class_="num"),
            tag("td", last.action), tag("td", outcome_badge(last.outcome)), tag("td", when(last.time)),
        ])))  # fmt: skip
    incident_rows = []
    for incident_id, recs in list(incidents.items())[:20]:
        first = recs[-1]
        nodes = sorted({n for r in recs for n in r.implicated_nodes})
        links = join((Html(decision_link(r) + " " + esc(r.action)) for r in reversed(recs)), Html("<br>"))
        incident_rows.append(tag("tr", join([
            tag("td", when(first.time)), tag("td", incident_id, class_="mono"),
            tag("td", f"{first.cluster} / {first.workload}"), tag("td", first.attempt or ""),
            tag("td", first.failure_class), tag("td", ", ".join(nodes) or "none"), tag("td", links),
        ])))  # fmt: skip
    return workload_rows, incident_rows


def _overview_body(svc: Services) -> Html:
    records = svc.store.records(RecordQuery(limit=RECENT))
    workload_rows, incident_rows = _workload_and_incident_rows(records)
    hint = (
        "Switching needs the operator token." if svc.operator_token is not None
        else "No operator token is configured: switching is accepted from this machine (loopback) only."
    )  # fmt: skip
    return render(
        "overview.html",
        auth_hint=hint,
        cluster_rows=join(_cluster_rows(svc, records)),
        workload_rows=join(workload_rows or [empty_row(8, "No decisions yet.")]),
        incident_rows=join(incident_rows or [empty_row(7, "No incidents yet.")]),
        decision_table=decision_table(records[:25]),
    )


async def decisions(request: Request) -> Response:
    params = request.query_params
    limit_text = params.get("limit", "100")
    limit = int(limit_text) if limit_text.isdigit() and 1 <= int(limit_text) <= 1000 else 100
    kind = params.get("kind") if params.get("kind") in set(Kind) else None
    query = RecordQuery(
        cluster=params.get("cluster") or None, workload=params.get("workload") or None, kind=kind, limit=limit
    )
    records = await run_in_threadpool(services(request).store.records, query)
    options = join(
        tag("option", label, value=value, selected="selected" if (kind or "") == value else None)
        for value, label in (("", "all"), ("decision", "decisions"), ("refusal", "refusals"))
    )
    body = render(
        "decisions.html", cluster=query.cluster or "", workload=query.workload or "", kind_options=options,
        limit=str(limit), decision_table=decision_table(records),
    )  # fmt: skip
    return _page(request, "Decisions", body)


async def decision(request: Request) -> Response:
    store = services(request).store
    record_id = request.path_params["id"]
    record = await run_in_threadpool(store.record, record_id)
    if record is None:
        return _error(request, 404, "Not found", f"There is no audit record {record_id!r}.")
    reviews = await run_in_threadpool(store.reviews, record_id)
    return _page(request, record.id, _decision_body(record, reviews))


async def nodes(request: Request) -> Response:
    return _page(request, "Node ledger", await run_in_threadpool(_nodes_body, services(request)))


def _ledger_section(svc: Services, cluster: str, now: float) -> Html | None:
    ledger = svc.settings.ledger
    scores = isolation.reputation(svc.store, cluster, now, ledger)
    if not scores:
        return None
    clean = experiments.clean_nodes(svc.store.records(RecordQuery(cluster=cluster, kind="decision", limit=1000)))
    suspicion = isolation.node_suspicion(svc.store, cluster, now, ledger, clean)
    last_seen: dict[str, float] = {}
    for node, at, _ in svc.store.implications_since(cluster, now - 10 * ledger.reputation_half_life_s):
        last_seen[node] = max(last_seen.get(node, 0.0), at)
    rows = []
    for node, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        ranked = isolation.standing(svc.store, cluster, node, now, ledger)
        workloads = ranked.workloads
        state = badge(ranked.state, _STANDING_BADGE[ranked.state])
        rows.append(tag("tr", join([
            tag("td", tag("strong", node)), tag("td", f"{suspicion.get(node, 0.0):.3f}", class_="num"),
            tag("td", f"{score:.2f}", class_="num"),
            tag("td", str(len(workloads)), class_="num"), tag("td", ", ".join(workloads)),
            tag("td", when(last_seen.get(node))), tag("td", state),
        ])))  # fmt: skip
    head = join(tag("th", h) for h in ("Node", "Suspicion", "Reputation", "Workloads", "Which", "Last implicated",
                                       "State"))  # fmt: skip
    return tag("section", join([
        tag("h2", f"Cluster {cluster}"),
        tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join(rows))])),
    ]), id=f"ledger-{cluster}")  # fmt: skip


def _nodes_body(svc: Services) -> Html:
    ledger = svc.settings.ledger
    now = svc.clock.now()
    records = svc.store.records(RecordQuery(limit=RECENT))
    names = sorted(set(svc.settings.clusters) | set(svc.store.modes()) | {r.cluster for r in records})
    sections = [s for s in (_ledger_section(svc, cluster, now) for cluster in names) if s is not None]
    if not sections:
        sections.append(tag("section", tag("p", "No node has been implicated yet.", class_="muted")))
    return render(
        "nodes.html", half_life=_duration(ledger.reputation_half_life_s),
        drain_after=str(ledger.drain_after_workloads), drain_window=_duration(ledger.drain_window_s),
        clusters=join(sections),
    )  # fmt: skip


# -- the one state change -----------------------------------------------------------------------


async def set_mode(request: Request) -> Response:
    svc = services(request)
    try:
        cluster = validate_cluster(request.path_params["cluster"])
    except IdentityError as exc:
        return _error(request, 400, "Bad cluster name", str(exc))
    form = await console_form(request, svc, "a mode switch")
    if isinstance(form, Response):
        return form
    mode = form.get("mode", "")
    if mode not in set(Mode):
        return _error(request, 400, "Bad mode", "The mode is monitor or act.")
    try:
        who = operator_identity(request, svc.operator_token, presented=form.get("token", ""))
    except ResponderError as exc:
        message = (
            "The operator token is missing or wrong." if exc.status_code == 401
            else f"Not allowed: {exc.detail}"
        )  # fmt: skip
        return _error(request, exc.status_code, "Not switched", message)
    try:
        await run_in_threadpool(check_switch, svc, cluster, Mode(mode), False)
    except ResponderError as exc:
        return _error(request, exc.status_code, "Not switched", str(exc.detail))
    await run_in_threadpool(svc.engine.set_mode, cluster, mode, f"{who} (console)")
    return RedirectResponse(
        f"/console?{urllib.parse.urlencode({'changed': cluster})}#cluster-{cluster}",
        status_code=303, headers=security_headers(),
    )  # fmt: skip


async def console_form(
    request: Request, svc: Services, what: str, limit: int = MAX_FORM_BYTES
) -> dict[str, str] | Response:
    """The fields of a form this console made, or the error page: sent from another site, larger than
    ``what`` can be (``limit`` bytes), or without this process's CSRF token."""
    if not _same_origin(request):
        return _error(request, 403, "Refused", "This form was sent from another site.")
    try:
        body = await read_capped(request, limit)
    except PayloadTooLarge:
        return _error(request, 413, "Too large", f"The form is larger than {what} can be.")
    form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}
    if not hmac.compare_digest(form.get("csrf", "").encode(), svc.csrf.encode()):
        return _error(request, 403, "Refused", "The form is stale or was not made by this console: "
                      "reload the page and try again.")  # fmt: skip
    return form


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in {"same-origin", "none"}:
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser, or an old one: the CSRF token still applies
    return urllib.parse.urlsplit(origin).netloc == request.headers.get("host", "")


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min"


def _decision_body(r: AuditRecord, reviews: list[dict[str, Any]]) -> Html:
    attribution = r.attribution or {}
    explanation = attribution.get("explanation") or []
    scores = attribution.get("scores") or {}
    score_table = (
        tag("table", join([
            tag("thead", tag("tr", join([tag("th", "Node"), tag("th", "Score")]))),
            tag("tbody", join(tag("tr", join([tag("td", node), tag("td", f"{float(score):.3f}", class_="num")]))
                              for node, score in sorted(scores.items(), key=lambda kv: -float(kv[1])))),
        ]))
        if scores else Html("")
    )  # fmt: skip
    evidence_rows = []
    for item in r.evidence:
        labels = item.get("labels") or {}
        evidence_rows.append(tag("tr", join([
            tag("td", labels.get("alertname", "")), tag("td", labels.get("host", "")),
            tag("td", labels.get("rank", "")),
            tag("td", labels.get("pattern", "") or labels.get("category", "")), tag("td", item.get("startsAt", "")),
            tag("td", item.get("summary", "")),
            tag("td", tag("details", join([tag("summary", item.get("fingerprint", "labels")),
                                          tag("code", ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))]))),
        ])))  # fmt: skip
    head = join(tag("th", h) for h in ("Alert", "Host", "Rank", "Pattern", "Starts at", "Summary", "Labels"))
    evidence = (
        tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join(evidence_rows))]))
        if evidence_rows else tag("p", "No alerts recorded.", class_="muted")
    )  # fmt: skip
    review_text = join((f"{v.get('verdict')} at {when(v.get('time'))}: {v.get('note', '')}" for v in reviews),
                       Html("<br>")) or "not reviewed"  # fmt: skip
    safety = r.safety or {}
    return render(
        "decision.html",
        kind_title="Refusal" if r.kind == Kind.REFUSAL else "Decision", id=r.id, action=r.action,
        node=f"of {r.node}" if r.node else "", mode_badge=mode_badge(r.mode), outcome_badge=outcome_badge(r.outcome),
        reason=r.reason, cluster=r.cluster, workload=r.workload, scheduler=r.scheduler or "unknown scheduler",
        attempt=r.attempt or "?", incident_id=r.incident_id or "none", failure_class=r.failure_class,
        implicated=", ".join(r.implicated_nodes) or "none", excluded=", ".join(r.excluded_nodes) or "none",
        patterns=", ".join(r.patterns) or "none",
        safety=safety.get("breaker", "ok") if safety.get("allowed", True) else f"refused: {safety.get('breaker')}",
        detected_at=when(r.detected_at) or "?", decided_at=when(r.decided_at), acted_at=when(r.acted_at) or "not yet",
        detail=r.detail or "none", reviews=review_text,
        summary=attribution.get("summary", "No attribution summary."),
        explanation=tag("ul", join(tag("li", line) for line in explanation)) if explanation else Html(""),
        scores=score_table, evidence_count=str(len(r.evidence)), evidence=evidence,
    )  # fmt: skip


ROUTES: list[BaseRoute] = [
    Route("/console", overview, methods=["GET"]),
    Route("/console/", overview, methods=["GET"]),
    Route("/console/decisions", decisions, methods=["GET"]),
    Route("/console/decisions/{id}", decision, methods=["GET"]),
    Route("/console/nodes", nodes, methods=["GET"]),
    Route("/console/clusters/{cluster}/mode", set_mode, methods=["POST"]),
]
