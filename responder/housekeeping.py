"""The responder's periodic housekeeping beside the decision loop: retention (``responder.store.retention``).

It runs in a worker thread on its own connection, every ``retention.interval_s``, and a failure is
logged and retried at the next interval: housekeeping never stops the responder.

With replicas (``store.url``) only the holder of the decision lease prunes, so the export lands where
the decisions are made and followers leave the database alone. The lease is not what keeps two
prunes apart (a deposed leader may still be in the middle of one): retention's own advisory lock does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from responder.services import Services
from responder.store.retention import PruneResult, prune, prune_postgres

log = logging.getLogger(__name__)


def _pruner(svc: Services) -> Callable[[float], PruneResult] | None:
    """Retention for the configured store, given the time; None when it is off or the store is in memory."""
    settings = svc.settings
    if not settings.retention.enabled:
        return None
    busy = settings.store_busy_timeout_s
    if settings.store.url is not None:
        url, connect = settings.store.url, settings.store.connect_timeout_s
        return lambda now: prune_postgres(url, settings.retention, now, busy, connect)
    if str(settings.db_path) == ":memory:":
        return None
    return lambda now: prune(settings.db_path, settings.retention, now, busy)


async def retention_loop(svc: Services) -> None:
    run = _pruner(svc)
    if run is None:
        return
    interval = svc.settings.retention.interval_s
    while True:
        if svc.leadership is None or svc.leadership.role == "leader":
            try:
                _report(await run_in_threadpool(run, svc.clock.now()))
            except Exception:
                log.exception("retention failed; retrying in %gs", interval)
        await asyncio.sleep(interval)


def _report(result: PruneResult) -> None:
    if result.records or result.incidents:
        log.info("retention: deleted %d records, %d incidents, %d alerts before %s (%d exported)",
                 result.records, result.incidents, result.alerts, result.horizon, result.exported)  # fmt: skip
    if result.contended:
        log.info("retention: another replica is pruning; the rest is left to it")
