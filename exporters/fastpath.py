"""The fast path: critical signals posted straight to Alertmanager's v2 API.

A page should not wait for a scrape and a rule evaluation. The exporter posts the alert the Prometheus
rule would raise, with the same labels, so Alertmanager deduplicates the two. The log loop only puts
the alert on a bounded queue (dropping, and counting, when it is full); one sender thread posts batches
with httpx. A label set already posted is not posted again within ``resend_interval``; each post says
``endsAt`` = now + ``alert_ttl`` so the alert resolves by itself when the fault stops repeating.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import httpx

from responder.clock import format_rfc3339

log = logging.getLogger("trainguard.exporter")

# The alert names of the Prometheus rules these posts stand in for (alert_rules/log_patterns.yml,
# alert_rules/training_progress.yml): same alertname, same labels, so Alertmanager merges the two.
LOG_PATTERN_ALERTS: Final = {
    "infra_gpu": "TrainguardLogInfraGpu",
    "infra_network": "TrainguardLogInfraNetwork",
    "infra_node": "TrainguardLogInfraNode",
    "collective_timeout": "TrainguardLogCollectiveTimeout",
    "app_error": "TrainguardLogAppError",
}
RANK_GONE_ALERT: Final = "TrainguardRankCrashed"


class FastPath:
    def __init__(
        self,
        url: str,
        client: httpx.Client | None = None,
        resend_interval: float = 60.0,
        alert_ttl: float = 300.0,
        queue_size: int = 1000,
        clock: Callable[[], float] = time.time,
        generator_url: str = "",
    ) -> None:
        self.endpoint = url.rstrip("/") + "/api/v2/alerts"
        self.client = client or httpx.Client(timeout=5.0)
        self.resend_interval = resend_interval
        self.alert_ttl = alert_ttl
        self.clock = clock
        self.generator_url = generator_url
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=queue_size)
        self.stats = {"sent": 0, "failed": 0, "dropped": 0, "deduplicated": 0}
        self._last: dict[frozenset[tuple[str, str]], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def note_repeats(self, n: int) -> None:
        """``n`` more submits of an alert just submitted, folded by the caller: counted as deduplicated."""
        with self._lock:
            self.stats["deduplicated"] += n

    def submit(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
        """Queue one alert; never blocks. False when deduplicated or dropped."""
        clean = {k: v for k, v in labels.items() if v}  # Alertmanager drops empty labels; so do we
        key = frozenset(clean.items())
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.resend_interval:
                self.stats["deduplicated"] += 1
                return False
            if len(self._last) > 10_000:
                self._last = {k: t for k, t in self._last.items() if now - t < self.resend_interval}
            self._last[key] = now
        alert = {
            "labels": clean,
            "annotations": dict(annotations),
            "startsAt": format_rfc3339(now),
            "endsAt": format_rfc3339(now + self.alert_ttl),
            "generatorURL": self.generator_url,
        }
        try:
            self.queue.put_nowait(alert)
        except queue.Full:
            with self._lock:
                self.stats["dropped"] += 1
                del self._last[key]
            return False
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fastpath", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set() or not self.queue.empty():
            try:
                batch = [self.queue.get(timeout=0.2)]
            except queue.Empty:
                continue
            while len(batch) < 100:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            self.send(batch)

    def send(self, batch: list[dict[str, Any]]) -> bool:
        for attempt in range(2):
            try:
                r = self.client.post(self.endpoint, json=batch)
            except httpx.HTTPError as exc:
                error = str(exc)
            else:
                if r.is_success:
                    with self._lock:
                        self.stats["sent"] += len(batch)
                    return True
                error = f"HTTP {r.status_code}"
                if r.status_code < 500:
                    break
            if attempt == 0 and self._stop.wait(0.5):
                break
        with self._lock:
            self.stats["failed"] += len(batch)
        log.warning("fast path: posting %d alerts to %s failed: %s", len(batch), self.endpoint, error)
        return False
