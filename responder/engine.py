"""The engine: runs the stages for each incident whose correlation window has closed, and acts.

Order of work, and why it is crash-safe:

1. ``ingest`` commits the notification's alerts (and opens incidents) before the webhook answers.
2. ``decide_due`` attributes and plans each due incident, then writes its audit records and closes
   the incident in one transaction. A crash before the commit leaves the incident open, so it is
   decided at the next start; after the commit it is never decided again.
3. In act mode records are written ``pending`` first, then the scheduler is called, then the
   outcome is written. A crash between the two leaves a ``pending`` record that ``resume_pending``
   retries at the next start; adapters are idempotent per attempt, so nothing is done twice.

Monitor mode writes the planned action to the audit trail and calls no scheduler at all: a dry run
that truly writes nothing to the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Sequence

from anyio import to_thread

from responder import acting, approval, breaker, experiments, goodput, isolation, node_groups
from responder.alerts import ClassifiedAlert, Notification, classify
from responder.attribution import Context, Enricher, NoEnrichment, Verdict, attribute, checkpoint_step
from responder.breaker import BreakerCheck
from responder.clock import Clock, SystemClock
from responder.decision_record import RecordBuilder
from responder.engine_config import EngineConfig
from responder.metrics import ResponderMetrics
from responder.model import Action, AuditRecord, FailureClass, Incident, Kind, Mode, Outcome, StoredAlert, new_id
from responder.policy import Plan, plan
from responder.schedulers.base import Scheduler, SchedulerError, WorkloadState
from responder.store import AuditStore, IngestResult, RecordQuery
from responder.supervisor import LoopHealth, retry

log = logging.getLogger(__name__)


MAX_CONCURRENT_ACTIONS = 8


def precreate_failed(metrics: ResponderMetrics, cluster: str) -> None:
    """Every action's failure counter at 0 for ``cluster``, so its first failure is a visible increase."""
    for action in Action:
        if action != Action.NONE:
            metrics.actions_failed.labels(cluster, action)


RETRY_DECISION_S = 5.0
DECIDE_BATCH = 32  # incidents per commit: one fsync for many, the lock never held long
CLEAN_CHECK_S = 5.0  # how often experiments that may have run clean are looked at


