"""What the responder needs from storage, as the few stores it really is (``sqlite.SqliteStore`` is all of them).

* ``IncidentStore``: accepted alerts and the incidents they open, decided once;
* ``RecordStore``: audit records (decisions and refusals) and their outcomes;
* ``ModeStore``: each cluster's mode, as an operator last set it;
* ``ReviewStore``: operators' verdicts on decisions, and the precision per pattern they give;
* ``LedgerStore``: node implications across attempts and workloads (``responder.isolation``);
* ``BreakerStore``: what the circuit breaker counts, and its trips (``responder.breaker``).

Each consumer asks for the store it uses; ``AuditStore`` is all of them together (the engine's and the
app's view).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from responder.alerts import ClassifiedAlert, Notification
from responder.model import AuditRecord, Incident, StoredAlert


@dataclass(frozen=True, slots=True)
class IngestResult:
    new: int
    duplicates: int
    evidence: int
    rejected: int
    ignored: int
    resolved: int
    opened_incidents: tuple[str, ...]
    refusals: tuple[AuditRecord, ...]


@dataclass(frozen=True, slots=True)
class RecordQuery:
    cluster: str | None = None
    workload: str | None = None
    action: str | None = None
    mode: str | None = None
    kind: str | None = None
    outcome: str | None = None
    since: float | None = None
    limit: int = 100


class IncidentStore(Protocol):
    def ingest(
        self,
        notification: Notification,
        alerts: Sequence[ClassifiedAlert],
        now: float,
        window: float,
        refusals: Mapping[tuple[str, str, str], AuditRecord],
    ) -> IngestResult: ...
    def due_incidents(self, now: float) -> list[Incident]: ...
    def next_deadline(self) -> float | None: ...
    def postpone(self, incident_id: str, until: float) -> None: ...
    def incident(self, incident_id: str) -> Incident | None: ...
    def incident_alerts(self, incident_id: str) -> list[StoredAlert]: ...
    def decide(
        self, incident: Incident, records: Sequence[AuditRecord], implicated: dict[str, float], now: float
    ) -> bool: ...
    def open_incident_count(self) -> int: ...
    def batch(self) -> AbstractContextManager[None]: ...


class RecordStore(Protocol):
    def add_record(self, record: AuditRecord) -> None: ...
    def update_outcome(self, record: AuditRecord) -> None: ...
    def update_outcome_if(self, record: AuditRecord, expected: str) -> bool: ...
    def pending_records(self) -> list[AuditRecord]: ...
    def records(self, query: RecordQuery) -> list[AuditRecord]: ...
    def record(self, record_id: str) -> AuditRecord | None: ...


class ModeStore(Protocol):
    def get_mode(self, cluster: str) -> str | None: ...
    def set_mode(self, cluster: str, mode: str, now: float, changed_by: str) -> None: ...
    def modes(self) -> dict[str, str]: ...


class ReviewStore(Protocol):
    def add_review(self, record_id: str, verdict: str, note: str, now: float) -> None: ...
    def reviews(self, record_id: str) -> list[dict[str, Any]]: ...
    def precision_by_pattern(self) -> dict[str, dict[str, float]]: ...


class LedgerStore(Protocol):
    def workload_nodes(self, cluster: str, workload: str) -> set[str]: ...
    def node_workloads_since(self, cluster: str, node: str, since: float) -> set[str]: ...
    def implications_since(self, cluster: str, since: float) -> list[tuple[str, float, float]]: ...
    def drain_recorded_since(self, cluster: str, node: str, since: float) -> bool: ...


class BreakerStore(Protocol):
    def actions_since(self, cluster: str, mode: str, since: float) -> int: ...
    def isolated_nodes_since(self, cluster: str, mode: str, since: float) -> set[str]: ...
    def workloads_failing_since(self, cluster: str, since: float) -> set[str]: ...
    def last_trip(self, cluster: str) -> tuple[float, str] | None: ...
    def record_trip(self, cluster: str, now: float, reason: str) -> None: ...
    def tripped_clusters(self) -> list[str]: ...


class AuditStore(IncidentStore, RecordStore, ModeStore, ReviewStore, LedgerStore, BreakerStore, Protocol):
    """Every store at once: what the engine and the app are given."""

    def ping(self) -> None: ...
    def close(self) -> None: ...
