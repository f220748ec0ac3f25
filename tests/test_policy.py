"""Policy defaults and overrides."""

from __future__ import annotations

from responder.attribution import Verdict
from responder.model import Action
from responder.policy import PolicySettings, plan


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


def test_three_attempts_without_a_new_checkpoint_stop_with_the_cause() -> None:
    from responder.attribution import AttemptProgress  # noqa: PLC0415
    from responder.policy import checkpoint_gate  # noqa: PLC0415

    saving_fails = {0: AttemptProgress(100, 0, 180), 1: AttemptProgress(None, 100, 190),
                    2: AttemptProgress(None, 100, 185), 3: AttemptProgress(None, 100, 170)}  # fmt: skip
    chosen = plan(_v("infra", ("n1",)), "3", P, set(), {"critical"}, saving_fails)
    assert chosen.action == Action.STOP
    assert "checkpoint saving is failing" in chosen.reason
    assert "attempts 1-3" in chosen.reason

    stuck = {0: AttemptProgress(100, 0, 120), 1: AttemptProgress(None, 100, 100), 2: AttemptProgress(None, 100, 101)}
    reason = checkpoint_gate(stuck, 2, 2)
    assert reason is not None
    assert "no progress past the checkpoint of step 100" in reason

    progressing = {
        0: AttemptProgress(100, 0, 120),
        1: AttemptProgress(None, 100, 130),
        2: AttemptProgress(200, 100, 210),
    }
    assert checkpoint_gate(progressing, 2, 3) is None
    assert plan(_v("infra", ("n1",)), "2", P, set(), {"critical"}, progressing).action == Action.REQUEUE_EXCLUDING
    assert checkpoint_gate({}, 1, 3) is None  # too few attempts to judge


def test_evidence_about_nodes_already_excluded_does_not_requeue_again() -> None:
    """A scheduler still listing an ended attempt's allocation must not trigger a second requeue."""
    chosen = plan(_v("infra", ("n2",)), "1", P, {"n2"}, {"critical"})
    assert chosen.action == Action.NONE
    assert "already excluded" in chosen.reason
    assert plan(_v("infra", ("n2", "n3")), "1", P, {"n2"}, {"critical"}).action == Action.REQUEUE_EXCLUDING
