"""Localization by restarts: adaptive group testing when evidence names a set of nodes, not one.

When every rank times out together, a hang has no laggard, or network errors come from several hosts,
attribution cannot name the culprit. Each restart is then an experiment: the next attempt runs without
a subset of the suspects, chosen so that its outcome (fails again, or runs clean) says the most about
which node is bad. The belief is Bayesian over "node *n* is the culprit" plus "no node is" (the fault
was transient or elsewhere), with the likelihoods in ``LocalizeSettings`` (decisions.md says how to
tune them). A node whose posterior reaches ``blame_at`` is blamed and stays excluded; the search then
goes on over the rest if the job still fails (a second bad node). Every step returns a sentence for
the audit record.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

NONE = ""  # the hypothesis "no node is at fault"
PAIR = "+"  # "a+b": the hypothesis that nodes a and b are both bad
MAX_PAIRED = 12  # pairs only among this many named suspects (66 pairs)


class LocalizeSettings(BaseModel):
    """Restarts as experiments; per cluster, under ``policy``. ``enabled: false`` turns it off."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="split the suspects across restarts when evidence names no single node")
    after_failures: int = Field(
        2, ge=1, description="start splitting at this many failures without a named node (one may be transient)"
    )
    spare_nodes: int = Field(4, ge=0, description="most nodes excluded from one workload at once (the budget)")
    min_nodes: int = Field(1, ge=1, description="smallest allocation the workload can run on")
    fail_if_present: float = Field(0.8, gt=0, lt=1, description="P(an attempt fails | the culprit is in it)")
    fail_if_absent: float = Field(0.1, gt=0, lt=1, description="P(an attempt fails | no culprit in it)")
    prior_none: float = Field(0.1, gt=0, lt=1, description="prior that no node is at fault")
    suspect_weight: float = Field(8.0, ge=1, description="prior odds of a node the evidence named vs one it did not")
    clean_after_s: float = Field(
        3600.0, gt=0, description="an experiment that ran this long without failing counts as a clean run"
    )
    probe: bool = Field(
        False, description="after a clean run, restart at once with the next split (restarts a healthy job)"
    )
    blame_at: float = Field(0.9, gt=0.5, lt=1, description="posterior at which one node is blamed")
    prior_pair: float = Field(
        0.0, ge=0, lt=1, description="prior that two of the named suspects are bad at once (0: one culprit only)"
    )


@dataclass(frozen=True, slots=True)
class Belief:
    """Posterior over the culprit: node -> probability, ``NONE`` -> no culprit; sums to 1."""

    posterior: dict[str, float]
    blamed: tuple[str, ...] = ()  # nodes blamed so far, excluded for good
    steps: tuple[str, ...] = field(default=())  # one sentence per update, for the audit record

    def marginals(self) -> dict[str, float]:
        """P(node is bad) per node: the sum over the hypotheses that include it."""
        out: dict[str, float] = {}
        for h, p in self.posterior.items():
            for n in _members(h):
                out[n] = out.get(n, 0.0) + p
        return out

    def top(self) -> tuple[str, float]:
        marginal = self.marginals()
        node = max(marginal, key=lambda n: (marginal[n], n), default=NONE)
        return node, marginal.get(node, 0.0)


@dataclass(frozen=True, slots=True)
class Split:
    """One experiment: the nodes the next attempt runs without, and why."""

    excluded: tuple[str, ...]
    reason: str
    gain_bits: float


def start(
    nodes: Collection[str], suspects: Collection[str], settings: LocalizeSettings,
    priors: Mapping[str, float] | None = None,
) -> Belief:  # fmt: skip
    """The prior: each node's suspicion (``priors``, e.g. from the ledger) times ``suspect_weight`` if named."""
    if not nodes:
        raise ValueError("localization needs the workload's nodes")
    weights = {n: (priors or {}).get(n, 1.0) * (settings.suspect_weight if n in suspects else 1.0) for n in nodes}
    total = sum(weights.values())
    named_nodes = sorted(set(suspects) & set(nodes))
    pairs = [f"{a}{PAIR}{b}" for i, a in enumerate(named_nodes) for b in named_nodes[i + 1 :]]
    pair_mass = settings.prior_pair if pairs and len(named_nodes) <= MAX_PAIRED else 0.0
    single = 1 - settings.prior_none - pair_mass
    posterior = {n: single * w / total for n, w in weights.items()}
    posterior.update({h: pair_mass / len(pairs) for h in pairs} if pair_mass else {})
    posterior[NONE] = settings.prior_none
    named = ", ".join(sorted(set(suspects) & set(nodes))) or "none"
    return Belief(posterior, steps=(f"start: {len(nodes)} node(s), suspects named by the evidence: {named}",))


