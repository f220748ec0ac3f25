"""Approve mode: which decisions wait for an operator, and how a wait ends.

In approve mode a decision that would act is written ``awaiting_approval`` instead of ``pending``:
nothing is sent to a scheduler until an operator approves it (console, ``trainguard approve``, or
``POST /v1/decisions/{id}/approve``). A wait ends one of three ways, each written into the record's
``approval`` field with who, when and which token identity: ``approved`` (the record becomes
``pending`` and is carried out as in act mode), ``rejected`` or ``expired`` (nothing is done).

Since nothing is held while a decision waits, the Slurm watchdog's fail-open rule is untouched: it
only ever sees holds of approved (or act-mode) actions.

A per-cluster rule may approve low-blast actions at once (``auto_approve``): by default none is, and
``drain_node`` and ``stop`` are never auto-approved whatever the list says.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from responder.model import Action, AuditRecord, Outcome

NEVER_AUTO = frozenset({Action.DRAIN_NODE, Action.STOP})


class ApprovalSettings(BaseModel):
    """Per cluster: how long a decision waits, and which low-blast actions need no operator."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(900.0, gt=0, le=7 * 86400, description="a decision not approved in this time expires")
    auto_approve: list[Action] = Field(
        default_factory=list,
        description="actions approved at once when they touch at most auto_max_nodes nodes (never drain_node, stop)",
    )
    auto_max_nodes: int = Field(1, ge=0, description="most nodes an auto-approved action may exclude or drain")


class ApprovalConflict(Exception):
    """The decision is not waiting for approval (already approved, rejected, expired, or never waited)."""


def nodes_touched(record: AuditRecord) -> int:
    return len(set(record.excluded_nodes) | ({record.node} if record.node else set()))


def gate(record: AuditRecord, settings: ApprovalSettings, now: float) -> AuditRecord:
    """Turn a ``pending`` record of approve mode into a wait, unless the cluster's rule approves it."""
    if record.outcome != Outcome.PENDING:
        return record
    action = Action(record.action)
    touched = nodes_touched(record)
    if action in settings.auto_approve and action not in NEVER_AUTO and touched <= settings.auto_max_nodes:
        record.approval = {
            "state": "approved",
            "by": "policy",
            "identity": "auto_approve",
            "at": now,
            "rule": f"{action.value} touching {touched} node(s) <= {settings.auto_max_nodes}",
        }
        return record
    record.outcome = Outcome.AWAITING
    record.approval = {"state": "awaiting", "requested_at": now, "expires_at": now + settings.timeout_s}
    return record


def settle(record: AuditRecord, verdict: str, by: str, identity: str, now: float, note: str = "") -> AuditRecord:
    """An operator's answer (``approved`` or ``rejected``), or ``expired`` from the clock; a new record."""
    if record.outcome != Outcome.AWAITING:
        raise ApprovalConflict(f"decision {record.id} is {record.outcome}, not awaiting approval")
    settled = AuditRecord.from_row(record_fields(record))
    answer: dict[str, Any] = {"state": verdict, "by": by, "identity": identity, "at": now}
    if note:
        answer["note"] = note[:2000]
    settled.approval = {**record.approval, **answer}
    if verdict == "approved":
        settled.outcome = Outcome.PENDING
    elif verdict == "rejected":
        settled.outcome = Outcome.REJECTED
        settled.detail = f"rejected by {by}" + (f": {note}" if note else "")
    elif verdict == "expired":
        settled.outcome = Outcome.EXPIRED
        waited = now - float(record.approval.get("requested_at", record.decided_at))
        settled.detail = f"not approved within {waited:.0f}s; nothing was done"
    else:
        raise ValueError(f"unknown approval verdict {verdict!r}")
    return settled


def is_expired(record: AuditRecord, now: float) -> bool:
    return record.outcome == Outcome.AWAITING and now >= float(record.approval.get("expires_at", float("inf")))


def record_fields(record: AuditRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}
