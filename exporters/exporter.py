"""``trainguard exporter``: one process per node that serves ``/metrics``.

It follows the training logs and the kernel log, counts catalog matches per identity, reads the progress
hook's state files at each scrape, optionally collects NVML GPU faults, and optionally posts critical
signals straight to Alertmanager. Everything is wired here with its dependencies passed in: the
registry (never prometheus_client's global one), the catalog, the NVML module, the fast-path sender and
the clock.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from exporters.events import Finding
from exporters.exposition import MetricsApp, serve_metrics
from exporters.fastpath import LOG_PATTERN_ALERTS, RANK_GONE_ALERT, FastPath
from exporters.logs import Follower, KmsgSource, LogSource
from exporters.metrics import PatternCounters, SafeCollector, StatsCollector
from exporters.nvml import NvmlCollector
from exporters.patterns import Matcher, Pattern, StreamScanner, line_host, line_rank, load_catalog
from exporters.state import (
    Identity,
    ProgressCollector,
    ProgressTracker,
    Transition,
    compile_progress_patterns,
)
from trainguard.vocabulary import runbook_url

log = logging.getLogger("trainguard.exporter")

DEFAULT_PORT = 9481
DEFAULT_RANK_FROM_PATH = r"rank[-_.]?(\d+)"
# Between polls the open log files are read this often (a pread each, no glob, no state files): a line
# is counted within this long of its write; new and rotated files wait for the next poll.
LOG_CHECK_S = 0.25


@dataclass
class ExporterConfig:
    cluster: str
    host: str
    listen: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    log_globs: list[str] = field(default_factory=list)
    kernel_log: str | None = None
    progress_dir: Path = Path("/tmp/trainguard-progress")  # noqa: S108 - the hook's documented default
    catalog: Path | None = None
    poll_interval: float = 1.0
    from_start: bool = False
    rank_from_path: str | None = DEFAULT_RANK_FROM_PATH
    progress_patterns: list[str] = field(default_factory=list)
    workload: str | None = None
    scheduler: str | None = None
    attempt: str | None = None
    alertmanager_url: str | None = None
    nvml: bool = True
    max_identities: int = 1024
    state_ttl: float = 3600.0
    # A kernel line (XID) counts for ranks gone this recently too: the fault that logs it kills them.
    kernel_linger_s: float = 60.0


@dataclass
class _FileContext:
    workload: tuple[str, str, str]
    rank: str
    host: str


def _page_summary(pattern_id: str, ident: Identity) -> str:
    """``xid_79_fallen_off_bus in 7 rank 1 on n2``; an empty label is left out, never printed blank."""
    words = [pattern_id]
    if ident.workload:
        words += ["in", ident.workload]
    if ident.rank:
        words += ["rank", ident.rank]
    return " ".join([*words, "on", ident.host])


class Exporter:
    def __init__(
        self,
        config: ExporterConfig,
        registry: CollectorRegistry,
        patterns: list[Pattern] | None = None,
        nvml_module: object | None = None,
        fastpath: FastPath | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.registry = registry
        self.clock = clock
        self.patterns = patterns if patterns is not None else load_catalog(config.catalog)
        self.matcher = Matcher(self.patterns)
        # one scanner per followed stream: it holds a multi-line event open across reads
        self.scanners: dict[tuple[str, int, int], tuple[Follower, StreamScanner]] = {}
        self.counters = PatternCounters(self.patterns, max_identities=config.max_identities)
        self.tracker = ProgressTracker(config.progress_dir, config.cluster, state_ttl=config.state_ttl, clock=clock)
        self.progress_rx = compile_progress_patterns(config.progress_patterns)
        self.rank_rx = re.compile(config.rank_from_path) if config.rank_from_path else None
        kernel_files = [config.kernel_log] if config.kernel_log and config.kernel_log != "/dev/kmsg" else []
        self.source = LogSource(
            list(config.log_globs), self.on_lines, from_start=config.from_start, kernel_files=kernel_files
        )
        self.kmsg = (
            KmsgSource(config.kernel_log, self.on_lines, self.source.stats)
            if config.kernel_log == "/dev/kmsg"
            else None
        )
        if fastpath is None and config.alertmanager_url:
            fastpath = FastPath(config.alertmanager_url)
        self.fastpath = fastpath
        self.matches = 0
        self.scrape_errors = 0
        self.nvml: NvmlCollector | None = None
        if config.nvml:
            xids = [p.xid for p in self.patterns if p.xid is not None and p.xid > 0]
            self.nvml = NvmlCollector(
                config.cluster,
                config.host,
                nvml_module,
                known_xids=xids,
                identity_for_gpu=self.tracker.identity_for_gpu,
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: object | None = None
        self.collectors: list[Collector] = [
            SafeCollector(c, self._scrape_error)
            for c in (self.counters, ProgressCollector(self.tracker), self.nvml)
            if c is not None
        ]
        self.collectors.append(StatsCollector(self.stats))
        for collector in self.collectors:
            registry.register(collector)

    # -- identity -------------------------------------------------------------------------------------
    def _default_workload(self) -> tuple[str, str, str]:
        c = self.config
        if c.workload:
            return (c.workload, c.scheduler or "", c.attempt or "0")
        workloads = {(i.workload, i.scheduler, i.attempt) for i in self.tracker.identities()}
        return workloads.pop() if len(workloads) == 1 else ("", "", "")

    def _context(self, f: Follower) -> _FileContext:
        host = self.config.host
        if f.kernel:
            return _FileContext(self._default_workload(), "", host)
        mapped = self.tracker.identities_for_stream(f.dev, f.ino)
        workloads = {(i.workload, i.scheduler, i.attempt) for i in mapped}
        workload = workloads.pop() if len(workloads) == 1 else self._default_workload()
        ranks = {i.rank for i in mapped}
        rank = ranks.pop() if len(ranks) == 1 else ""
        if not rank and self.rank_rx is not None:
            m = self.rank_rx.search(Path(f.path).name)
            if m and m.group(1) and m.group(1).isdigit():
                rank = str(int(m.group(1)))
        hosts = {i.host for i in mapped}
        return _FileContext(workload, rank, hosts.pop() if len(hosts) == 1 else host)

    def _identity(
        self, ctx: _FileContext, kernel: bool, line_rank: str | None = None, line_host: str | None = None
    ) -> Identity:
        """The line's own rank and host tokens win over the file's (never for kernel lines)."""
        rank, host = ctx.rank, ctx.host
        if not kernel:
            rank = line_rank or rank
            host = line_host or host
        return Identity(self.config.cluster, *ctx.workload, rank, host)

    # -- log loop -------------------------------------------------------------------------------------
    def _kernel_identities(self) -> list[Identity]:
        """A kernel line (an XID) hurts every workload running on this node: count it for each one live
        or gone within ``kernel_linger_s`` (its rank may die in the same poll that reads the line), rank ""
        (node level); with none, under the node alone (workload "")."""
        c = self.config
        if c.workload:
            return [Identity(c.cluster, c.workload, c.scheduler or "", c.attempt or "0", "", c.host)]
        recent = self.tracker.recent_identities(c.kernel_linger_s)
        live = sorted({(i.workload, i.scheduler, i.attempt) for i in recent})
        return [Identity(c.cluster, *w, "", c.host) for w in live] or [Identity(c.cluster, "", "", "", "", c.host)]

    def on_lines(self, f: Follower, data: bytes) -> None:
        key = (f.path, f.dev, f.ino)
        entry = self.scanners.get(key)
        if entry is None or entry[0] is not f:
            entry = self.scanners[key] = (f, StreamScanner(self.matcher, collapse=True))
        self._count(f, entry[1].feed(data))
        if self.progress_rx is not None and not f.kernel:
            self._parse_progress(self._context(f), data)

    def flush_idle(self, now: float | None = None) -> None:
        """Finish multi-line events whose stream went quiet; forget the scanners of closed files."""
        open_files = {id(f) for f in self.source.files.values()}
        if self.kmsg is not None and self.kmsg.follower is not None:
            open_files.add(id(self.kmsg.follower))
        for key, (f, sc) in list(self.scanners.items()):
            gone = id(f) not in open_files
            found = sc.flush() if gone else sc.due(now)
            if found:
                self._count(f, found)
            if gone:
                del self.scanners[key]

    def next_deadline(self) -> float | None:
        """The monotonic time the next held event is due (None: nothing held)."""
        deadlines = [d for _, sc in self.scanners.values() if (d := sc.deadline) is not None]
        return min(deadlines, default=None)

    def _count(self, f: Follower, findings: list[Finding]) -> None:
        if not findings:
            return
        ctx = self._context(f)
        # a flood is thousands of equal findings: count them per (row or kind, rank, host) at once
        groups: dict[tuple[Pattern | None, str | None, str | None, str | None], list[Finding]] = {}
        for m in findings:
            groups.setdefault((m.pattern, m.kind, m.rank, m.host), []).append(m)
        for (pattern, kind, rank, host), same in groups.items():
            n = sum(m.count for m in same)
            targets = self._kernel_identities() if f.kernel else [self._identity(ctx, False, rank, host)]
            for target in targets:
                if pattern is None:
                    self.counters.add_unclassified(target, kind or "error", n)
                    continue
                ident = self.counters.add(target, pattern, n)
                if self.fastpath is not None and pattern.pages:
                    self._page(ident, pattern, same[0].text)
                    self.fastpath.note_repeats(n - 1)
            if pattern is not None:
                self.matches += n

    def _page(self, ident: Identity, pattern: Pattern, text: str) -> None:
        alertname = LOG_PATTERN_ALERTS[pattern.category]
        assert self.fastpath is not None
        self.fastpath.submit(
            {
                "alertname": alertname,
                **ident._asdict(),
                "pattern": pattern.id,
                "category": pattern.category,
                "severity": "critical",
            },
            {
                "summary": _page_summary(pattern.id, ident),
                "description": f"{pattern.description}. Line: {text[:300]}",
                "runbook_url": runbook_url(alertname),
            },
        )

    def _parse_progress(self, ctx: _FileContext, data: bytes) -> None:
        assert self.progress_rx is not None
        last: dict[Identity, int] = {}
        for m in self.progress_rx.finditer(data):
            step = next(int(v) for k, v in m.groupdict().items() if k.startswith("step") and v is not None)
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.end())
            text = data[start : end if end != -1 else len(data)].decode("utf-8", "replace")
            last[self._identity(ctx, False, line_rank(text), line_host(text))] = step
        now = self.clock()
        for ident, step in last.items():
            self.tracker.record_log_step(ident, step, now)

    def poll_once(self) -> None:
        self.tracker.refresh()
        for ident in self.tracker.identities():
            self.counters.precreate(ident)
        self.source.poll()
        if self.kmsg is not None:
            self.kmsg.poll()
        self.flush_idle()
        for f in list(self.source.files.values()):
            if not f.kernel:
                ctx = self._context(f)
                self.counters.precreate(self._identity(ctx, False))
        if self.config.kernel_log:  # kernel lines count per live workload on the node (rank "")
            for ident in self._kernel_identities():
                self.counters.precreate(ident)
        if self.nvml is not None and self.nvml.up:
            for gpu, _ in self.nvml.gpus:
                self.nvml.precreate(gpu)
        for t in self.tracker.take_gone():
            self._rank_gone(t)

    def _rank_gone(self, t: Transition) -> None:
        log.warning(
            "rank %s of %s: process %s is gone without a clean exit", t.identity.rank, t.identity.workload, t.state.pid
        )
        if self.fastpath is not None:
            self.fastpath.submit(
                {"alertname": RANK_GONE_ALERT, **t.identity._asdict(), "category": "crash", "severity": "critical"},
                {
                    "summary": f"rank {t.identity.rank} of {t.identity.workload} died on {t.identity.host}",
                    "description": f"process {t.state.pid} is gone and did not exit cleanly",
                    "runbook_url": runbook_url(RANK_GONE_ALERT),
                },
            )

    def _scrape_error(self, exc: BaseException) -> None:
        self.scrape_errors += 1
        log.warning("collector failed during a scrape: %r", exc)

    def stats(self) -> dict[str, float]:
        s = self.source.stats
        out: dict[str, float] = {
            "log_bytes": s.bytes,
            "log_lines": s.lines,
            "log_matches": self.matches,
            "rotations": s.rotations,
            "truncations": s.truncations,
            "read_errors": s.read_errors,
            "state_errors": self.tracker.invalid_files,
            "overflow": self.counters.overflow,
            "scrape_errors": self.scrape_errors,
            "files_followed": len(self.source.files),
        }
        if self.fastpath is not None:
            for k, v in self.fastpath.stats.items():
                out[f"fastpath_{k}"] = v
        return out

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, serve: bool = True) -> None:
        if self.nvml is not None and not self.nvml.start():
            self.nvml.up = False
        if self.nvml is not None and self.nvml.up:
            self.matcher.pci_gpu.update(self.nvml.pci)
        if self.fastpath is not None:
            self.fastpath.start()
        if serve:
            server, _ = serve_metrics(MetricsApp(self.collectors, self.registry), self.config.port, self.config.listen)
            self._server = server
        self._thread = threading.Thread(target=self._loop, name="log-loop", daemon=True)
        self._thread.start()

    def read_logs(self) -> None:
        """The quick check between polls: what the open logs and the kernel log gained, held events due."""
        self.source.read_open()
        if self.kmsg is not None:
            self.kmsg.poll()
        self.flush_idle()

    def _loop(self) -> None:
        next_poll = time.monotonic()
        while True:
            try:
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.config.poll_interval
                    self.poll_once()
                else:
                    self.read_logs()
            except Exception:  # the loop must outlive one bad poll; the error is logged with its trace
                log.exception("poll failed")
            # a held multi-line event is finished on time even with a long poll interval; a read that
            # stopped at its limit (a flood) is followed by the next at once
            wait = 0.0 if self.source.behind else min(LOG_CHECK_S, max(0.0, next_poll - time.monotonic()))
            due = self.next_deadline()
            if due is not None:
                wait = min(wait, max(0.01, due - time.monotonic()))
            if self._stop.wait(wait):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        server = self._server
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
        self.source.close()
        if self.kmsg is not None:
            self.kmsg.close()
        if self.nvml is not None:
            self.nvml.stop()
        if self.fastpath is not None:
            self.fastpath.stop()
