"""Per-signal likelihood ratios estimated from reviewed decisions (responder/likelihoods.py).

The estimates are checked alone, then through the real engine and SQLite store: decisions implicating
nodes, operators' reviews through the API, and the node suspicion that follows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from responder import isolation, likelihoods
from responder.clock import FakeClock
from responder.suspicion import SuspicionSettings, suspicion
from tests.conftest import Responder
from trainguard.lab.payloads import alert, notification

NOW = 1_800_000_000.0
S = SuspicionSettings(prior=0.01, implication_lr=20.0, prior_reviews=10.0)


def test_without_reviews_every_signal_keeps_the_configured_ratio() -> None:
    assert likelihoods.estimate({}, S) == {}
    assert likelihoods.ratio({}, ("infra_gpu",), S) == 20.0
    [zero] = likelihoods.estimate({"infra_gpu": (0, 0)}, S).values()
    assert zero.ratio == pytest.approx(20.0)


def test_few_reviews_barely_move_a_ratio_and_many_set_it() -> None:
    def lr(reviewed: int, confirmed: int) -> float:
        return likelihoods.estimate({"s": (reviewed, confirmed)}, S)["s"].ratio

    assert 0.8 * 20 < lr(1, 0) < 20 < lr(1, 1) < 1.6 * 20  # one review: within a few tens of percent
    assert lr(200, 200) > 20 * 20  # a signal always confirmed: far stronger than configured
    assert lr(200, 0) == 1.0  # always wrong: no longer raises suspicion (never below 1)
    # 100 reviews, 50 confirmed: the share is the Beta posterior's mean, and the ratio its odds over the prior's.
    q0 = (20 * 0.01 / 0.99) / (1 + 20 * 0.01 / 0.99)
    q = (10 * q0 + 50) / (10 + 100)
    assert lr(100, 50) == pytest.approx(q / (1 - q) / (0.01 / 0.99), rel=1e-9)
    assert likelihoods.ratio({}, ("s",), S.model_copy(update={"learn": False})) == 20.0


def test_the_strongest_signal_of_an_implication_counts() -> None:
    estimates = likelihoods.estimate({"infra_gpu": (100, 90), "crash": (100, 1)}, S)
    both = likelihoods.ratio(estimates, ("crash", "infra_gpu"), S)
    assert both == estimates["infra_gpu"].ratio > 20
    assert likelihoods.ratio(estimates, ("node_lost",), S) == 20.0  # never reviewed: the configured ratio


def test_a_rescaled_weight_applies_the_signals_ratio() -> None:
    w = likelihoods.weight(1.0, 400.0, S)
    odds = 0.01 / 0.99 * 400
    assert suspicion([("n1", NOW, w)], [], NOW, S)["n1"] == pytest.approx(odds / (1 + odds))


def _fault(name: str, category: str, workload: str, host: str, at: float) -> dict[str, Any]:
    return notification([alert(name, category, workload=workload, host=host, rank="1", pattern=category,
                               starts_at=at)])  # fmt: skip


def _implicate(r: Responder, name: str, category: str, workload: str, host: str) -> dict[str, Any]:
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(700)  # incidents minutes apart: outside the breaker's windows
    assert r.post(_fault(name, category, workload, host, r.clock.now() - 5)).status_code == 200
    [decision] = [d for d in r.decide_now() if d["workload"] == workload and d["action"] != "drain_node"]
    assert decision["implicated_nodes"] == [host]
    return decision


def test_reviews_in_the_store_move_the_suspicion_of_that_signal_only(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock(NOW), breaker={"max_nodes_without_size": 100})
    ledger = r.engine.settings.ledger.model_copy(update={"suspicion": S})
    gpu = _implicate(r, "TrainguardLogInfraGpu", "infra_gpu", "5000", "n2")
    net = _implicate(r, "TrainguardLogInfraNetwork", "infra_network", "5001", "n3")
    now = r.clock.now()
    before = isolation.node_suspicion(r.store, "lab", now, ledger)
    # No reviews yet: every signal at the configured ratio.
    assert before["n2"] == pytest.approx(suspicion([("n", _stored_at(r, gpu), 1.0)], [], now, S)["n"])

    # Operators find that infra_gpu implications here were wrong, 30 times out of 30 (other nodes, other jobs).
    for i in range(30):
        wrong = _implicate(r, "TrainguardLogInfraGpu", "infra_gpu", f"6{i:03d}", f"g{i}")
        answer = r.client.post(f"/v1/decisions/{wrong['id']}/review", json={"verdict": "wrong"})
        assert answer.status_code == 200, answer.text
    now = r.clock.now()
    after = isolation.node_suspicion(r.store, "lab", now, ledger)
    unreviewed = suspicion([("n", _stored_at(r, net), 1.0)], [], now, S)["n"]
    assert after["n3"] == pytest.approx(unreviewed)  # infra_network never reviewed: the configured ratio
    estimates = likelihoods.estimate(likelihoods.tally(r.store.reviewed_decisions()), S)
    assert estimates["infra_gpu"].reviewed == 30
    assert estimates["infra_gpu"].confirmed == 0
    assert estimates["infra_gpu"].ratio < 20 / 2
    assert after["n2"] < suspicion([("n", _stored_at(r, gpu), 1.0)], [], now, S)["n"] / 1.5

    # A later review overrides an earlier one: all 30 now confirmed, the ratio rises past the default.
    for d in [x for x in r.decisions() if x["workload"].startswith("6") and x["action"] != "drain_node"]:
        assert r.client.post(f"/v1/decisions/{d['id']}/review", json={"verdict": "correct"}).status_code == 200
    estimates = likelihoods.estimate(likelihoods.tally(r.store.reviewed_decisions()), S)
    assert estimates["infra_gpu"].confirmed == 30
    assert estimates["infra_gpu"].ratio > 20 * 5
    assert isolation.node_suspicion(r.store, "lab", now, ledger)["n2"] > after["n2"]


def _stored_at(r: Responder, decision: dict[str, Any]) -> float:
    """When the decision's implication was stored (its decision time)."""
    record = r.store.record(decision["id"])
    assert record is not None
    return record.decided_at
