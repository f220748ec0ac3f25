"""The metrics of a scheduler seam (the one place an adapter talks to its scheduler)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class SeamMetrics:
    """``<prefix>s`` by call and result, ``<prefix>_failures`` by call and reason, ``<prefix>_duration_seconds``.

    One instance per registry: share it between the adapters of several clusters; the ``cluster`` label
    tells them apart. ``call`` names the label that says which call or command it was.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None,
        prefix: str,
        call: str,
        helps: tuple[str, str, str],
        buckets: tuple[float, ...],
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        calls_help, failures_help, duration_help = helps
        self.calls = Counter(f"{prefix}s", calls_help, ["cluster", call, "result"], registry=self.registry)
        self.failures = Counter(
            f"{prefix}_failures", failures_help, ["cluster", call, "reason"], registry=self.registry
        )
        self.duration = Histogram(
            f"{prefix}_duration_seconds", duration_help, ["cluster", call], buckets=buckets, registry=self.registry
        )
