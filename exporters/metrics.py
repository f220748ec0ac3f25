"""Log-pattern counters and the exporter's own metrics, as custom collectors.

Counters live in plain dictionaries updated by the log loop and are rendered as fresh metric families at
each scrape, so no ``_created`` series exist whatever the process environment says. Every known identity
gets a 0 for every catalog pattern as soon as it is known (Prometheus's ``increase()`` misses a series
that is born at 1). The number of identities is capped: beyond ``max_identities`` a match is counted
with ``rank=""`` for its workload, and the overflow is itself counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters.rows import Pattern
from exporters.scanner import KINDS
from exporters.state import IDENTITY_LABELS, Identity

# identities with rank="" admitted past the cap before everything folds into one overflow identity
OVERFLOW_SLACK = 64


@dataclass(eq=False)  # collectors are registry keys: identity hash
class PatternCounters(Collector):
    patterns: list[Pattern]
    max_identities: int = 1024
    counts: dict[tuple[Identity, str], int] = field(default_factory=dict)
    unclassified: dict[tuple[Identity, str], int] = field(default_factory=dict)
    identities: set[Identity] = field(default_factory=set)
    overflow: int = 0
    generation: int = 0  # bumped at every change: the exposition formats the counters again only then
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.patterns = [p for p in self.patterns if not p.harmless]  # never a finding, so never a series

    def _admit(self, ident: Identity) -> Identity:
        """The identity a match is counted under (the lock is held)."""
        if ident in self.identities:
            return ident
        if len(self.identities) >= self.max_identities:
            self.overflow += 1
            ident = ident._replace(rank="")
            if ident not in self.identities and len(self.identities) >= self.max_identities + OVERFLOW_SLACK:
                ident = Identity(ident.cluster, "", "", "", "", "")
            if ident in self.identities:
                return ident
        self.identities.add(ident)
        self.generation += 1
        for p in self.patterns:
            self.counts.setdefault((ident, p.id), 0)
        for kind in KINDS:
            self.unclassified.setdefault((ident, kind), 0)
        return ident

    def precreate(self, ident: Identity) -> None:
        with self.lock:
            self._admit(ident)

    def add(self, ident: Identity, pattern: Pattern, n: int = 1) -> Identity:
        with self.lock:
            ident = self._admit(ident)
            key = (ident, pattern.id)
            self.counts[key] = self.counts.get(key, 0) + n
            self.generation += 1
            return ident

    def add_unclassified(self, ident: Identity, kind: str, n: int = 1) -> Identity:
        """An error-looking line no row names; ``kind`` is one of ``KINDS`` (anything else counts as error)."""
        with self.lock:
            ident = self._admit(ident)
            key = (ident, kind if kind in KINDS else "error")
            self.unclassified[key] = self.unclassified.get(key, 0) + n
            self.generation += 1
            return ident

    def value(self, ident: Identity, pattern_id: str) -> int | None:
        with self.lock:
            return self.counts.get((ident, pattern_id))

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily(
            "trainguard_log_pattern_matches",
            "Log lines that matched a catalog pattern.",
            labels=(*IDENTITY_LABELS, "pattern", "category"),
        )
        by_id = {p.id: p for p in self.patterns}
        with self.lock:
            items = list(self.counts.items())
            unknown = list(self.unclassified.items())
        for (ident, pid), n in items:
            fam.add_metric([*ident, pid, by_id[pid].category], n)
        yield fam
        unc = CounterMetricFamily(
            "trainguard_log_unclassified",
            "Error-looking log lines (or tracebacks) that no catalog row names, by kind.",
            labels=(*IDENTITY_LABELS, "kind"),
        )
        for (ident, kind), n in unknown:
            unc.add_metric([*ident, kind], n)
        yield unc


@dataclass(eq=False)
class StatsCollector(Collector):
    """The exporter's own health: what it read, what it matched, what went wrong."""

    read: Callable[[], dict[str, float]]

    def collect(self) -> Iterator[Metric]:
        s = self.read()
        simple = [
            ("trainguard_exporter_log_bytes", "Bytes read from followed logs.", "log_bytes"),
            ("trainguard_exporter_log_lines", "Complete lines read from followed logs.", "log_lines"),
            ("trainguard_exporter_log_matches", "Lines that matched a catalog pattern.", "log_matches"),
            ("trainguard_exporter_log_rotations", "Followed paths that changed to a new file.", "rotations"),
            ("trainguard_exporter_log_truncations", "Followed files that shrank (copytruncate).", "truncations"),
            ("trainguard_exporter_log_read_errors", "Log files that could not be opened or read.", "read_errors"),
            (
                "trainguard_exporter_identity_overflow",
                'Matches counted with rank="" because the identity cap was reached.',
                "overflow",
            ),
            ("trainguard_exporter_scrape_errors", "Collector failures during a scrape.", "scrape_errors"),
        ]
        for name, doc, key in simple:
            c = CounterMetricFamily(name, doc)
            c.add_metric([], s.get(key, 0.0))
            yield c
        g = GaugeMetricFamily("trainguard_exporter_log_files_followed", "Log files open now.")
        g.add_metric([], s.get("files_followed", 0.0))
        yield g
        g = GaugeMetricFamily(
            "trainguard_exporter_state_files_invalid", "Progress state files that failed validation at the last read."
        )
        g.add_metric([], s.get("state_errors", 0.0))
        yield g
        fp = CounterMetricFamily(
            "trainguard_exporter_fastpath_alerts",
            "Alerts handed to the fast path, by outcome.",
            labels=("outcome",),
        )
        for outcome in ("sent", "failed", "dropped", "deduplicated"):
            fp.add_metric([outcome], s.get(f"fastpath_{outcome}", 0.0))
        yield fp


class SafeCollector(Collector):
    """Wraps a collector so one failing source costs its metrics, not the whole scrape."""

    def __init__(self, inner: Collector, on_error: Callable[[BaseException], None]) -> None:
        self.inner = inner
        self.on_error = on_error

    @property
    def generation(self) -> int | None:
        """The inner collector's, if it counts its changes (``exporters.exposition`` caches by it)."""
        got = getattr(self.inner, "generation", None)
        return got if isinstance(got, int) else None

    def collect(self) -> Iterator[Metric]:
        try:
            metrics = list(self.inner.collect())
        except Exception as exc:  # noqa: BLE001 - a scrape must survive any one collector
            self.on_error(exc)
            return iter(())
        return iter(metrics)

    def describe(self) -> Iterator[Metric]:
        return iter(())
