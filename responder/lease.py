"""Replicas: every one ingests, only the holder of the lease decides and acts (docs/ha.md).

``lead`` runs in place of the decision loop when the store is shared (``store.url``): it tries for the
lease every ``poll_s``; once granted it runs ``Engine.run`` (which first finishes the ``pending``
actions a dead leader left) and renews every ``renew_s``; when a renewal fails, or none succeeded for
most of ``lease_s``, it stops the loop and is a follower again. What makes a late, deposed leader
harmless is in the store (the term fence): ``FencedScheduler`` claims each action for the current term
in the database before the scheduler is called, and an outcome or a decision written under an old term
does not count. With SQLite (one process) there is no lease and the loop just runs.

``/healthz`` shows the lease (``Leadership.status``); ``trainguard_responder_leader`` is 1 on the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Protocol

from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter, Gauge

from responder.clock import Clock
from responder.model import AuditRecord
from responder.schedulers.base import ActionRequest, ActionResult, Scheduler, SchedulerError, WorkloadObservation
from responder.settings import Settings
from responder.store import AuditStore
from responder.store.config import StoreSettings
from responder.supervisor import LoopHealth, retry

log = logging.getLogger(__name__)

ORPHAN_CHECK_S = 5.0  # how often the leader looks for pending records no action of its term claimed
ORPHAN_AGE_S = 30.0  # ... that are at least this old (its own are claimed within moments)


class Lease(Protocol):
    holder: str
    settings: StoreSettings

    def try_acquire(self) -> int | None: ...
    def renew(self) -> bool: ...
    def claim(self, key: str) -> bool: ...
    def orphans(self, before: float) -> list[AuditRecord]: ...
    def current(self) -> dict[str, Any] | None: ...
    def close(self) -> None: ...


class Leadership:
    """This replica's side of the lease: its role, term and since when; exported as metrics."""

    def __init__(self, lease: Lease, clock: Clock, registry: CollectorRegistry) -> None:
        self.lease = lease
        self.clock = clock
        self.role = "follower"
        self.term: int | None = None
        self.since = clock.now()
        self.last_renewed: float | None = None
        self._leader = Gauge(
            "trainguard_responder_leader", "1 while this replica holds the decision lease (decides and acts)",
            registry=registry,
        )  # fmt: skip
        self._term = Gauge(
            "trainguard_responder_lease_term", "The lease term this replica last held", registry=registry
        )
        self._changes = Counter(
            "trainguard_responder_leader_changes_total", "Times this replica took or lost the lease", registry=registry
        )

    def became(self, role: str, term: int | None = None) -> None:
        if role == self.role:
            return
        self.role, self.since = role, self.clock.now()
        self._leader.set(1 if role == "leader" else 0)
        self._changes.inc()
        if term is not None:
            self.term = term
            self._term.set(term)
            self.last_renewed = self.since
        log.warning("decision lease: %s is now %s (term %s)", self.lease.holder, role, self.term)

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "holder": self.lease.holder,
            "term": self.term,
            "since": self.since,
            "last_renewed": self.last_renewed,
            "lease_s": self.lease.settings.lease_s,
        }


async def lead(
    leadership: Leadership,
    health: LoopHealth,
    run: Callable[[], Coroutine[Any, Any, None]],
    submit: Callable[[AuditRecord], None],
) -> None:
    """Follow until the lease is granted, lead (``run``) while it is renewed; repeat until cancelled.

    While leading, ``pending`` records that no action of this term claimed for ``ORPHAN_AGE_S`` (an
    approval answered on a follower) are handed to ``submit``; the adapters' idempotency per attempt
    makes a rare second call for one the loop had queued harmless.
    """
    lease, settings = leadership.lease, leadership.lease.settings
    try:
        while True:
            # PostgreSQL out of reach: a follower still, logged, counted and retried with backoff; a
            # follower's pass is a successful look at the lease (the loop's health, /healthz).
            term = await retry(health, "taking the decision lease", partial(to_thread.run_sync, lease.try_acquire))
            if term is None:
                await asyncio.sleep(settings.poll_s)
                continue
            leadership.became("leader", term)
            await _lead_while_renewed(leadership, run, submit)
            leadership.became("follower")
    finally:
        await to_thread.run_sync(lease.close)


async def _lead_while_renewed(
    leadership: Leadership, run: Callable[[], Coroutine[Any, Any, None]], submit: Callable[[AuditRecord], None]
) -> None:
    lease, settings = leadership.lease, leadership.lease.settings
    loop = asyncio.create_task(run(), name="trainguard-decisions")
    checked = leadership.clock.now()
    try:
        while not loop.done():
            await asyncio.sleep(settings.renew_s)
            if not await to_thread.run_sync(lease.renew):
                log.error("decision lease: renewal failed; stepping down")
                return
            now = leadership.last_renewed = leadership.clock.now()
            if now - checked >= ORPHAN_CHECK_S:
                checked = now
                for record in await to_thread.run_sync(lease.orphans, time.time() - ORPHAN_AGE_S):
                    log.warning("decision lease: carrying out %s, made pending on another replica", record.id)
                    submit(record)
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await loop
        await to_thread.run_sync(lease.close)  # let the lock go now, not when the session times out


class FencedScheduler:
    """A scheduler whose every action is first claimed in the database for the current lease term."""

    def __init__(self, inner: Scheduler, lease: Lease) -> None:
        self.inner = inner
        self.lease = lease
        self.name = getattr(inner, "name", "scheduler")

    def act(self, request: ActionRequest) -> ActionResult:
        key = f"{request.incident_id}/{request.action}/{request.node or ''}"
        if not self.lease.claim(key):
            raise SchedulerError(f"not the leader any more: action {key} is left to the current leader")
        return self.inner.act(request)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return self.inner.observe(cluster, workload)


def open_store(settings: Settings) -> tuple[AuditStore, Lease | None]:
    """The configured store: SQLite at ``db_path`` (no lease), or PostgreSQL with its lease."""
    if settings.store.url is None:
        from responder.store.sqlite import SqliteStore  # noqa: PLC0415

        return SqliteStore(settings.db_path, settings.store_busy_timeout_s), None
    from responder.store.pg_lease import PostgresLease  # noqa: PLC0415 - psycopg only when configured
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    store = PostgresStore(settings.store.url, settings.store_busy_timeout_s, settings.store.connect_timeout_s)
    return store, PostgresLease(store, settings.store)
