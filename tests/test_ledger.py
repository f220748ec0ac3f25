"""The node ledger's standing, over a hand-made ``LedgerStore`` (the store split lets a test give only that)."""

from __future__ import annotations

from responder import isolation
from responder.isolation import LedgerSettings
from responder.model import AuditRecord

NOW = 1_800_000_000.0


class Ledger:
    """A ``LedgerStore`` from a table of implications and the drains already recorded."""

    def __init__(self, implications: dict[str, set[str]], drained: frozenset[str] = frozenset()) -> None:
        self.implications = implications
        self.drained = drained

    def workload_nodes(self, cluster: str, workload: str) -> set[str]:
        return {n for n, ws in self.implications.items() if workload in ws}

    def node_workloads_since(self, cluster: str, node: str, since: float) -> set[str]:
        return set(self.implications.get(node, set()))

    def implications_since(self, cluster: str, since: float) -> list[tuple[str, float, float]]:
        return [(n, NOW, 1.0) for n, ws in self.implications.items() for _ in ws]

    def implication_signals_since(self, cluster: str, since: float) -> list[tuple[str, float, float, tuple[str, ...]]]:
        return [(n, when, weight, ("infra_gpu",)) for n, when, weight in self.implications_since(cluster, since)]

    def reviewed_decisions(self, limit: int = 5000) -> list[tuple[AuditRecord, str]]:
        return []

    def drain_recorded_since(self, cluster: str, node: str, since: float, real_only: bool = False) -> bool:
        return node in self.drained


LEDGER = LedgerSettings(drain_after_workloads=2)


def test_standing_moves_from_watch_to_drain_due_to_drain_recorded() -> None:
    store = Ledger({"gpu-1": {"4242"}, "gpu-2": {"4242", "4343"}, "gpu-3": {"1", "2"}}, drained=frozenset({"gpu-3"}))
    assert isolation.standing(store, "lab", "gpu-9", NOW, LEDGER).state == "faded"
    assert isolation.standing(store, "lab", "gpu-1", NOW, LEDGER).state == "watch"
    assert isolation.standing(store, "lab", "gpu-2", NOW, LEDGER).state == "drain due"
    assert isolation.standing(store, "lab", "gpu-3", NOW, LEDGER).state == "drain recorded"


def test_a_drain_candidate_counts_the_workload_being_decided() -> None:
    store = Ledger({"gpu-1": {"4242"}, "gpu-3": {"1", "2"}}, drained=frozenset({"gpu-3"}))
    candidates = isolation.drain_candidates(store, "lab", "4343", ("gpu-1", "gpu-3"), NOW, LEDGER)
    assert [(c.node, c.workloads) for c in candidates] == [("gpu-1", ("4242", "4343"))]
