"""The metrics of a scheduler seam (the one place an adapter talks to its scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter, Histogram


@dataclass(frozen=True, slots=True)
class Seam:
    """What one seam's metrics are called and say: ``things`` (plural) are what trainguard ``verb``s."""

    prefix: str
    call: str  # the label that says which call or command it was
    things: str
    verb: str
    results: str  # the values of the ``result`` label, in words
    reasons: str  # the values of the ``reason`` label, in words
    buckets: tuple[float, ...]


class SeamMetrics:
    """``<prefix>s`` by call and result, ``<prefix>_failures`` by call and reason, ``<prefix>_duration_seconds``,
    as a subclass's ``SEAM`` names them.

    One instance per registry: share it between the adapters of several clusters (``metrics=m``); the
    ``cluster`` label tells them apart.
    """

    SEAM: ClassVar[Seam]

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        s = self.SEAM
        self.calls = Counter(
            f"{s.prefix}s", f"{s.things} {s.verb} by trainguard, by {s.call} and result ({s.results}).",
            ["cluster", s.call, "result"], registry=self.registry,
        )  # fmt: skip
        self.failures = Counter(
            f"{s.prefix}_failures", f"{s.things} that failed, by {s.call} and reason ({s.reasons}).",
            ["cluster", s.call, "reason"], registry=self.registry,
        )  # fmt: skip
        self.duration = Histogram(
            f"{s.prefix}_duration_seconds", f"Wall time of {s.things} {s.verb} by trainguard.", ["cluster", s.call],
            buckets=s.buckets, registry=self.registry,
        )  # fmt: skip
