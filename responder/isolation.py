"""The isolation ledger: nodes implicated across a workload's attempts and across workloads.

A node blamed once may be unlucky; a node blamed by different workloads is likely bad. The ledger
keeps every implication (in the store), computes a reputation that fades with a half-life, and
recommends draining a node once enough distinct workloads implicated it within a window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from responder import likelihoods
from responder.model import Mode
from responder.store import LedgerStore
from responder.suspicion import SuspicionSettings, suspicion


class LedgerSettings(BaseModel):
    """Node reputation across workloads and attempts."""

    model_config = ConfigDict(extra="forbid")

    drain_after_workloads: int = Field(2, ge=1, description="recommend drain after this many workloads")
    drain_window_s: float = Field(86400.0, gt=0, description="...implicated the node within this window")
    reputation_half_life_s: float = Field(86400.0, gt=0, description="how fast old implications fade")
    suspicion: SuspicionSettings = Field(default_factory=SuspicionSettings)


@dataclass(frozen=True, slots=True)
class DrainCandidate:
    node: str
    workloads: tuple[str, ...]


def reputation(store: LedgerStore, cluster: str, now: float, ledger: LedgerSettings) -> dict[str, float]:
    """Sum of implication weights per node, each halved every ``reputation_half_life_s``."""
    horizon = now - 10 * ledger.reputation_half_life_s
    scores: dict[str, float] = defaultdict(float)
    for node, when, weight in store.implications_since(cluster, horizon):
        scores[node] += weight * 0.5 ** (max(0.0, now - when) / ledger.reputation_half_life_s)
    return dict(scores)


def node_suspicion(
    store: LedgerStore, cluster: str, now: float, ledger: LedgerSettings, clean: Iterable[tuple[str, float]] = (),
    extra: Iterable[tuple[str, float, float]] = (),
) -> dict[str, float]:  # fmt: skip
    """Each implicated node's probability of being bad (``responder.suspicion``), each implication weighed
    by its signal's estimated ratio (``responder.likelihoods``); ``extra``: implications not stored yet
    (the incident being decided, at the configured ratio), ``clean``: clean runs ``(node, when)``."""
    settings = ledger.suspicion
    horizon = now - 10 * settings.half_life_s
    estimates = likelihoods.estimate(likelihoods.tally(store.reviewed_decisions()), settings) if settings.learn else {}
    found = [
        (node, when, likelihoods.weight(weight, likelihoods.ratio(estimates, signals, settings), settings))
        for node, when, weight, signals in store.implication_signals_since(cluster, horizon)
    ]
    return suspicion([*found, *extra], clean, now, settings)


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a node stands in the ledger within the drain window."""

    workloads: tuple[str, ...]  # the distinct workloads that implicated it
    drain_recorded: bool  # a drain_node record was written for it
    drain_due: bool  # enough workloads blamed it and no drain was recorded yet

    @property
    def state(self) -> str:
        """``drain recorded``, ``drain due``, ``watch`` (blamed, not enough yet) or ``faded``."""
        if self.drain_recorded:
            return "drain recorded"
        if self.drain_due:
            return "drain due"
        return "watch" if self.workloads else "faded"


def standing(
    store: LedgerStore,
    cluster: str,
    node: str,
    now: float,
    ledger: LedgerSettings,
    workload: str | None = None,
    real_only: bool = False,
) -> Standing:
    """The node's standing; ``workload``: count this workload's implication too (one being decided);
    ``real_only``: only a drain sent or awaiting approval counts as recorded."""
    since = now - ledger.drain_window_s
    workloads = store.node_workloads_since(cluster, node, since) | ({workload} if workload else set())
    drained = store.drain_recorded_since(cluster, node, since, real_only)
    due = len(workloads) >= ledger.drain_after_workloads and not drained
    return Standing(tuple(sorted(workloads)), drained, due)


def drain_candidates(
    store: LedgerStore,
    cluster: str,
    workload: str,
    implicated: tuple[str, ...],
    now: float,
    ledger: LedgerSettings,
    mode: Mode = Mode.MONITOR,
) -> list[DrainCandidate]:
    """Implicated nodes that enough distinct workloads blamed within the window (this one included), or,
    with ``suspicion.drain_at`` set, whose suspicion (this implication included) reached it. Outside
    monitor mode a drain only planned earlier (in monitor) does not count as done."""
    real_only = mode != Mode.MONITOR
    out = []
    threshold = ledger.suspicion.drain_at
    if threshold is not None:
        probs = node_suspicion(store, cluster, now, ledger, extra=[(n, now, 1.0) for n in implicated])
        since = now - ledger.drain_window_s
        for node in implicated:
            if probs.get(node, 0.0) >= threshold and not store.drain_recorded_since(cluster, node, since, real_only):
                workloads = store.node_workloads_since(cluster, node, since) | {workload}
                out.append(DrainCandidate(node, tuple(sorted(workloads))))
        return out
    for node in implicated:
        ranked = standing(store, cluster, node, now, ledger, workload, real_only)
        if ranked.drain_due:
            out.append(DrainCandidate(node, ranked.workloads))
    return out