class Engine:
    def __init__(
        self,
        settings: EngineConfig,
        store: AuditStore,
        scheduler: Scheduler,
        clock: Clock,
        metrics: ResponderMetrics,
        enricher: Enricher | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.scheduler = scheduler
        self.clock = clock
        self.metrics = metrics
        self.enricher = enricher or NoEnrichment()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._actions: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_ACTIONS)
        self._sleep_until = math.inf  # when the loop's current wait ends by itself
        self._stopping = asyncio.Event()  # set at shutdown: actions waiting to be tried again stop waiting
        # Wall-clock time, not the injected clock: a stall is real time without progress.
        self.health = LoopHealth(SystemClock(), metrics.registry, settings.loop_stall_after_s)
        self._clean_checked = 0.0  # when experiments that may have run clean were last looked at
        # Called with every audit record once written or updated (the Loki mirror, the console's live
        # view). A sink must return at once and never raise into the engine: it queues its work.
        self.sinks: list[Callable[[AuditRecord], None]] = []

    def _publish(self, record: AuditRecord) -> None:
        for sink in self.sinks:
            try:
                sink(record)
            except Exception:
                log.exception("audit sink %r failed for %s", sink, record.id)

    def label(self, cluster: str) -> str:
        """A metric's cluster label: configured clusters by name, any other (untrusted) value as ``other``."""
        return cluster if cluster in self.settings.clusters else "other"

    # -- modes ----------------------------------------------------------------------------------

    def mode(self, cluster: str) -> Mode:
        return Mode(self.store.get_mode(cluster) or self.settings.cluster(cluster).mode)

    def set_mode(self, cluster: str, mode: str, changed_by: str) -> None:
        self.store.set_mode(cluster, Mode(mode), self.clock.now(), changed_by)
        self.metrics.mode.labels(cluster).set(1 if mode == Mode.ACT else 0)
        precreate_failed(self.metrics, cluster)
        log.warning("cluster %s switched to %s mode by %s", cluster, mode, changed_by)

    def refresh_gauges(self) -> None:
        """Gauges that depend on time, not events: a breaker closes when its cooldown ends."""
        now = self.clock.now()
        for cluster in self.store.tripped_clusters():
            is_open = breaker.is_open(self.store, cluster, now, self.settings.breaker)
            self.metrics.breaker_open.labels(self.label(cluster)).set(1 if is_open else 0)
        self.metrics.open_incidents.set(self.store.open_incident_count())
        records = self.store.records(RecordQuery(kind=Kind.DECISION.value, limit=1000))
        for cluster in set(self.settings.clusters) | set(self.store.modes()) | {r.cluster for r in records}:
            clean = experiments.clean_nodes(r for r in records if r.cluster == cluster)
            for node, p in isolation.node_suspicion(self.store, cluster, now, self.settings.ledger, clean).items():
                self.metrics.node_suspicion.labels(cluster, node).set(p)

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(self, notification: Notification) -> IngestResult:
        """Classify and durably store one notification. Raises on storage failure (-> 5xx)."""
        now = self.clock.now()
        classified = [classify(alert) for alert in notification.alerts]
        # Built before the store is asked: the store keeps those of alerts it had not seen before.
        refusals = {item.key: self._refusal(item, now) for item in classified if item.disposition == "rejected"}
        result = self.store.ingest(notification, classified, now, self.settings.correlation_window_s, refusals)
        m = self.metrics
        m.alerts.labels("new").inc(result.evidence)
        m.alerts.labels("duplicate").inc(result.duplicates)
        m.alerts.labels("rejected").inc(result.rejected)
        m.alerts.labels("ignored").inc(result.ignored)
        m.alerts.labels("resolved").inc(result.resolved)
        # Alerts of one notification mostly share a few start times: observe each distinct one once.
        for starts_at in {item.starts_at for item in classified if item.disposition == "evidence"}:
            m.detection_latency.observe(max(0.0, now - starts_at))
        for record in result.refusals:
            self._publish(record)
            m.decisions.labels(self.label(record.cluster), record.action, record.mode, record.outcome).inc()
            log.warning("refused alert: %s", record.reason)
        for incident_id in result.opened_incidents:
            incident = self.store.incident(incident_id)
            if incident is not None:
                m.incidents.labels(self.label(incident.cluster)).inc()
        return result

    def _refusal(self, item: ClassifiedAlert, now: float) -> AuditRecord:
        labels = item.alert.labels
        cluster = item.identity.cluster if item.identity else labels.get("cluster", "")[:256]
        return AuditRecord(
            id=new_id("ref"),
            kind=Kind.REFUSAL,
            time=now,
            cluster=cluster,
            workload=labels.get("workload", "")[:256],
            scheduler=labels.get("scheduler"),
            attempt=labels.get("attempt"),
            incident_id=None,
            patterns=[labels.get("pattern") or labels.get("alertname", "")],
            evidence=[{"fingerprint": item.alert.fingerprint, "labels": labels, "startsAt": item.alert.startsAt}],
            failure_class=FailureClass.UNKNOWN,
            implicated_nodes=[],
            action=Action.NONE,
            excluded_nodes=[],
            mode=Mode.ACT if item.identity and self.mode(cluster) == Mode.ACT else Mode.MONITOR,
            outcome=Outcome.SKIPPED,
            reason=f"alert rejected, nothing will act on it: {item.reason}",
            detected_at=item.starts_at,
            received_at=now,
            decided_at=now,
        )

    # -- decide ---------------------------------------------------------------------------------

    def decide_due(self) -> list[AuditRecord]:
        """Decide every incident whose window has closed; returns the records written."""
        written: list[AuditRecord] = []
        due = self.store.due_incidents(self.clock.now())
        for start in range(0, len(due), DECIDE_BATCH):
            decided: list[tuple[Incident, list[AuditRecord], bool]] = []
            # Evidence and enrichment (Prometheus queries) first, outside the store's lock ...
            prepared = {incident.id: self._prepare(incident) for incident in due[start : start + DECIDE_BATCH]}
            # ... then one commit (one fsync) per batch, the lock held for the batch's local work only;
            # a record is announced (sinks, metrics) only once its batch is committed.
            with self.store.batch():
                for incident in due[start : start + DECIDE_BATCH]:
                    try:
                        decided.append((incident, *self._decide(incident, prepared[incident.id])))
                    except Exception:
                        log.exception("deciding incident %s failed; retrying in %gs", incident.id, RETRY_DECISION_S)
                        self.store.postpone(incident.id, self.clock.now() + RETRY_DECISION_S)
            for incident, records, tripped in decided:
                self._announce(incident, records, tripped)
                written.extend(records)
        self.metrics.open_incidents.set(self.store.open_incident_count())
        return written

    def decide(self, incident: Incident) -> list[AuditRecord]:
        """Decide one incident now (committed, then announced); [] if it was decided already."""
        records, tripped = self._decide(incident)
        self._announce(incident, records, tripped)
        return records

    def _prepare(self, incident: Incident) -> tuple[list[StoredAlert], Context] | None:
        """An incident's alerts and their enrichment; None (decided without) if reading them failed."""
        try:
            alerts = self.store.incident_alerts(incident.id)
            return alerts, self.enricher.context(incident, alerts)
        except Exception:
            log.exception("preparing incident %s failed; it is read again while deciding", incident.id)
            return None

    def _decide(
        self, incident: Incident, prepared: tuple[list[StoredAlert], Context] | None = None
    ) -> tuple[list[AuditRecord], bool]:
        alerts, context = prepared or self._prepare_now(incident)
        verdict = attribute(alerts, context)
        now = self.clock.now()
        cluster_settings = node_groups.scope(self, incident.cluster, alerts)  # the node group's mode and policy
        mode = cluster_settings.mode
        carried = self.store.workload_nodes(incident.cluster, incident.workload)
        severities = {a.labels.get("severity", "") for a in alerts}
        chosen = plan(
            verdict, incident.attempt or None, cluster_settings.policy, carried, severities - {""}, context.attempts
        )
        experiment = self._experiment(incident, alerts, verdict, context, chosen, carried)
        if experiment is not None:
            chosen = experiment.plan
            if experiment.blamed:
                scores = verdict.scores | dict.fromkeys(experiment.blamed, 1.0)
                verdict = dataclasses.replace(verdict, implicated=experiment.blamed, scores=scores)
        base = RecordBuilder(incident, alerts, verdict, mode, now, cluster_settings.section)

        records = []
        new_nodes = frozenset(chosen.excluded_nodes) - carried
        safety = self._check(incident.cluster, mode, now, new_nodes, counts_action=chosen.action != Action.NONE)
        records.append(base.record(chosen.action, chosen.reason, chosen.excluded_nodes, safety))
        if experiment is not None:
            records[0].attribution["localization"] = experiment.section
        records[0].attribution["goodput"] = goodput.section(
            [p.step for p in context.progress],
            [p.step_duration for p in context.progress if p.step_duration],
            checkpoint_step(context, incident.attempt),
        )
        if verdict.implicated and safety.allowed:
            for candidate in isolation.drain_candidates(
                self.store, incident.cluster, incident.workload, verdict.implicated, now, self.settings.ledger, mode
            ):
                drain_safety = self._check(incident.cluster, mode, now, frozenset({candidate.node}), counts_action=True)
                reason = (
                    f"{candidate.node} was implicated by {len(candidate.workloads)} workloads "
                    f"({', '.join(candidate.workloads)}) within {self.settings.ledger.drain_window_s / 3600:g}h"
                )
                records.append(base.record(Action.DRAIN_NODE, reason, (), drain_safety, node=candidate.node))
        if mode == Mode.APPROVE:
            records = [approval.gate(r, cluster_settings.approval, now) for r in records]
        # A refused decision is evidence of nothing: its nodes never become exclusions or drain evidence.
        implicated = {h: verdict.scores[h] for h in verdict.implicated} if safety.allowed else {}
        if not self.store.decide(incident, records, implicated, now):
            return [], False
        return records, safety.tripped

    def _prepare_now(self, incident: Incident) -> tuple[list[StoredAlert], Context]:
        alerts = self.store.incident_alerts(incident.id)
        return alerts, self.enricher.context(incident, alerts)

    def _announce(self, incident: Incident, records: list[AuditRecord], tripped: bool) -> None:
        if not records:
            return
        self.metrics.breaker_open.labels(self.label(incident.cluster)).set(1 if tripped else 0)
        for record in records:
            self._publish(record)
            self.metrics.decisions.labels(self.label(record.cluster), record.action, record.mode, record.outcome).inc()
            if record.received_at is not None:
                self.metrics.decision_latency.observe(max(0.0, record.decided_at - record.received_at))
            cost = goodput.from_record(record)
            if cost is not None and cost.lost_s is not None:
                self.metrics.goodput_lost.labels(record.cluster, cost.cause).inc(cost.lost_s)
            log.info(
                "decision %s: %s %s/%s attempt %s -> %s (%s): %s",
                record.id, record.mode, record.cluster, record.workload, record.attempt, record.action,
                record.outcome, record.reason,
            )  # fmt: skip

    def _experiment(
        self, incident: Incident, alerts: Sequence[StoredAlert], verdict: Verdict, context: Context,
        chosen: Plan, carried: set[str],
    ) -> experiments.Experiment | None:  # fmt: skip
        """The restart as an experiment (``responder.experiments``) when the evidence names no node."""
        settings = self.settings.cluster(incident.cluster).policy.localize
        if not experiments.applies(verdict, chosen, settings):
            return None
        query = RecordQuery(cluster=incident.cluster, workload=incident.workload, kind=Kind.DECISION.value,
                            limit=experiments.HISTORY)  # fmt: skip
        hosts = {a.labels.get("host", "") for a in alerts} | {p.host for p in context.progress}
        ran_on = experiments.allocation(verdict, hosts - {""}, self._allocation(incident))
        history = self.store.records(query)
        capacity = self.settings.cluster(incident.cluster).nodes
        return experiments.design(verdict, chosen, ran_on, history, carried, settings, capacity, incident.attempt)

    def check_clean_runs(self) -> list[AuditRecord]:
        """Experiments that ran ``clean_after_s`` without failing: a follow-up record each (maybe a probe)."""
        now = self.clock.now()
        newest: dict[tuple[str, str], AuditRecord] = {}
        for r in self.store.records(RecordQuery(kind=Kind.DECISION.value, since=now - 7 * 86400, limit=1000)):
            if r.action != Action.DRAIN_NODE and not experiments.superseded(r):  # the newest experiment, or not
                newest.setdefault((r.cluster, r.workload), r)
        written = []
        for (cluster, workload), latest in newest.items():
            settings = self.settings.cluster(cluster).policy.localize
            query = RecordQuery(cluster=cluster, workload=workload, kind=Kind.DECISION.value, limit=experiments.HISTORY)
            if not (settings.enabled and experiments.may_have_run_clean(latest, now, settings)):
                continue  # cheap: the history is read only for a restart that may have run clean
            capacity, running_on = self.settings.cluster(cluster).nodes, self._running_on(cluster, workload)
            follow = experiments.clean_run(latest, self.store.records(query), now, settings, capacity, running_on)
            if follow is None:
                continue
            mode, counts = self.mode(cluster), follow.plan.action != Action.NONE
            safety = self._check(cluster, mode, now, frozenset(follow.plan.excluded_nodes), counts_action=counts)
            record = experiments.follow_up(latest, follow, mode, now, safety.allowed, safety.reason)
            self.store.add_record(record)
            self._publish(record)
            written.append(record)
        return written

    def _allocation(self, incident: Incident) -> tuple[str, ...]:
        """The failed attempt's nodes from the scheduler, in act mode only (alerts miss a rank that died early)."""
        if self.mode(incident.cluster) != Mode.ACT:
            return ()
        try:
            return self.scheduler.observe(incident.cluster, incident.workload).nodes
        except SchedulerError:
            return ()

    def _running_on(self, cluster: str, workload: str) -> Callable[[], tuple[str, ...] | None]:
        """Asks, when called, the nodes a running workload is on (empty: cannot say); None when it does not run."""

        def ask() -> tuple[str, ...] | None:
            try:
                observed = self.scheduler.observe(cluster, workload)
            except SchedulerError:
                return None
            return observed.nodes if observed.state == WorkloadState.RUNNING else None

        return ask

    def _check(
        self, cluster: str, mode: Mode, now: float, new_nodes: frozenset[str], counts_action: bool
    ) -> BreakerCheck:
        """The breaker's verdict; a new trip is persisted here, so the breaker itself only reads."""
        nodes = self.settings.cluster(cluster).nodes
        verdict = breaker.check(self.store, cluster, mode, now, self.settings.breaker, nodes, new_nodes, counts_action)
        if verdict.trip is not None:
            self.store.record_trip(cluster, now, verdict.trip)
        return verdict

    # -- act ------------------------------------------------------------------------------------

    def act(self, record: AuditRecord) -> AuditRecord:
        """Try one ``pending`` record through the scheduler and write its outcome, or keep it pending to
        be tried again while its scheduler cannot be reached (``responder.acting``)."""
        try:
            # The adapter takes its own fresh look (opt-in included) and acts on it: nothing is asked twice.
            result = self.scheduler.act(acting.request_for(record))
        except SchedulerError as exc:
            record.outcome, record.detail = Outcome.FAILED, f"scheduler: {exc}"
        else:
            if acting.keep_pending(record, result, self.clock.now(), self.settings.action_retry_s):
                self.metrics.action_retries.labels(self.label(record.cluster), record.action).inc()
                self.store.update_outcome(record)
                log.warning("action %s %s/%s: %s", record.action, record.cluster, record.workload, record.detail)
                return record
            acting.apply(record, result, self.clock.now())
        self._finish(record)
        return record

    def _finish(self, record: AuditRecord) -> None:
        self.store.update_outcome(record)
        self._publish(record)
        self.metrics.decisions.labels(self.label(record.cluster), record.action, record.mode, record.outcome).inc()
        if record.acted_at is not None:
            self.metrics.action_latency.observe(max(0.0, record.acted_at - record.decided_at))
        if record.outcome == Outcome.FAILED:
            self.metrics.actions_failed.labels(record.cluster, record.action).inc()
        level = logging.WARNING if record.outcome == Outcome.FAILED else logging.INFO
        log.log(level, "action %s %s/%s: %s (%s)", record.action, record.cluster, record.workload, record.outcome,
                record.detail)  # fmt: skip

    # -- approve mode ---------------------------------------------------------------------------

    def answer(self, record_id: str, verdict: str, by: str, identity: str, note: str = "") -> AuditRecord:
        """An operator's ``approved``/``rejected``; raises ``ApprovalConflict`` unless the record waits.

        An approved record is written ``pending`` before this returns (so a crash retries it like any
        other); the caller runs ``act`` on it, or ``submit`` hands it to the loop.
        """
        record = self.store.record(record_id)
        if record is None:
            raise KeyError(record_id)
        if approval.is_expired(record, self.clock.now()):
            self._settle(record, "expired", "clock", "approval timeout")
            raise approval.ApprovalConflict(f"decision {record_id} expired before it was {verdict}")
        return self._settle(record, verdict, by, identity, note)

    def expire_due(self) -> list[AuditRecord]:
        """Expire every wait past its deadline: recorded ``expired``, nothing done."""
        query = RecordQuery(outcome=Outcome.AWAITING, limit=1000)
        due = [r for r in self.store.records(query) if approval.is_expired(r, self.clock.now())]
        expired = []
        for record in due:
            with contextlib.suppress(approval.ApprovalConflict):
                expired.append(self._settle(record, "expired", "clock", "approval timeout"))
        return expired

    def _settle(self, record: AuditRecord, verdict: str, by: str, identity: str, note: str = "") -> AuditRecord:
        settled = approval.settle(record, verdict, by, identity, self.clock.now(), note)
        if not self.store.update_outcome_if(settled, Outcome.AWAITING):
            raise approval.ApprovalConflict(f"decision {record.id} was answered by someone else first")
        self._publish(settled)
        self.metrics.decisions.labels(settled.cluster, settled.action, settled.mode, settled.outcome).inc()
        log.warning("decision %s %s by %s (%s)", settled.id, verdict, by, identity)
        return settled

    def submit(self, record: AuditRecord) -> None:
        """Hand an approved (``pending``) record to the loop's action tasks (thread-safe)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._spawn, record)

    def resume_pending(self) -> list[AuditRecord]:
        """After a restart: finish actions that were started but not recorded as finished."""
        return [self.act(record) for record in self.store.pending_records()]

    # -- background loop ------------------------------------------------------------------------

    def wake(self) -> None:
        """Tell the loop incidents were opened (thread-safe), if one falls due before it wakes anyway."""
        if self._loop is not None and self.clock.now() + self.settings.correlation_window_s < self._sleep_until:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        """Decide incidents as their windows close, until cancelled; no storage fault ends it."""
        self._loop = asyncio.get_running_loop()
        for record in await retry(self.health, "resuming pending actions", self._pending):
            self._spawn(record)
        while True:
            await retry(self.health, "a decision pass", self._pass)

    async def _pending(self) -> list[AuditRecord]:
        return await to_thread.run_sync(self.store.pending_records)

    async def _pass(self) -> None:
        self._sleep_until = math.inf  # not waiting: any wake counts until the wait below is planned
        await to_thread.run_sync(self.expire_due)  # approve mode's waits, checked every second at most
        if self.clock.now() - self._clean_checked >= CLEAN_CHECK_S:
            self._clean_checked = self.clock.now()
            for record in await to_thread.run_sync(self.check_clean_runs):
                if record.outcome == Outcome.PENDING:
                    self._spawn(record)
        deadline = await to_thread.run_sync(self.store.next_deadline)
        delay = 1.0 if deadline is None else min(1.0, deadline - self.clock.now())
        if delay > 0:
            self._sleep_until = self.clock.now() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self._wake.clear()
            return
        for record in await to_thread.run_sync(self.decide_due):
            if record.outcome == Outcome.PENDING:
                self._spawn(record)

    def _spawn(self, record: AuditRecord) -> None:
        task = asyncio.create_task(self._act_async(record))
        self._actions.add(task)
        task.add_done_callback(self._actions.discard)

    async def _act_async(self, record: AuditRecord) -> None:
        for pause in acting.pauses():
            async with self._slots:
                try:
                    record = await to_thread.run_sync(self.act, record)
                except Exception:
                    log.exception("action for %s failed unexpectedly; it stays pending", record.id)
                    return
            if record.outcome != Outcome.PENDING:
                return
            with contextlib.suppress(TimeoutError):  # the pause before the next try; a shutdown ends it
                await asyncio.wait_for(self._stopping.wait(), timeout=pause)
            if self._stopping.is_set():
                return  # still pending: the next start resumes it

    async def drain(self) -> None:
        """At shutdown: wait for the scheduler calls in flight; actions waiting to be tried again stay pending."""
        self._stopping.set()
        if self._actions:
            await asyncio.gather(*self._actions, return_exceptions=True)
