"""Policy defaults and overrides."""

from __future__ import annotations

from responder.attribution import Verdict
from responder.policy import plan
from responder.schedulers.base import Action
from responder.settings import PolicySettings


def _v(cls: str, implicated: tuple[str, ...] = (), categories: frozenset[str] = frozenset()) -> Verdict:
    return Verdict(cls, {}, implicated, (), (), categories, "summary")  # type: ignore[arg-type]


P = PolicySettings()


def test_defaults() -> None:
    assert plan(_v("infra", ("n1",)), "0", P, set(), {"critical"}).action == Action.REQUEUE_EXCLUDING
    assert plan(_v("infra"), "0", P, set(), {"critical"}).action == Action.REQUEUE
    assert plan(_v("unknown"), "0", P, set(), {"critical"}).action == Action.REQUEUE
    assert plan(_v("app"), "0", P, set(), {"critical"}).action == Action.STOP
    assert plan(_v("infra", ("n1",), frozenset({"no_progress"})), "0", P, set(), {"critical"}).action == Action.STOP


def test_attempt_cap_stops() -> None:
    chosen = plan(_v("infra", ("n1",)), "4", P, set(), {"critical"})
    assert chosen.action == Action.STOP
    assert "cap" in chosen.reason


def test_earlier_exclusions_are_carried_even_on_plain_requeue() -> None:
    chosen = plan(_v("unknown"), "1", P, {"n7"}, {"critical"})
    assert chosen.action == Action.REQUEUE_EXCLUDING
    assert chosen.excluded_nodes == ("n7",)
    assert "earlier" in chosen.reason


def test_exclusions_capped_newest_first() -> None:
    policy = PolicySettings(max_excluded_nodes=2)
    chosen = plan(_v("infra", ("n1",)), "1", policy, {"n5", "n6"}, {"critical"})
    assert chosen.excluded_nodes == ("n1", "n5")
    assert "dropped" in chosen.reason


def test_info_only_does_nothing_and_overrides_apply() -> None:
    assert plan(_v("infra", ("n1",)), "0", P, set(), {"info"}).action == Action.NONE
    policy = PolicySettings(app=Action.HOLD)
    assert plan(_v("app"), "0", policy, set(), {"critical"}).action == Action.HOLD
