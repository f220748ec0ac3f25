"""Each signal's likelihood ratio, estimated from reviewed decisions, with the configured one as the prior.

A signal is the category of the alerts that named a node in an incident (``infra_gpu``, ``node_lost``,
``collective_timeout``...), or ``restarts`` when no alert named it (blamed by ``responder.experiments``).
An operator's review of a decision that implicated nodes says whether the implication was right:
``correct`` counts each of its nodes as confirmed bad, ``wrong`` as not. The share confirmed is what the
suspicion of a node should be after one implication by that signal, so it gives the ratio:
``LR = odds(share) / odds(prior)``. The share is a Beta posterior whose prior sits at the share the
configured ``implication_lr`` implies, worth ``prior_reviews`` reviews: a few reviews barely move it,
many set it. A ratio never drops below 1 (an implication never clears a node; clean runs do that).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from responder.model import AuditRecord
from responder.suspicion import SuspicionSettings

RESTARTS = "restarts"  # no alert named the node: localized by restarts


@dataclass(frozen=True, slots=True)
class SignalEstimate:
    """One signal's ratio and the reviews behind it (``reviewed`` 0: the configured default)."""

    signal: str
    reviewed: int
    confirmed: int
    share: float  # estimated P(node bad | implicated by this signal)
    ratio: float


def signals_of(record: AuditRecord, node: str) -> tuple[str, ...]:
    """The categories of the record's evidence that named ``node``; ``restarts`` when none did."""
    found = {
        str(e.get("labels", {}).get("category", ""))
        for e in record.evidence
        if isinstance(e, dict) and e.get("labels", {}).get("host") == node
    }
    return tuple(sorted(found - {""})) or (RESTARTS,)


def tally(reviewed: Iterable[tuple[AuditRecord, str]]) -> dict[str, tuple[int, int]]:
    """Per signal: (implications reviewed, confirmed bad) over reviewed decisions that implicated nodes."""
    out: dict[str, tuple[int, int]] = {}
    for record, verdict in reviewed:
        for node in record.implicated_nodes:
            for signal in signals_of(record, node):
                n, c = out.get(signal, (0, 0))
                out[signal] = (n + 1, c + (verdict == "correct"))
    return out


def estimate(tallies: Mapping[str, tuple[int, int]], settings: SuspicionSettings) -> dict[str, SignalEstimate]:
    """Every tallied signal's estimate (a signal with no reviews keeps ``implication_lr``: see ``ratio``)."""
    prior_odds = settings.prior / (1 - settings.prior)
    default = _share(settings.implication_lr * prior_odds)
    out = {}
    for signal, (n, c) in tallies.items():
        share = (settings.prior_reviews * default + c) / (settings.prior_reviews + n)
        ratio = max(1.0, share / (1 - share) / prior_odds)
        out[signal] = SignalEstimate(signal, n, c, share, ratio)
    return out


def ratio(estimates: Mapping[str, SignalEstimate], signals: Iterable[str], settings: SuspicionSettings) -> float:
    """The ratio of one implication: its strongest signal's, the configured one where none was reviewed."""
    if not settings.learn:
        return settings.implication_lr
    return max((estimates[s].ratio if s in estimates else settings.implication_lr for s in signals),
               default=settings.implication_lr)  # fmt: skip


def weight(base: float, lr: float, settings: SuspicionSettings) -> float:
    """The implication's weight rescaled so that ``suspicion`` (one ratio for all) applies ``lr`` instead."""
    return base * math.log(lr) / math.log(settings.implication_lr)


def _share(odds: float) -> float:
    return odds / (1 + odds)
