"""Calibrated node suspicion: the probability that a node is bad, across jobs, from the ledger.

Each node starts at ``prior`` (the fleet's rate of bad nodes). Every implication multiplies its odds by
``implication_lr`` raised to the implication's weight (a hard signal scores 1.0, a crash alone 0.5);
every clean run it took part in (an experiment that ran clean: ``responder/experiments.py``) multiplies
them by ``clean_lr`` (< 1). Each piece of evidence counts less as it ages (its log-likelihood ratio
halves every ``half_life_s``), so an old implication fades back to the prior. With ``learn``, each signal's
ratio is estimated from reviewed decisions (``responder.likelihoods``; ``implication_lr`` is its prior);
docs/decisions.md says how to tune them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field


class SuspicionSettings(BaseModel):
    """The node suspicion model (under ``ledger``)."""

    model_config = ConfigDict(extra="forbid")

    prior: float = Field(0.01, gt=0, lt=1, description="prior probability that a node is bad")
    implication_lr: float = Field(20.0, gt=1, description="likelihood ratio of one implication of weight 1.0")
    clean_lr: float = Field(0.5, gt=0, lt=1, description="likelihood ratio of one clean run on the node")
    half_life_s: float = Field(7 * 86400.0, gt=0, description="evidence counts half as much after this long")
    learn: bool = Field(
        True, description="estimate each signal's ratio from reviewed decisions (implication_lr is the prior)"
    )
    prior_reviews: float = Field(
        10.0, gt=0, description="how many reviews implication_lr counts for against the reviews' own share"
    )
    drain_at: float | None = Field(
        None, gt=0, lt=1, description="recommend a drain at this suspicion (none: the distinct-workload count)"
    )


def suspicion(
    implications: Iterable[tuple[str, float, float]], clean: Iterable[tuple[str, float]], now: float,
    settings: SuspicionSettings,
) -> dict[str, float]:  # fmt: skip
    """Posterior per node from ``(node, when, weight)`` implications and ``(node, when)`` clean runs."""
    base = math.log(settings.prior / (1 - settings.prior))
    logodds: dict[str, float] = defaultdict(lambda: base)
    for node, when, weight in implications:
        logodds[node] += _fade(now - when, settings) * weight * math.log(settings.implication_lr)
    for node, when in clean:
        logodds[node] += _fade(now - when, settings) * math.log(settings.clean_lr)
    return {node: 1 / (1 + math.exp(-value)) for node, value in logodds.items()}


def _fade(age: float, settings: SuspicionSettings) -> float:
    return float(0.5 ** (max(0.0, age) / settings.half_life_s))