def observe(belief: Belief, ran_on: Collection[str], failed: bool, settings: LocalizeSettings) -> Belief:
    """Bayes' rule on one attempt's outcome: it ran on ``ran_on`` and failed again, or ran clean."""
    on = set(ran_on)
    p_in, p_out = settings.fail_if_present, settings.fail_if_absent
    like = {True: (p_in, p_out), False: (1 - p_in, 1 - p_out)}[failed]
    raw = {h: p * (like[0] if _members(h) & on else like[1]) for h, p in belief.posterior.items()}
    posterior = _normalise(raw)
    node, p = Belief(posterior).top()
    what = "failed again" if failed else "ran clean"
    step = f"attempt on {len(on)} node(s) {what}: most suspect {node or 'none'} at {p:.2f}, none {posterior[NONE]:.2f}"
    return Belief(posterior, belief.blamed, (*belief.steps, step))


def weigh(belief: Belief, ratios: Mapping[str, float], why: str) -> Belief:
    """Noisy evidence as per-node likelihood ratios (P(signal | culprit) / P(signal | not culprit))."""
    raw = {h: p * math.prod(ratios.get(n, 1.0) for n in _members(h)) for h, p in belief.posterior.items()}
    return Belief(_normalise(raw), belief.blamed, (*belief.steps, why))


def conclude(belief: Belief, settings: LocalizeSettings) -> tuple[Belief, str | None]:
    """Blame the top node once P(it is bad) reaches ``blame_at``; then condition on it being bad: each
    hypothesis that includes it loses it (a pair becomes "the other one is bad too"), the rest go."""
    node, p = belief.top()
    if node == NONE or p < settings.blame_at:
        return belief, None
    rest: dict[str, float] = {}
    for h, q in belief.posterior.items():
        members = _members(h)
        if node in members:
            left = PAIR.join(sorted(members - {node})) or NONE
            rest[left] = rest.get(left, 0.0) + q
    others = [n for n in belief.posterior if n not in (NONE, node) and PAIR not in n]
    for n in others:  # a second bad node the pairs did not cover stays possible, at prior_none's share
        rest[n] = rest.get(n, 0.0) + p * settings.prior_none / len(others)
    step = f"blame {node}: P(bad) {p:.2f} >= {settings.blame_at:g}; excluded for good"
    return Belief(_normalise(rest), (*belief.blamed, node), (*belief.steps, step)), node


def choose(belief: Belief, nodes: Collection[str], settings: LocalizeSettings, capacity: int | None = None) -> Split:
    """The exclusion that maximises the expected information of the next attempt's outcome.

    Candidates are the most suspect nodes first (the blamed ones always excluded), as many as the
    spare-node budget and the workload's minimum size allow: ``capacity`` is how many nodes the
    workload could run on (the cluster's size; default: ``nodes`` alone, no spares beyond them).
    """
    blamed = [n for n in belief.blamed if n in nodes]
    available = len(nodes) if capacity is None else capacity
    room = min(settings.spare_nodes, available - settings.min_nodes) - len(blamed)
    marginal = belief.marginals()
    ranked = sorted((n for n in nodes if n not in blamed), key=lambda n: (-marginal.get(n, 0.0), n))
    best, best_gain = 0, -1.0
    for k in range(max(0, min(room, len(ranked) - 1)) + 1):
        gain = _gain(belief, set(ranked[:k]), settings)
        if gain > best_gain + 1e-12:
            best, best_gain = k, gain
    out = tuple(ranked[:best])
    mass = sum(marginal.get(n, 0.0) for n in out)
    if not out:
        reason = "no experiment: " + ("no spare nodes left in the budget" if room <= 0 else "nothing to split")
    else:
        reason = (
            f"run without {', '.join(out)} (suspicion {mass:.2f} of the total, budget {settings.spare_nodes}, "
            f"min size {settings.min_nodes}): expected {best_gain:.2f} bit(s) from the outcome"
        )
    return Split((*blamed, *out), reason, max(best_gain, 0.0))


def _gain(belief: Belief, excluded: set[str], settings: LocalizeSettings) -> float:
    """Mutual information between the culprit and the outcome of an attempt without ``excluded``."""
    p_in, p_out = settings.fail_if_present, settings.fail_if_absent
    present = sum(p for h, p in belief.posterior.items() if _members(h) - excluded - set(belief.blamed))
    p_fail = present * p_in + (1 - present) * p_out
    return _h(p_fail) - present * _h(p_in) - (1 - present) * _h(p_out)


def _members(hypothesis: str) -> set[str]:
    return set(hypothesis.split(PAIR)) if hypothesis else set()


def _h(p: float) -> float:
    return 0.0 if p <= 0 or p >= 1 else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def _normalise(raw: Mapping[str, float]) -> dict[str, float]:
    total = sum(raw.values())
    if total <= 0:
        raise ValueError("the evidence rules out every hypothesis")
    return {n: p / total for n, p in raw.items()}
