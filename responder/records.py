"""The audit record (CONTRACT §5): one per decision and one per refusal, the same shape for both."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from responder.clock import rfc3339

FailureClass = Literal["infra", "app", "unknown"]
Outcome = Literal["planned", "pending", "done", "failed", "skipped"]
Kind = Literal["decision", "refusal"]


def new_id(prefix: str) -> str:
    """Short, unique, URL-safe ids (``dec_3f2a...``): stable once written, never reused."""
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(slots=True)
class AuditRecord:
    """One audited decision or refusal.

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
    action: str
    excluded_nodes: list[str]
    mode: Literal["monitor", "act"]
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

    def to_json(self) -> dict[str, Any]:
        """The API's and Loki's form: CONTRACT §5 fields with RFC 3339 timestamps."""
        data = asdict(self)
        for key in ("time", "detected_at", "received_at", "decided_at", "acted_at"):
            data[key] = rfc3339(data[key])
        return data

    @classmethod
    def from_row(cls, data: dict[str, Any]) -> AuditRecord:
        return cls(**data)
