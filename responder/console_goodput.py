"""The console's goodput page: what incidents cost, per cluster and workload, and the ETTR it leaves.

The responder sees each restart from the fault (the first alert's start) to the restart it ordered
(verified in act mode, decided in monitor mode), plus the work since the last checkpoint when
Prometheus told it the step and step time. The time until training is productive again (the
scheduler's start, the rendezvous, loading the checkpoint) comes on top: ``bench/lab.py`` measures it.
"""

from __future__ import annotations

from collections import defaultdict

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from responder import goodput
from responder.console import RECENT, Html, _page, join, tag
from responder.model import AuditRecord, Kind
from responder.services import Services, services
from responder.store import RecordQuery


async def page(request: Request) -> Response:
    return _page(request, "Goodput", await run_in_threadpool(_body, services(request)))


def _body(svc: Services) -> Html:
    now = svc.clock.now()
    records = svc.store.records(RecordQuery(kind=Kind.DECISION.value, limit=RECENT))
    by_cluster: dict[str, list[AuditRecord]] = defaultdict(list)
    for r in records:
        by_cluster[r.cluster].append(r)
    sections = [s for s in (_section(c, rs, now) for c, rs in sorted(by_cluster.items())) if s is not None]
    intro = tag("p", "Per restart: fault to restart ordered, plus the work since the last checkpoint (when "
                "Prometheus gave the step and step time). ETTR: 1 - lost / time since the first fault. Time "
                "to productive again comes on top (measured by bench/lab.py).", class_="muted")  # fmt: skip
    if not sections:
        sections.append(tag("p", "No restart recorded yet.", class_="muted"))
    return join([tag("h1", "Goodput"), intro, *sections])


def _section(cluster: str, records: list[AuditRecord], now: float) -> Html | None:
    total = goodput.summarise(cluster, records, now)
    if total is None:
        return None
    per_workload: dict[str, list[AuditRecord]] = defaultdict(list)
    for r in records:
        per_workload[r.workload].append(r)
    rows = [_row(s) for w, rs in sorted(per_workload.items()) if (s := goodput.summarise(w, rs, now)) is not None]
    head = join(tag("th", h) for h in ("Workload", "Restarts", "Goodput lost", "ETTR", "Lost by cause"))
    return tag("section", join([
        tag("h2", f"Cluster {cluster}: ETTR {_ratio(total.ettr)}, {total.lost_s:.1f}s lost in {total.incidents} "
                  "restart(s)"),
        tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join([*rows, _row(total, "all")]))])),
    ]), id=f"goodput-{cluster}")  # fmt: skip


def _row(s: goodput.Summary, label: str | None = None) -> Html:
    causes = ", ".join(f"{cause} {lost:.1f}s" for cause, lost in sorted(s.by_cause.items(), key=lambda kv: -kv[1]))
    return tag("tr", join([
        tag("td", tag("strong", label or s.name)), tag("td", str(s.incidents), class_="num"),
        tag("td", f"{s.lost_s:.1f}s", class_="num"), tag("td", _ratio(s.ettr), class_="num"), tag("td", causes),
    ]))  # fmt: skip


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


ROUTES: list[BaseRoute] = [Route("/console/goodput", page, methods=["GET"])]
