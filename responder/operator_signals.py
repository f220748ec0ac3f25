"""What operators see in their own Alertmanager: the responder's alerts, and silences during remediation.

An audit sink (``Engine.sinks``) that queues each record for one worker thread, so the engine never
waits on Alertmanager. The worker:

* posts the responder's own alerts, each labelled ``trainguard_source="responder"`` (a team routes them
  with a sub-route; the responder ignores them as evidence) and carrying a console link:
  ``TrainguardDecisionPending`` (ends at the approval deadline, resolved at once when answered),
  ``TrainguardActionDone`` / ``TrainguardActionFailed`` (end after ``event_ttl_s``) and
  ``TrainguardBreakerOpen`` (ends when the breaker's cooldown does);
* when an action on a workload attempt is done and the cluster opted in, silences exactly that
  attempt's alerts (matchers ``cluster``, ``workload``, ``attempt``, all exact: node-level alerts and
  other workloads carry other values or no ``workload`` label, so they cannot match; and
  ``trainguard_source!="responder"``, so the responder's own alerts stay audible), with the
  decision id in the comment, and records the silence in the audit record;
* expires the silence as soon as Prometheus shows a rank of a later attempt completing a step after
  the action (verified productive), and never later than ``silences.max_s``.

Alertmanager being down loses no decision: the failure is logged and counted, nothing else waits.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import httpx

from responder.alertmanager import SOURCE, SOURCE_LABEL, AlertmanagerClient, AlertmanagerError
from responder.approval import record_fields
from responder.clock import Clock, rfc3339
from responder.model import Action, AuditRecord, Outcome
from responder.settings import Settings
from responder.store import AuditStore, RecordQuery

log = logging.getLogger(__name__)

SILENCED_ACTIONS = frozenset({Action.REQUEUE, Action.REQUEUE_EXCLUDING, Action.HOLD, Action.RELEASE})


def alerts_for(record: AuditRecord, settings: Settings, now: float) -> list[dict[str, Any]]:
    """The responder's own alerts for one record's new state (firing, or resolved by ``endsAt``)."""
    am = settings.alertmanager
    assert am is not None
    labels = {
        SOURCE_LABEL: SOURCE, "cluster": record.cluster, "workload": record.workload,
        "decision_id": record.id, "action": str(record.action), "category": "monitoring",
    }  # fmt: skip
    if record.attempt:
        labels["attempt"] = record.attempt
    link = f"{am.console_url.rstrip('/')}/console/decisions/{record.id}"

    def alert(name: str, severity: str, ends: float, summary: str) -> dict[str, Any]:
        return {
            "labels": {**labels, "alertname": name, "severity": severity},
            "annotations": {"summary": summary, "description": record.reason, "console_url": link},
            "startsAt": rfc3339(record.decided_at),
            "endsAt": rfc3339(ends),
            "generatorURL": link,
        }

    where = f"{record.cluster}/{record.workload} attempt {record.attempt or '-'}"
    out = []
    pending_summary = f"trainguard wants to {record.action} {where}: approve or reject"
    if record.outcome == Outcome.AWAITING:
        out.append(alert("TrainguardDecisionPending", "warning", float(record.approval["expires_at"]), pending_summary))
    elif record.approval.get("state") in {"approved", "rejected", "expired"} and record.approval.get("by") != "policy":
        out.append(alert("TrainguardDecisionPending", "warning", now, pending_summary))  # the wait is over
    if record.outcome == Outcome.DONE:
        out.append(
            alert("TrainguardActionDone", "info", now + am.event_ttl_s, f"trainguard did {record.action} {where}")
        )
    elif record.outcome == Outcome.FAILED:
        summary = f"trainguard could not {record.action} {where}: {record.detail}"
        out.append(alert("TrainguardActionFailed", "critical", now + am.event_ttl_s, summary))
    if record.safety.get("tripped"):
        summary = f"trainguard's circuit breaker is open on {record.cluster}: {record.safety.get('breaker')}"
        out.append(alert("TrainguardBreakerOpen", "critical", now + settings.breaker.cooldown_s, summary))
    return out


class OperatorSignals:
    """The sink and its worker thread; ``start``/``stop`` with the app."""

    def __init__(self, settings: Settings, store: AuditStore, clock: Clock, client: AlertmanagerClient) -> None:
        assert settings.alertmanager is not None
        self.settings = settings
        self.am = settings.alertmanager
        self.store = store
        self.clock = clock
        self.client = client
        self.failures = 0
        self._queue: queue.Queue[AuditRecord | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._prometheus = httpx.Client(timeout=settings.prometheus_timeout_s) if settings.prometheus_url else None

    def submit(self, record: AuditRecord) -> None:
        """The engine's sink: a copy of the record, queued; returns at once."""
        self._queue.put(AuditRecord.from_row(record_fields(record)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainguard-operator-signals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
        self.client.close()
        if self._prometheus is not None:
            self._prometheus.close()

    def _run(self) -> None:
        while True:
            try:
                record = self._queue.get(timeout=self.am.check_interval_s)
            except queue.Empty:
                record = None
            else:
                if record is None:
                    return
            try:
                if record is not None:
                    self.handle(record)
                self.check_silences()
            except Exception:
                self.failures += 1
                log.exception("posting to Alertmanager failed; decisions are unaffected")

    def handle(self, record: AuditRecord) -> None:
        now = self.clock.now()
        if self.am.notify:
            alerts = alerts_for(record, self.settings, now)
            if alerts:
                self.client.post_alerts(alerts)
        if self._wants_silence(record):
            self.silence(record, now)

    def _wants_silence(self, record: AuditRecord) -> bool:
        return (
            record.outcome == Outcome.DONE
            and Action(record.action) in SILENCED_ACTIONS
            and bool(record.attempt)
            and not record.silence
            and self.settings.cluster(record.cluster).silences.enabled
        )

    def silence(self, record: AuditRecord, now: float) -> None:
        """Silence this attempt's alerts, recorded in the audit record (``silence`` field)."""
        assert record.attempt is not None
        bound = self.settings.cluster(record.cluster).silences.max_s
        matchers = {"cluster": record.cluster, "workload": record.workload, "attempt": record.attempt}
        comment = (
            f"trainguard decision {record.id}: {record.action} of attempt {record.attempt}; expires when a later "
            f"attempt is productive, at the latest {rfc3339(now + bound)}"
        )
        silence_id = self.client.create_silence(matchers, now, now + bound, comment, unless={SOURCE_LABEL: SOURCE})
        record.silence = {"id": silence_id, "matchers": matchers, "created_at": now, "ends_at": now + bound,
                          "state": "active"}  # fmt: skip
        self.store.update_outcome(record)
        log.info("silenced %s while acting on it (silence %s, decision %s)", matchers, silence_id, record.id)

    def active_silences(self) -> list[AuditRecord]:
        records = self.store.records(RecordQuery(outcome=Outcome.DONE, limit=1000))
        return [r for r in records if r.silence.get("state") == "active"]

    def check_silences(self) -> None:
        """End each active silence whose next attempt is productive, or whose bound has passed."""
        now = self.clock.now()
        for record in self.active_silences():
            if now >= float(record.silence["ends_at"]):
                self._end(record, "expired", "the bound passed before a later attempt was seen productive", now)
            elif self.productive(record):
                try:
                    self.client.expire_silence(str(record.silence["id"]))
                except AlertmanagerError as exc:
                    log.warning("could not expire silence %s: %s", record.silence["id"], exc)
                    continue
                self._end(record, "lifted", "a later attempt completed a training step after the action", now)

    def _end(self, record: AuditRecord, state: str, why: str, now: float) -> None:
        record.silence = {**record.silence, "state": state, "ended_at": now, "why": why}
        self.store.update_outcome(record)
        log.info("silence %s of decision %s %s: %s", record.silence["id"], record.id, state, why)

    def productive(self, record: AuditRecord) -> bool:
        """Prometheus shows a rank of another attempt of the workload stepping after the action."""
        if self._prometheus is None or self.settings.prometheus_url is None:
            return False
        since = record.acted_at or record.decided_at
        promql = (
            f'max(trainguard_rank_last_step_timestamp_seconds{{cluster="{record.cluster}",'
            f'workload="{record.workload}",attempt!="{record.attempt}"}}) > {since:.3f}'
        )
        url = self.settings.prometheus_url.rstrip("/") + "/api/v1/query"
        try:
            body = self._prometheus.get(url, params={"query": promql}).json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("productive check for %s failed: %s", record.id, exc)
            return False
        return bool(body.get("data", {}).get("result"))
