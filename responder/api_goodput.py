"""``GET /v1/goodput``: goodput lost and ETTR per cluster and workload, from the audit trail.

The same figures as the console's goodput page (``responder/console_goodput.py``): per restart, fault to
restart ordered plus the work since the checkpoint; ETTR since the first fault. Query ``cluster``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from responder import goodput
from responder.errors import BadRequest
from responder.model import AuditRecord, Kind
from responder.services import Services, services
from responder.store import RecordQuery
from trainguard.identity import IdentityError, validate_cluster

RECENT = 5000  # decisions read back


async def get_goodput(request: Request) -> Response:
    cluster = request.query_params.get("cluster")
    if cluster is not None:
        try:
            validate_cluster(cluster)
        except IdentityError as exc:
            raise BadRequest(f"cluster: {exc}") from None
    return JSONResponse(await run_in_threadpool(_body, services(request), cluster))


def _body(svc: Services, cluster: str | None) -> dict[str, Any]:
    now = svc.clock.now()
    records = svc.store.records(RecordQuery(cluster=cluster, kind=Kind.DECISION.value, limit=RECENT))
    by_cluster: dict[str, list[AuditRecord]] = defaultdict(list)
    for r in records:
        by_cluster[r.cluster].append(r)
    out = []
    for name, rs in sorted(by_cluster.items()):
        total = goodput.summarise(name, rs, now)
        if total is None:
            continue
        per_workload: dict[str, list[AuditRecord]] = defaultdict(list)
        for r in rs:
            per_workload[r.workload].append(r)
        workloads = [_json(s) for w, ws in sorted(per_workload.items()) if (s := goodput.summarise(w, ws, now))]
        out.append({**_json(total), "cluster": name, "workloads": workloads})
    return {"clusters": out}


def _json(s: goodput.Summary) -> dict[str, Any]:
    ettr = None if s.ettr is None else round(s.ettr, 4)
    by_cause = {k: round(v, 3) for k, v in s.by_cause.items()}
    return {
        "name": s.name,
        "restarts": s.incidents,
        "lost_s": round(s.lost_s, 3),
        "ettr": ettr,
        "lost_by_cause_s": by_cause,
    }


ROUTES: list[BaseRoute] = [Route("/v1/goodput", get_goodput, methods=["GET"])]
