"""A cluster's node groups and their modes: ``GET /v1/clusters/{c}/groups``, ``GET|PUT
/v1/clusters/{c}/groups/{g}/mode`` (``responder.node_groups``; ``trainguard mode --group G C``).

Setting a group's mode passes the same checks as a cluster's: the operator token (or loopback without
one), and act mode only where the cluster has a scheduler. Only configured groups exist: a group is a
selector in the configuration, so an unknown name is refused (404), never created.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from responder.api import _parse, cluster_param
from responder.auth import operator_identity, read_capped
from responder.errors import NotFound
from responder.guardrails import ActRefused, act_refusal
from responder.model import Mode
from responder.node_groups import NodeGroup, group_mode
from responder.services import Services, services

log = logging.getLogger(__name__)


class GroupModeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Mode


def _group(svc: Services, cluster: str, name: str) -> NodeGroup:
    for group in svc.settings.cluster(cluster).node_groups:
        if group.name == name:
            return group
    configured = ", ".join(g.name for g in svc.settings.cluster(cluster).node_groups) or "none"
    raise NotFound(f"cluster {cluster!r} has no node group {name!r} (configured: {configured})")


def _view(svc: Services, cluster: str, group: NodeGroup) -> dict[str, Any]:
    mode, source = group_mode(group, svc.engine.mode(cluster), svc.store.group_modes(cluster))
    selector = {"partitions": group.partitions, "nodepools": group.nodepools, "nodes": group.nodes}
    overrides = sorted(group.policy.model_fields_set) if group.policy is not None else []
    return {"cluster": cluster, "group": group.name, "mode": mode, "source": source, "selector": selector,
            "policy_overrides": overrides}  # fmt: skip


def groups_view(svc: Services, cluster: str) -> dict[str, Any]:
    """The cluster's mode and each of its groups' (what ``trainguard mode CLUSTER`` prints)."""
    groups = [_view(svc, cluster, g) for g in svc.settings.cluster(cluster).node_groups]
    return {"cluster": cluster, "mode": svc.engine.mode(cluster), "groups": groups}


async def list_groups(request: Request) -> Response:
    svc = services(request)
    return JSONResponse(await run_in_threadpool(groups_view, svc, cluster_param(request)))


async def get_group_mode(request: Request) -> Response:
    svc = services(request)
    cluster = cluster_param(request)
    group = _group(svc, cluster, request.path_params["group"])
    return JSONResponse(await run_in_threadpool(_view, svc, cluster, group))


def set_group_mode(svc: Services, cluster: str, group: NodeGroup, mode: Mode, who: str) -> dict[str, Any]:
    if mode == Mode.ACT:
        reason = act_refusal(svc, cluster)
        if reason is not None:
            raise ActRefused(reason)
    svc.store.set_group_mode(cluster, group.name, mode, svc.clock.now(), who)
    log.warning("node group %s of cluster %s switched to %s mode by %s", group.name, cluster, mode, who)
    return _view(svc, cluster, group)


async def put_group_mode(request: Request) -> Response:
    svc = services(request)
    cluster = cluster_param(request)
    who = operator_identity(request, svc.operator_token)
    group = _group(svc, cluster, request.path_params["group"])
    body = _parse(GroupModeBody, await read_capped(request, svc.settings.max_body_bytes))
    return JSONResponse(await run_in_threadpool(set_group_mode, svc, cluster, group, body.mode, who))


ROUTES: list[BaseRoute] = [
    Route("/v1/clusters/{cluster}/groups", list_groups, methods=["GET"]),
    Route("/v1/clusters/{cluster}/groups/{group}/mode", get_group_mode, methods=["GET"]),
    Route("/v1/clusters/{cluster}/groups/{group}/mode", put_group_mode, methods=["PUT"]),
]
