"""The audit mirror: every audit record (decisions and refusals) also goes to Loki or VictoriaLogs.

``LokiMirror.submit`` is an engine sink: it turns the record into one log entry and puts it on a
bounded in-memory queue, nothing more, so a slow or absent Loki never delays a decision. A worker
thread takes entries off the queue in batches and ships them with the JSON push API
(``POST /loki/api/v1/push``, Loki's JSON push format), gzip-compressed by default.

When a push fails with a 5xx, a 429, a 408/401/403/404 (a proxy or configuration problem an
operator can fix) or a transport error, the batch is written to an on-disk spool (a directory of
JSON push bodies, oldest first) and retried with capped exponential backoff and jitter, honouring
``Retry-After``; batches that arrive meanwhile join the spool behind it, so order is kept. The
spool is bounded in bytes and files: past the bound a batch is dropped, with an error log that
names the records (they stay in the audit store, so they can be replayed from there) and the
``trainguard_responder_loki_dropped_total{reason="spool_full"}`` counter. A spool left by a
previous run is replayed at start. Any other 4xx means Loki will never take the batch (too old,
line too long, bad labels): it is dropped with ``reason="rejected"``.

Stream labels are few and bounded: ``app``, ``kind`` (``audit``), ``cluster``, ``action``,
``mode``, ``failure_class`` and any static labels configured. Workload, nodes, incident and record
ids go in the JSON line (the full record, docs/interfaces.md §5) and in structured metadata (Loki 3.x).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field, field_validator

from responder.model import AuditRecord
from trainguard.identity import IdentityError, validate_cluster

log = logging.getLogger(__name__)

LOKI_PUSH_PATH = "/loki/api/v1/push"
VICTORIALOGS_PUSH_PATH = "/insert/loki/api/v1/push"
BASE_LABELS = ("app", "kind", "cluster", "action", "mode", "failure_class")
METADATA_KEYS = ("record_id", "record_kind", "incident_id", "workload", "attempt", "outcome", "nodes", "patterns")
INVALID_CLUSTER = "_invalid"
RETRYABLE_4XX = frozenset({401, 403, 404, 408, 429})
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METADATA_VALUE_MAX = 1024
_POLL_S = 0.2  # how often an idle worker looks at the stop flag


class LokiSettings(BaseModel):
    """Where and how the audit trail is mirrored. Absent (``loki: null``): no mirror."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="base URL of Loki (http://loki:3100) or VictoriaLogs (http://vlogs:9428)")
    target: Literal["loki", "victorialogs"] = Field(
        "loki", description="loki: POST /loki/api/v1/push; victorialogs: POST /insert/loki/api/v1/push"
    )
    tenant: str | None = Field(None, description="Loki tenant, sent as X-Scope-OrgID (multi-tenant Loki)")
    account_id: int | None = Field(None, ge=0, description="VictoriaLogs AccountID header (its tenancy)")
    project_id: int | None = Field(None, ge=0, description="VictoriaLogs ProjectID header")
    labels: dict[str, str] = Field(
        default_factory=dict, description="static stream labels added to every entry, e.g. {env: prod}"
    )
    gzip: bool = Field(True, description="send bodies with Content-Encoding: gzip")
    timeout_s: float = Field(5.0, gt=0, description="timeout of one push request")
    batch_max_records: int = Field(200, ge=1, le=10_000, description="most audit records in one push")
    batch_max_bytes: int = Field(1_000_000, ge=10_000, description="most line bytes in one push")
    batch_wait_s: float = Field(1.0, ge=0, le=60, description="wait this long for more records before a push")
    queue_max_records: int = Field(10_000, ge=1, description="records waiting in memory before drops")
    spool_dir: Path | None = Field(None, description="on-disk spool; default: <db_path>.loki-spool/")
    spool_max_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="spool size bound in bytes")
    spool_max_files: int = Field(10_000, ge=1, description="spool size bound in batches (files)")
    backoff_initial_s: float = Field(0.5, gt=0, description="first retry delay after a failed push")
    backoff_max_s: float = Field(60.0, gt=0, description="longest retry delay")
    max_line_bytes: int = Field(200_000, ge=4096, description="longer lines drop evidence items (Loki: 256KB)")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _LABEL_NAME.fullmatch(name) or name in BASE_LABELS:
                raise ValueError(f"label {name!r}: a Prometheus-style name, not one of {', '.join(BASE_LABELS)}")
        if len(value) + len(BASE_LABELS) > 15:
            raise ValueError("Loki 3 accepts at most 15 labels per stream")
        return value

    def push_url(self) -> str:
        return self.url + (VICTORIALOGS_PUSH_PATH if self.target == "victorialogs" else LOKI_PUSH_PATH)

    def push_params(self) -> dict[str, str]:
        if self.target == "victorialogs":
            return {"_stream_fields": ",".join([*BASE_LABELS, *sorted(self.labels)])}
        return {}

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "trainguard-responder"}
        if self.gzip:
            headers["Content-Encoding"] = "gzip"
        if self.tenant:
            headers["X-Scope-OrgID"] = self.tenant
        if self.account_id is not None:
            headers["AccountID"] = str(self.account_id)
        if self.project_id is not None:
            headers["ProjectID"] = str(self.project_id)
        return headers


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: its stream labels, timestamp (ns, as a string), line and structured metadata."""

    labels: tuple[tuple[str, str], ...]
    ts: str
    line: str
    metadata: dict[str, str]
    record_id: str


def entry_for(record: AuditRecord, static_labels: dict[str, str] | None = None, max_line: int = 200_000) -> Entry:
    """The log entry of one audit record; updates of a record (pending -> done) are new entries."""
    try:
        cluster = validate_cluster(record.cluster)
    except IdentityError:
        cluster = INVALID_CLUSTER  # a refusal of hostile labels: keep them out of the stream labels
    labels = {
        "app": "trainguard",
        "kind": "audit",
        "cluster": cluster,
        "action": record.action,
        "mode": record.mode,
        "failure_class": record.failure_class,
        **(static_labels or {}),
    }
    body = record.to_json()
    line = json.dumps(body, separators=(",", ":"))
    dropped = 0
    while len(line.encode()) > max_line and body["evidence"]:
        keep = len(body["evidence"]) // 2
        dropped += len(body["evidence"]) - keep
        body["evidence"] = body["evidence"][:keep]
        body["evidence_truncated"] = dropped
        line = json.dumps(body, separators=(",", ":"))
    nodes = sorted({*record.implicated_nodes, *record.excluded_nodes, *([record.node] if record.node else [])})
    metadata = {
        "record_id": record.id,
        "record_kind": record.kind,
        "incident_id": record.incident_id or "",
        "workload": record.workload,
        "attempt": record.attempt or "",
        "outcome": record.outcome,
        "nodes": ",".join(nodes),
        "patterns": ",".join(record.patterns),
    }
    when = max(record.time, record.acted_at or 0.0)
    return Entry(
        labels=tuple(sorted(labels.items())),
        ts=str(round(when * 1e9)),
        line=line,
        metadata={k: v[:_METADATA_VALUE_MAX] for k, v in metadata.items() if v},
        record_id=record.id,
    )


def push_body(entries: Iterable[Entry]) -> dict[str, Any]:
    """The JSON push body: one stream per label set, values ``[ts, line, metadata]``."""
    streams: dict[tuple[tuple[str, str], ...], list[list[Any]]] = {}
    for entry in entries:
        streams.setdefault(entry.labels, []).append([entry.ts, entry.line, entry.metadata])
    return {"streams": [{"stream": dict(labels), "values": values} for labels, values in streams.items()]}


class LokiMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(f"trainguard_responder_loki_{name}", doc, labels, registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"trainguard_responder_loki_{name}", doc, registry=registry)

        self.pushed = counter("pushed_total", "Audit records Loki accepted")
        self.failures = counter(
            "push_failures_total", "Failed push requests, by reason: http_5xx, http_429, http_4xx, transport", "reason"
        )
        self.spooled = counter("spooled_total", "Audit records written to the on-disk spool")
        self.dropped = counter(
            "dropped_total",
            "Audit records not mirrored, by reason: queue_full, spool_full, rejected (a 4xx Loki will not take)",
            "reason",
        )
        self.queue_depth = gauge("queue_depth", "Audit records waiting in memory for a push")
        self.spool_bytes = gauge("spool_bytes", "Bytes of audit batches waiting in the spool")
        self.spool_files = gauge("spool_files", "Audit batches waiting in the spool")


class _PushFailed(Exception):
    def __init__(self, reason: str, retry: bool, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.retry = retry
        self.detail = detail
        self.retry_after = retry_after


class LokiMirror:
    """Mirror audit records to Loki: ``submit`` enqueues, a worker thread batches, ships and spools."""

    def __init__(
        self,
        settings: LokiSettings,
        spool_dir: Path,
        registry: CollectorRegistry,
        *,
        transport: httpx.BaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.spool_dir = settings.spool_dir or spool_dir
        self.metrics = LokiMetrics(registry)
        self._queue: queue.Queue[Entry] = queue.Queue(maxsize=settings.queue_max_records)
        self._client = httpx.Client(timeout=settings.timeout_s, transport=transport)
        self._monotonic = monotonic
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spool: list[tuple[Path, int]] = []  # (file, bytes), oldest first
        self._seq = 0
        self._failures = 0
        self._next_try = 0.0
        self._pending = 0  # entries submitted, not yet pushed, spooled or dropped
        self._settled = threading.Condition()
        self.metrics.queue_depth.set_function(self._queue.qsize)
        self.metrics.spool_files.set_function(lambda: len(self._spool))
        self.metrics.spool_bytes.set_function(lambda: sum(size for _, size in self._spool))

    # -- the engine's side ------------------------------------------------------------------------

    def submit(self, record: AuditRecord) -> None:
        """Engine sink: queue the record's entry and return at once. Never raises, never blocks."""
        try:
            entry = entry_for(record, self.settings.labels, self.settings.max_line_bytes)
        except Exception:
            log.exception("audit record %s could not be turned into a Loki entry", record.id)
            self.metrics.dropped.labels("rejected").inc()
            return
        with self._settled:
            self._pending += 1
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self._done(1)
            self.metrics.dropped.labels("queue_full").inc()
            log.error(
                "Loki mirror queue full (%d records): audit record %s not mirrored (it is in the audit store)",
                self.settings.queue_max_records, record.id,
            )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the spool a previous run left (replayed first) and start the worker thread."""
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        for tmp in self.spool_dir.glob("*.tmp"):
            tmp.unlink(missing_ok=True)  # a write a crash interrupted; its batch was never acknowledged
        self._spool = sorted((p, p.stat().st_size) for p in self.spool_dir.glob("*.json"))
        if self._spool:
            log.warning("Loki mirror: replaying %d spooled batch(es) from %s", len(self._spool), self.spool_dir)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="trainguard-loki-mirror", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ship (or spool) what is queued, then stop the worker. Blocks at most about ``timeout``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._client.close()

    def wait_idle(self, timeout: float) -> bool:
        """True once every submitted record was pushed (or dropped) and the spool is empty."""
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0 and not self._spool, timeout)

    def wait_handled(self, timeout: float) -> bool:
        """True once every submitted record was pushed, spooled or dropped (none left in memory)."""
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0, timeout)

    def _done(self, count: int) -> None:
        with self._settled:
            self._pending -= count
            self._settled.notify_all()

    # -- the worker ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            try:
                self._step(stopping)
            except Exception:  # the mirror must outlive any surprise; the audit store has the records
                log.exception("Loki mirror: unexpected error; going on")
                self._stop.wait(1.0)
            if stopping and self._queue.empty():
                return

    def _step(self, stopping: bool) -> None:
        batch = self._collect(0.0 if stopping else self._wait_for_first())
        if batch:
            try:
                self._ship_new(batch)
            finally:
                self._done(len(batch))
        if self._spool and self._monotonic() >= self._next_try and not stopping:
            self._replay_oldest()
            self._done(0)

    def _wait_for_first(self) -> float:
        if self._spool:
            return max(0.0, min(_POLL_S, self._next_try - self._monotonic()))
        return _POLL_S

    def _collect(self, first_wait: float) -> list[Entry]:
        """Up to one batch: wait ``first_wait`` for a first entry, then ``batch_wait_s`` for more."""
        s = self.settings
        try:
            first = self._queue.get(timeout=first_wait) if first_wait > 0 else self._queue.get_nowait()
        except queue.Empty:
            return []
        batch, size = [first], len(first.line)
        deadline = self._monotonic() + (0.0 if self._stop.is_set() else s.batch_wait_s)
        while len(batch) < s.batch_max_records and size < s.batch_max_bytes:
            left = deadline - self._monotonic()
            try:
                entry = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            batch.append(entry)
            size += len(entry.line)
        return batch

    def _ship_new(self, batch: list[Entry]) -> None:
        body = json.dumps(push_body(batch), separators=(",", ":")).encode()
        ids = [e.record_id for e in batch]
        if self._spool or self._monotonic() < self._next_try:
            self._spool_write(body, ids)  # behind the backlog: keeps the order, waits for the backoff
            return
        try:
            self._push(body)
        except _PushFailed as exc:
            self._failed(exc, len(batch))
            if exc.retry:
                self._spool_write(body, ids)
            else:
                self._reject(exc, ids)
        else:
            self._succeeded(len(batch))

    def _replay_oldest(self) -> None:
        path = self._spool[0][0]
        try:
            body = path.read_bytes()
            count = sum(len(s["values"]) for s in json.loads(body)["streams"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("Loki mirror: unreadable spool file %s dropped: %s", path, exc)
            self._spool_remove(0)
            self.metrics.dropped.labels("rejected").inc()
            return
        try:
            self._push(body)
        except _PushFailed as exc:
            self._failed(exc, count)
            if not exc.retry:
                self._reject(exc, [path.name])
                self._spool_remove(0)
            return
        self._spool_remove(0)
        self._succeeded(count)
        if not self._spool:
            log.warning("Loki mirror: spool replayed, Loki is taking audit records again")

    def _push(self, body: bytes) -> None:
        s = self.settings
        content = gzip.compress(body, compresslevel=5) if s.gzip else body
        try:
            response = self._client.post(s.push_url(), params=s.push_params(), headers=s.headers(), content=content)
        except httpx.HTTPError as exc:
            raise _PushFailed("transport", True, f"{type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if 200 <= status < 300:
            return
        detail = f"HTTP {status}: {response.text[:300]}"
        retry_after = _retry_after(response.headers.get("retry-after"))
        if status >= 500:
            raise _PushFailed("http_5xx", True, detail, retry_after)
        if status == 429:
            raise _PushFailed("http_429", True, detail, retry_after)
        raise _PushFailed("http_4xx", status in RETRYABLE_4XX, detail, retry_after)

    def _succeeded(self, count: int) -> None:
        self.metrics.pushed.inc(count)
        self._failures = 0
        self._next_try = 0.0

    def _failed(self, exc: _PushFailed, count: int) -> None:
        self.metrics.failures.labels(exc.reason).inc()
        if not exc.retry:
            return
        self._failures += 1
        s = self.settings
        delay = min(s.backoff_max_s, s.backoff_initial_s * 2 ** min(self._failures - 1, 30))
        delay = self._rng.uniform(delay / 2, delay)  # jitter: many responders do not retry in step
        if exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, s.backoff_max_s))
        self._next_try = self._monotonic() + delay
        log.warning(
            "Loki mirror: push of %d record(s) failed (%s); retry %d in %.1fs", count, exc.detail, self._failures, delay
        )

    def _reject(self, exc: _PushFailed, ids: list[str]) -> None:
        self.metrics.dropped.labels("rejected").inc(len(ids))
        log.error("Loki mirror: Loki rejected %d record(s) for good (%s): %s", len(ids), exc.detail, _ids(ids))

    # -- the spool ------------------------------------------------------------------------------

    def _spool_write(self, body: bytes, ids: list[str]) -> None:
        s = self.settings
        used = sum(size for _, size in self._spool)
        if len(self._spool) + 1 > s.spool_max_files or used + len(body) > s.spool_max_bytes:
            self.metrics.dropped.labels("spool_full").inc(len(ids))
            log.error(
                "Loki mirror: spool %s is full (%d files, %d of %d bytes): %d audit record(s) not mirrored,"
                " still in the audit store: %s",
                self.spool_dir, len(self._spool), used, s.spool_max_bytes, len(ids), _ids(ids),
            )  # fmt: skip
            return
        self._seq += 1
        path = self.spool_dir / f"{time.time_ns():020d}-{self._seq:06d}.json"
        tmp = path.with_suffix(".tmp")
        try:
            with tmp.open("wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            tmp.rename(path)
        except OSError as exc:
            self.metrics.dropped.labels("spool_full").inc(len(ids))
            log.error("Loki mirror: cannot write spool file %s (%s): %s not mirrored", path, exc, _ids(ids))
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        self._spool.append((path, len(body)))
        self.metrics.spooled.inc(len(ids))

    def _spool_remove(self, index: int) -> None:
        path, _ = self._spool.pop(index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from Loki; the backoff applies


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
