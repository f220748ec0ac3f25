"""Calibrated node suspicion (responder/suspicion.py): prior, likelihood ratios, decay, clean runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from responder.clock import FakeClock
from responder.suspicion import SuspicionSettings, suspicion
from tests.conftest import Responder
from trainguard.lab.payloads import alert, notification

NOW = 1_800_000_000.0
S = SuspicionSettings(prior=0.01, implication_lr=20.0, clean_lr=0.5, half_life_s=86400.0)


def test_one_implication_from_the_prior() -> None:
    odds = 0.01 / 0.99 * 20
    assert suspicion([("n1", NOW, 1.0)], [], NOW, S)["n1"] == pytest.approx(odds / (1 + odds))


def test_two_workloads_make_a_node_likely_bad_and_a_threshold_can_say_drain() -> None:
    p = suspicion([("n1", NOW, 1.0), ("n1", NOW - 60, 1.0)], [], NOW, S)["n1"]
    assert p > 0.75
    assert suspicion([("n1", NOW, 0.5)], [], NOW, S)["n1"] < 0.1  # a crash alone is weak evidence


def test_evidence_fades_with_time_and_clean_runs_lower_it() -> None:
    fresh = suspicion([("n1", NOW, 1.0)], [], NOW, S)["n1"]
    old = suspicion([("n1", NOW - 10 * 86400, 1.0)], [], NOW, S)["n1"]
    assert old < fresh
    assert old == pytest.approx(0.01, abs=0.001)  # back to about the prior
    cleared = suspicion([("n1", NOW, 1.0)], [("n1", NOW), ("n1", NOW), ("n1", NOW)], NOW, S)["n1"]
    assert cleared < fresh


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="clean_lr"):
        SuspicionSettings(clean_lr=2.0)


def _gpu_fault(workload: str, host: str, at: float) -> dict[str, Any]:
    return notification([alert("TrainguardLogInfraGpu", "infra_gpu", workload=workload, host=host, rank="1",
                               pattern="xid_79", starts_at=at)])  # fmt: skip


def test_suspicion_is_a_metric_and_a_console_column(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock(NOW))
    assert r.post(_gpu_fault("4242", "n2", NOW - 5)).status_code == 200
    r.decide_now()
    assert r.client.get("/metrics").status_code == 200
    value = r.metric("trainguard_node_suspicion", {"cluster": "lab", "node": "n2"})
    odds = 0.01 / 0.99 * 20
    assert value == pytest.approx(odds / (1 + odds), rel=1e-3)
    page = r.client.get("/console/nodes").text
    assert "<th>Suspicion</th>" in page
    assert f"{value:.3f}" in page


def test_drain_recommendation_by_threshold(make_responder: Callable[..., Responder]) -> None:
    """With ``drain_at`` the second implication of one workload's node is enough, the first is not."""
    r = make_responder(clock=FakeClock(NOW), ledger={"suspicion": {"drain_at": 0.5}})
    assert r.post(_gpu_fault("4242", "n2", NOW - 5)).status_code == 200
    first = r.decide_now()
    assert [d["action"] for d in first] == ["requeue_excluding"]  # suspicion 0.17: below 0.5
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(700)
    assert r.post(_gpu_fault("4343", "n2", r.clock.now() - 5)).status_code == 200
    drains = [d for d in r.decide_now() if d["action"] == "drain_node"]
    assert [d["node"] for d in drains] == ["n2"]
