"""Node groups: a part of one cluster with its own mode and policy, e.g. act on the canary partition and
only record elsewhere (the rollout ladder's canary step, docs/operations.md).

A group is selected by Slurm partition names (the alerts' ``partition`` label), Kubernetes node pools
(the alerts' ``nodepool`` label) and node-name globs (the alerts' ``host`` label). Membership is read
from an incident's evidence alone: monitor mode calls no scheduler, so the scheduler cannot be asked
where a job runs before the mode is known. An alert belongs to the first group whose selector matches
it; one that matches none belongs to the rest of the cluster; one with no host, partition or node pool
says nothing about where the workload runs and is left out.

When an incident's evidence spans several groups (or a group and the rest of the cluster) the most
conservative mode wins, monitor < approve < act, and that part's policy with it: a job that reaches
beyond the canary is not acted on as if it were all canary. The audit record's ``node_group`` says
which part applied, with which mode, and why.

A group's mode: the one an operator set (``PUT /v1/clusters/{c}/groups/{g}/mode``, persisted), else
its configured ``mode``, else the cluster's. A group's ``policy`` names only what differs from the
cluster's policy (a partial override); ``policy.localize`` and ``approval`` stay the cluster's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from responder.approval import ApprovalSettings
from responder.model import Mode, StoredAlert
from responder.policy import PolicySettings

RANK = {Mode.MONITOR: 0, Mode.APPROVE: 1, Mode.ACT: 2}  # how far a mode reaches; the lowest wins a span
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_GLOB = re.compile(r"^[A-Za-z0-9._*?\[\]!-]{1,128}$")
REST = "(rest of cluster)"  # how the audit record and the API name the nodes of no group


class NodeGroup(BaseModel):
    """One group of a cluster's nodes: its selector, and the mode and policy that differ from the cluster's."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME, description="the group's name, e.g. canary")
    partitions: list[Annotated[str, Field(pattern=_NAME)]] = Field(
        default_factory=list, description="Slurm partitions: alerts whose partition label is one of these"
    )
    nodepools: list[Annotated[str, Field(pattern=_NAME)]] = Field(
        default_factory=list, description="Kubernetes node pools: alerts whose nodepool label is one of these"
    )
    nodes: list[str] = Field(default_factory=list, description="node-name globs (n[12], gpu-0*): alerts on such a host")
    mode: Mode | None = Field(None, description="the group's initial mode; none: the cluster's")
    policy: PolicySettings | None = Field(None, description="only the policy keys that differ from the cluster's")

    @model_validator(mode="after")
    def _selector(self) -> NodeGroup:
        if not (self.partitions or self.nodepools or self.nodes):
            raise ValueError(f"node group {self.name!r} selects nothing: give partitions, nodepools or nodes")
        for glob in self.nodes:
            if not _GLOB.match(glob):
                raise ValueError(f"node glob {glob!r}: letters, digits, '._-' and the glob characters *?[]! only")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        host = labels.get("host", "")
        if host and any(fnmatchcase(host, glob) for glob in self.nodes):
            return True
        if set(labels.get("partition", "").split(",")) & set(self.partitions):
            return True
        return labels.get("nodepool", "") in self.nodepools

    def policy_over(self, base: PolicySettings) -> PolicySettings:
        """The cluster's policy with the keys this group sets replaced."""
        if self.policy is None:
            return base
        return base.model_copy(update={key: getattr(self.policy, key) for key in self.policy.model_fields_set})


def _unique(groups: list[NodeGroup]) -> list[NodeGroup]:
    names = [g.name for g in groups]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"node group names must be unique; repeated: {', '.join(twice)}")
    return groups


NodeGroups = Annotated[list[NodeGroup], AfterValidator(_unique)]


class GroupedCluster(Protocol):
    """What resolution reads of a cluster's settings (``responder.settings.ClusterSettings``)."""

    mode: Mode
    policy: PolicySettings
    approval: ApprovalSettings
    node_groups: list[NodeGroup]


@dataclass(frozen=True, slots=True)
class Scope:
    """The mode and policy that apply to one incident, and the audit record's account of why."""

    mode: Mode
    policy: PolicySettings
    approval: ApprovalSettings
    group: str | None = None  # None: the cluster's own (no group, or the rest of the cluster)
    section: dict[str, Any] = field(default_factory=dict)  # the record's node_group; empty without groups


