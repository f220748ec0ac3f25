"""The domain model: what the responder reasons about and records, apart from how it is stored or served.

``Action``, ``Mode``, ``Outcome``, ``Kind`` and ``FailureClass`` are the vocabulary of an audit record
(docs/interfaces.md §5); ``StoredAlert`` is one alert as evidence, ``Incident`` the alerts of one
workload attempt, and ``AuditRecord`` one decision or refusal, the same shape for every writer (the
engine, the refusal of hostile labels, the watchdog).
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from responder.clock import rfc3339


class Action(StrEnum):
    """Actions of docs/interfaces.md §5, plus ``resume_node`` (the operator's undo of ``drain_node``)."""

    REQUEUE = "requeue"
    REQUEUE_EXCLUDING = "requeue_excluding"
    STOP = "stop"
    HOLD = "hold"
    RELEASE = "release"
    DRAIN_NODE = "drain_node"
    RESUME_NODE = "resume_node"
    NONE = "none"


class Mode(StrEnum):
    """A cluster's mode: ``monitor`` (plan and record only, the default), ``approve`` (act once an
    operator approves, see ``responder.approval``) or ``act``."""

    MONITOR = "monitor"
    APPROVE = "approve"
    ACT = "act"


class Outcome(StrEnum):
    """What became of a record's action. ``pending`` is transient: written before a scheduler call."""

    PLANNED = "planned"
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    AWAITING = "awaiting_approval"  # approve mode: waits for an operator; nothing sent to a scheduler yet
    REJECTED = "rejected"  # an operator said no; nothing was done
    EXPIRED = "expired"  # nobody approved in time; nothing was done


class Kind(StrEnum):
    DECISION = "decision"
    REFUSAL = "refusal"


class FailureClass(StrEnum):
    INFRA = "infra"
    APP = "app"
    UNKNOWN = "unknown"


def new_id(prefix: str) -> str:
    """Short, unique, URL-safe ids (``dec_3f2a...``): stable once written, never reused."""
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True, slots=True)
class Incident:
    """The alerts of one ``(cluster, workload, attempt)``, decided once when its window closes."""

    id: str
    cluster: str
    workload: str
    scheduler: str | None
    attempt: str  # '' when the alerts did not say
    state: str
    opened_at: float
    deadline: float
    decided_at: float | None


@dataclass(frozen=True, slots=True)
class StoredAlert:
    """One accepted alert, as evidence of an incident."""

    fingerprint: str
    starts_at: str
    starts_at_ts: float
    status: str
    received_at: float
    labels: dict[str, str]
    annotations: dict[str, str]

    def evidence(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "labels": self.labels,
            "startsAt": self.starts_at,
            "summary": self.annotations.get("summary", ""),
        }


@dataclass(slots=True)
class AuditRecord:
    """One audited decision or refusal (docs/interfaces.md §5).

    ``kind`` is ``decision`` for what the policy chose (planned in monitor mode, carried out in act
    mode) and ``refusal`` for input the responder would not act on (hostile labels) or an action a
    safety limit stopped. ``outcome`` ``pending`` is transient: written before a scheduler call so a
    crash mid-action is retried (idempotently) at the next start.
    """

    id: str
    kind: Kind
    time: float
    cluster: str
    workload: str
    scheduler: str | None
    attempt: str | None
    incident_id: str | None
    patterns: list[str]
    evidence: list[dict[str, Any]]
    failure_class: FailureClass
    implicated_nodes: list[str]
    action: Action
    excluded_nodes: list[str]
    mode: Mode
    outcome: Outcome
    reason: str
    detected_at: float | None
    received_at: float | None
    decided_at: float
    acted_at: float | None = None
    node: str | None = None  # the node a drain_node record is about
    attribution: dict[str, Any] = field(default_factory=dict)
    safety: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    verified: bool = False
    actor: str = "responder"  # who wrote the record: the responder, or the Slurm watchdog
    approval: dict[str, Any] = field(default_factory=dict)  # approve mode: rule, deadline, who decided, when
    silence: dict[str, Any] = field(default_factory=dict)  # the Alertmanager silence made while acting, if any
    node_group: dict[str, Any] = field(default_factory=dict)  # which node group's mode and policy applied, why

    def to_json(self) -> dict[str, Any]:
        """The API's and Loki's form: docs/interfaces.md §5 fields with RFC 3339 timestamps."""
        data = asdict(self)
        for key in ("kind", "failure_class", "action", "mode", "outcome"):
            data[key] = str(data[key])
        for key in ("time", "detected_at", "received_at", "decided_at", "acted_at"):
            data[key] = rfc3339(data[key])
        return data

    @classmethod
    def from_row(cls, data: dict[str, Any]) -> AuditRecord:
        record = cls(**data)
        record.kind = Kind(record.kind)
        record.failure_class = FailureClass(record.failure_class)
        record.action = Action(record.action)
        record.mode = Mode(record.mode)
        record.outcome = Outcome(record.outcome)
        return record
