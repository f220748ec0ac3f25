"""Guardrails on a mode switch: a typo must not create a cluster, and act mode must be able to act.

``PUT /v1/clusters/{c}/mode``, ``trainguard mode`` and the console all pass through ``check_switch``.
A cluster is *known* when it is configured (``clusters.<name>``), has a stored mode, or has audit
records; anything else is refused unless the caller asks to create it. Act mode is refused for a
cluster with no scheduler adapter: every decision there would fail with "no scheduler configured".
"""

from __future__ import annotations

from responder.errors import ResponderError
from responder.model import Mode
from responder.schedulers.router import ClusterSchedulers
from responder.services import Services
from responder.settings import Settings
from responder.store import RecordQuery


class UnknownCluster(ResponderError):
    status_code = 404
    error = "unknown cluster"


class ActRefused(ResponderError):
    status_code = 409
    error = "act mode refused"


def known_cluster(svc: Services, cluster: str) -> bool:
    """Configured, switched before, or seen in the audit trail."""
    if cluster in svc.settings.clusters or svc.store.get_mode(cluster) is not None:
        return True
    return bool(svc.store.records(RecordQuery(cluster=cluster, limit=1)))


def act_refusal(svc: Services, cluster: str) -> str | None:
    """Why ``cluster`` cannot act, or None. Only a router without that cluster's adapter is refused:
    an engine built on one adapter (tests, embedding) acts for every cluster."""
    scheduler = svc.engine.scheduler
    if isinstance(scheduler, ClusterSchedulers) and cluster not in scheduler.adapters:
        return (
            f"cluster {cluster!r} has no scheduler configured (clusters.{cluster}.scheduler), so every action "
            "would fail; configure one and restart, then switch to act"
        )
    return None


def check_switch(svc: Services, cluster: str, mode: Mode, create: bool) -> None:
    """Raise ``UnknownCluster`` or ``ActRefused`` with the reason; return when the switch may go ahead."""
    if not create and not known_cluster(svc, cluster):
        configured = ", ".join(sorted(svc.settings.clusters)) or "none"
        raise UnknownCluster(
            f"cluster {cluster!r} is not configured and has no records (configured: {configured}); "
            "check the name, or pass create (trainguard mode --create) to start tracking it"
        )
    if mode == Mode.ACT:
        reason = act_refusal(svc, cluster)
        if reason is not None:
            raise ActRefused(reason)


def act_without_scheduler(settings: Settings, scheduler: ClusterSchedulers) -> list[str]:
    """At start: every configured act-mode cluster (or ``default_mode: act``) that has no adapter."""
    problems = [
        f"clusters.{name}.mode is act but clusters.{name}.scheduler is not set: every action would fail"
        for name, cluster in settings.clusters.items()
        if cluster.mode == Mode.ACT and name not in scheduler.adapters
    ]
    problems += [
        f"clusters.{name}.node_groups.{i}.mode is act but clusters.{name}.scheduler is not set: every action of "
        f"node group {group.name} would fail"
        for name, cluster in settings.clusters.items()
        for i, group in enumerate(cluster.node_groups)
        if group.mode == Mode.ACT and name not in scheduler.adapters
    ]
    if settings.default_mode == Mode.ACT and not scheduler.adapters:
        problems.append("default_mode is act but no cluster has a scheduler: every action would fail")
    return problems