def group_mode(group: NodeGroup, cluster_mode: Mode, stored: Mapping[str, str]) -> tuple[Mode, str]:
    """A group's mode and where it comes from: ``operator``, ``configured`` or ``cluster``."""
    if group.name in stored:
        return Mode(stored[group.name]), "operator"
    if group.mode is not None:
        return group.mode, "configured"
    return cluster_mode, "cluster"


def members(groups: Sequence[NodeGroup], alerts: Iterable[StoredAlert]) -> dict[str | None, list[str]]:
    """Which part of the cluster each located alert is in (None: no group), with what located it."""
    found: dict[str | None, list[str]] = {}
    for alert in alerts:
        labels = alert.labels
        where = labels.get("host") or (f"partition={labels['partition']}" if labels.get("partition") else "")
        where = where or (f"nodepool={labels['nodepool']}" if labels.get("nodepool") else "")
        if not where:
            continue
        group = next((g.name for g in groups if g.matches(labels)), None)
        seen = found.setdefault(group, [])
        if where not in seen:
            seen.append(where)
    return found


def resolve(
    cluster: GroupedCluster, cluster_mode: Mode, stored: Mapping[str, str], alerts: Sequence[StoredAlert]
) -> Scope:
    """The mode and policy for an incident on ``cluster`` whose own mode is ``cluster_mode``."""
    groups = list(cluster.node_groups)
    if not groups:
        return Scope(cluster_mode, cluster.policy, cluster.approval)
    by_name = {g.name: g for g in groups}
    parts = members(groups, alerts)
    modes: dict[str | None, tuple[Mode, str]] = {None: (cluster_mode, "cluster")}
    modes.update({name: group_mode(by_name[name], cluster_mode, stored) for name in parts if name is not None})
    # The most conservative part; on a tie the rest of the cluster, then the groups in configured order.
    order = [None, *by_name]
    chosen = min(parts or {None: []}, key=lambda name: (RANK[modes[name][0]], order.index(name)))
    mode = modes[chosen][0]
    listed = [
        {"group": name, "mode": str(modes[name][0]), "source": modes[name][1], "evidence": sorted(seen)[:20]}
        for name, seen in sorted(parts.items(), key=lambda kv: order.index(kv[0]))
    ]
    section = {"group": chosen, "mode": str(mode), "parts": listed, "reason": _reason(parts, modes, chosen)}
    policy = cluster.policy if chosen is None else by_name[chosen].policy_over(cluster.policy)
    return Scope(mode, policy, cluster.approval, chosen, section)


def _reason(
    parts: Mapping[str | None, list[str]], modes: Mapping[str | None, tuple[Mode, str]], chosen: str | None
) -> str:
    def named(name: str | None) -> str:
        return f"node group {name}" if name is not None else "the rest of the cluster"

    mode = modes[chosen][0]
    if not parts:
        return f"the evidence names no node, partition or node pool: the cluster's mode {mode} applies"
    if len(parts) == 1:
        return f"the evidence ({', '.join(parts[chosen][:5])}) is in {named(chosen)}: mode {mode} ({modes[chosen][1]})"
    spans = ", ".join(f"{named(n)} ({modes[n][0]})" for n in parts)
    return f"the evidence spans {spans}: the most conservative mode, {mode}, applies with {named(chosen)}'s policy"


class _Clusters(Protocol):
    def cluster(self, name: str) -> GroupedCluster: ...


class _GroupModes(Protocol):
    def group_modes(self, cluster: str) -> dict[str, str]: ...


class EngineView(Protocol):
    """The three things of the engine that resolution reads (``responder.engine.Engine``)."""

    @property
    def settings(self) -> _Clusters: ...
    @property
    def store(self) -> _GroupModes: ...
    def mode(self, cluster: str) -> Mode: ...


def scope(engine: EngineView, cluster: str, alerts: Sequence[StoredAlert]) -> Scope:
    """``resolve`` with what the engine knows: the cluster's settings, its mode, the operators' group modes."""
    settings = engine.settings.cluster(cluster)
    stored = engine.store.group_modes(cluster) if settings.node_groups else {}
    return resolve(settings, engine.mode(cluster), stored, alerts)
