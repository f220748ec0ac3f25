"""The console's policy replay at ``/console/replay``: ``trainguard replay`` in the browser.

The operator edits the policy in a text box, prefilled with the running one (each cluster's
``policy`` and ``node_groups``, nothing else: no scheduler settings, no secrets), and sees the
decisions that would change beside the recorded ones and their reviews, and the precision on reviewed
decisions (``responder.replay``). The edit is laid over the running configuration: a cluster or a
policy key left out keeps its running value, a ``node_groups`` list given replaces the running one.

Pasted text rather than candidate files on the server: the page exists so that an operator can try a
threshold before changing it, and a file on the responder's host would need a shell there first. Text
from a browser is outside input, so it is capped (64 KiB), YAML aliases are refused (no "billion
laughs"), and it is validated by the configuration's own models, errors naming the key path.

No side effects: replay reads the store and calls no scheduler; nothing is written, the running
configuration is not changed. It is a ``POST`` only because the text is large; it passes the console's
write checks (same origin, the CSRF token) and, where ``read_token`` is set, the read token, which
the guard checks on reads (``GET``) only.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from responder.auth import bearer_matches
from responder.console import Html, _error, _page, console_form, join, tag, when
from responder.guard import presented_token
from responder.node_groups import NodeGroups
from responder.policy import PolicySettings
from responder.replay import Precision, ReplayReport, ReplayRow, replay
from responder.replay_cli import parse_since
from responder.services import Services, services
from responder.settings import Settings, _describe
from trainguard.identity import IdentityError, validate_cluster

MAX_YAML = 64 * 1024
MAX_FORM = 4 * MAX_YAML  # URL-encoding can triple the text
SHOWN = 500  # changed decisions listed on the page at most (the counts cover all)


class CandidateCluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: PolicySettings | None = None
    node_groups: NodeGroups | None = None


class Candidate(BaseModel):
    """What the text box may hold: per cluster, a policy and node groups."""

    model_config = ConfigDict(extra="forbid")
    clusters: dict[str, CandidateCluster] = {}


class BadCandidate(ValueError):
    """The text is not a candidate policy; the message says where."""


def running_text(settings: Settings, store_clusters: list[str]) -> str:
    """The running policy and node groups of every configured (or switched) cluster, as YAML."""
    clusters: dict[str, Any] = {}
    for name in sorted(set(settings.clusters) | set(store_clusters)):
        cluster = settings.cluster(name)
        entry: dict[str, Any] = {"policy": cluster.policy.model_dump(mode="json")}
        if cluster.node_groups:
            entry["node_groups"] = [g.model_dump(mode="json", exclude_unset=True) for g in cluster.node_groups]
        clusters[name] = entry
    return yaml.safe_dump({"clusters": clusters}, sort_keys=False)


def candidate_settings(running: Settings, text: str) -> Settings:
    """The running settings with the text's policies and node groups laid over; ``BadCandidate`` if invalid."""
    if len(text.encode()) > MAX_YAML:
        raise BadCandidate(f"the policy text is larger than {MAX_YAML // 1024} KiB")
    try:
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise BadCandidate("YAML aliases (*name) are not accepted here: write the values out")
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadCandidate(f"not valid YAML: {exc}") from exc
    try:
        candidate = Candidate.model_validate(loaded if loaded is not None else {})
    except ValidationError as exc:
        raise BadCandidate(_describe(exc)) from exc
    clusters = dict(running.clusters)
    for name, given in candidate.clusters.items():
        try:
            validate_cluster(name)
        except IdentityError as exc:
            raise BadCandidate(f"clusters.{name}: {exc}") from exc
        base = running.cluster(name)
        update: dict[str, Any] = {}
        if given.policy is not None:
            update["policy"] = base.policy.model_copy(
                update={key: getattr(given.policy, key) for key in given.policy.model_fields_set}
            )
        if given.node_groups is not None:
            update["node_groups"] = given.node_groups
        clusters[name] = base.model_copy(update=update) if update else base
    return running.model_copy(update={"clusters": clusters})


def _may_read(request: Request, svc: Services) -> bool:
    """The read rule of the guard for this POST: with ``read_token`` set, it or the operator token."""
    tokens = [t for t in (svc.settings.read_secret(), svc.operator_token) if t] if svc.settings.read_secret() else []
    if not tokens:
        return True
    given = presented_token(request.headers.get("authorization", ""))
    return given is not None and any(bearer_matches(given, token) for token in tokens)


async def page(request: Request) -> Response:
    svc = services(request)
    text = await run_in_threadpool(lambda: running_text(svc.settings, list(svc.store.modes())))
    return _page(request, "Replay", _form(svc, text, "7d"))


