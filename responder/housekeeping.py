"""The responder's periodic housekeeping beside the decision loop: retention (``responder.store.retention``).

It runs in a worker thread on its own SQLite connection, every ``retention.interval_s``, and a failure
is logged and retried at the next interval: housekeeping never stops the responder.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.concurrency import run_in_threadpool

from responder.services import Services
from responder.store.retention import prune

log = logging.getLogger(__name__)


async def retention_loop(svc: Services) -> None:
    settings = svc.settings.retention
    if not settings.enabled or str(svc.settings.db_path) == ":memory:" or svc.settings.store.url is not None:
        return
    while True:
        try:
            result = await run_in_threadpool(prune, svc.settings.db_path, settings, svc.clock.now())
        except Exception:
            log.exception("retention failed; retrying in %gs", settings.interval_s)
        else:
            if result.records or result.incidents:
                log.info("retention: deleted %d records, %d incidents, %d alerts before %s (%d exported)",
                         result.records, result.incidents, result.alerts, result.horizon, result.exported)  # fmt: skip
        await asyncio.sleep(settings.interval_s)