async def run(request: Request) -> Response:
    svc = services(request)
    if not _may_read(request, svc):
        return _error(request, 401, "Refused", "Replay reads the audit trail: it needs the read token.")
    form = await console_form(request, svc, f"a policy of {MAX_YAML // 1024} KiB", MAX_FORM)
    if isinstance(form, Response):
        return form
    text, since_text = form.get("config", ""), form.get("since", "").strip()
    try:
        candidate = candidate_settings(svc.settings, text)
        since = parse_since(since_text or None, svc.clock.now())
    except (BadCandidate, ValueError) as exc:
        problem = tag("div", tag("pre", str(exc)), class_="flash error")
        return _page(request, "Replay", _form(svc, text, since_text), status=400, flash=problem)
    report = await run_in_threadpool(replay, svc.store, candidate, since)
    return _page(request, "Replay", Html(_report(report, since_text) + _form(svc, text, since_text)))


def _form(svc: Services, text: str, since: str) -> Html:
    return tag("section", join([
        tag("h2", "Candidate policy"),
        tag("p", "Each cluster's policy and node groups; what you leave out keeps its running value. Replay decides "
                 "every stored incident again from its alerts (no Prometheus context, no breaker) and writes "
                 "nothing.", class_="muted"),
        tag("form", join([
            tag("input", type="hidden", name="csrf", value=svc.csrf),
            tag("textarea", text, name="config", rows="24", cols="110", spellcheck="false",
                aria_label="candidate policy (YAML)"),
            tag("p", join([
                tag("label", join(["Since ", tag("input", type="text", name="since", value=since,
                                                 placeholder="7d, 12h or an RFC 3339 time")])),
                " ", tag("button", "Replay", type="submit"),
            ])),
        ]), method="post", action="/console/replay", class_="replay"),
    ]), id="candidate")  # fmt: skip


def _nodes(action: str, nodes: list[str]) -> str:
    return f"{action} [{', '.join(nodes)}]" if nodes else action


def _row(row: ReplayRow) -> Html:
    mark = tag("span", " (recorded with Prometheus context)", class_="muted") if row.context else Html("")
    return tag("tr", join([
        tag("td", when(row.time)),
        tag("td", tag("a", row.id, href=f"/console/decisions/{urllib.parse.quote(row.id)}", class_="mono")),
        tag("td", f"{row.cluster} / {row.workload} / {row.attempt or '-'}"),
        tag("td", Html(tag("span", _nodes(row.recorded_action, row.recorded_nodes)) + f" ({row.recorded_outcome})")),
        tag("td", join([tag("strong", _nodes(row.new_action, row.new_nodes)), ": ", row.new_reason, mark])),
        tag("td", row.group or ""), tag("td", row.review or "-"),
    ]), class_="changed")  # fmt: skip


def _precision_row(label: str, p: Precision, new: bool) -> Html:
    share = "n/a" if p.precision is None else f"{p.precision:.2f}"
    extra = (f"{p.unjudged} would act differently (no review covers them); would not act on {p.dropped_wrong} "
             f"reviewed wrong, {p.dropped_correct} reviewed correct") if new else ""  # fmt: skip
    cells = [
        tag("td", label),
        tag("td", share, class_="num precision"),
        tag("td", str(p.correct), class_="num"),
        tag("td", str(p.judged), class_="num"),
        tag("td", str(p.reviewed), class_="num"),
        tag("td", extra),
    ]
    return tag("tr", join(cells), id=f"precision-{label}")


def _report(report: ReplayReport, since: str) -> Html:
    changed = report.changed
    heading = f"{len(report.rows)} decisions replayed{f' since {since}' if since else ''}, {len(changed)} would change"
    head = join(tag("th", h) for h in ("When", "Decision", "Cluster / workload / attempt", "Recorded", "New",
                                       "Node group", "Review"))  # fmt: skip
    rows = [_row(r) for r in changed[:SHOWN]] or [tag("tr", tag("td", "No decision would change.", colspan="7",
                                                                  class_="muted"))]  # fmt: skip
    p_head = join(tag("th", h) for h in ("Policy", "Precision", "Correct", "Judged", "Reviewed", ""))
    return join([
        tag("section", join([
            tag("h2", heading, id="summary"),
            tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join(rows))]), id="changed"),
        ])),
        tag("section", join([
            tag("h2", "Precision on reviewed decisions that acted"),
            tag("table", join([tag("thead", tag("tr", p_head)), tag("tbody", join([
                _precision_row("recorded", report.recorded, False), _precision_row("new", report.new, True),
            ]))])),
        ])),
    ])  # fmt: skip


ROUTES: list[BaseRoute] = [
    Route("/console/replay", page, methods=["GET"]),
    Route("/console/replay", run, methods=["POST"]),
]
