"""Restarts as experiments through the whole responder (real engine, real SQLite store, FakeClock).

Every attempt of one workload times out on every rank (no node named); the bad node is n5 of eight.
The responder must split the suspects across attempts within the budget, explain each step in the
record, blame n5 once it stands out, and leave clear evidence on its old path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from responder.clock import FakeClock
from responder.schedulers.base import WorkloadObservation, WorkloadState
from responder.schedulers.recording import RecordingScheduler
from tests.conftest import Responder
from trainguard.lab.intermittent import POLICY
from trainguard.lab.payloads import alert, notification

NODES = [f"n{i}" for i in range(8)]


class Running(RecordingScheduler):
    """The recording scheduler (records actions, calls nothing), with every workload still running."""

    def __init__(self) -> None:
        super().__init__(outcome="done")
        self.state = WorkloadState.RUNNING
        self.nodes: tuple[str, ...] = ()  # the scheduler's view of the allocation (empty: it cannot say)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return WorkloadObservation(workload=workload, state=self.state, nodes=self.nodes)


BAD = "n5"


def _timeouts(attempt: int, hosts: list[str]) -> dict[str, Any]:
    return notification([
        alert("TrainguardLogCollectiveTimeout", "collective_timeout", attempt=str(attempt), host=h, rank=str(i),
              pattern="nccl_watchdog_timeout")
        for i, h in enumerate(hosts)
    ])  # fmt: skip


def _run(r: Responder, attempt: int, excluded: list[str]) -> dict[str, Any]:
    hosts = [n for n in NODES if n not in excluded]
    assert r.post(_timeouts(attempt, hosts)).status_code == 200
    decisions = [d for d in _decide_and_act(r) if d["attempt"] == str(attempt) and d["action"] != "drain_node"]
    assert len(decisions) == 1, [(d["action"], d["reason"], d["incident_id"]) for d in decisions]
    return decisions[0]


def _responder(make_responder: Callable[..., Responder], **localize: Any) -> Responder:
    policy = {"max_attempts": 30, "localize": {"spare_nodes": 4, "clean_after_s": 1800, **localize}}
    clusters = {"lab": {"mode": "act", "policy": policy}}
    # The breaker's node cap is tested elsewhere; here it would only interleave its refusals.
    return make_responder(
        Running(), clock=FakeClock(1_800_000_000.0), clusters=clusters, breaker={"max_nodes_without_size": 16}
    )


def _decide_and_act(r: Responder) -> list[dict[str, Any]]:
    """Decide what is due and carry out the pending actions (act mode, the recording scheduler): only a
    restart that really happened can run clean."""
    r.decide_now()
    for record in r.store.pending_records():
        r.engine.act(record)
    return r.decisions()


def _next(r: Responder, decision: dict[str, Any]) -> dict[str, Any]:
    """The next attempt runs without the decision's exclusions: it fails if the bad node is in it, else it
    runs clean and the engine's periodic check writes the follow-up."""
    attempt = int(decision["attempt"]) + 1
    running = [n for n in NODES if n not in decision["excluded_nodes"]]
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(700)  # attempts minutes apart: outside the breaker's window
    if BAD in running:
        return _run(r, attempt, decision["excluded_nodes"])
    assert r.engine.check_clean_runs() == []  # not clean long enough yet
    r.clock.advance(1800)
    written = r.engine.check_clean_runs()
    assert len(written) == 1, (decision["action"], decision["outcome"], decision["reason"])
    follow = written[0]
    if follow.outcome == "pending":  # a probe: act mode restarts the job with the next split
        follow = r.engine.act(follow)
    return follow.to_json()


def test_repeated_timeouts_without_a_named_node_localize_the_bad_node(
    make_responder: Callable[..., Responder],
) -> None:
    r = _responder(make_responder, probe=True)
    decision = _run(r, 0, [])
    assert decision["action"] == "requeue"  # one timeout may be transient: a plain restart, as before
    assert decision["attribution"]["localization"]["ran_on"] == NODES
    for _ in range(12):
        decision = _next(r, decision)
        section = decision["attribution"]["localization"]
        assert len(decision["excluded_nodes"]) <= 4  # never over the spare-node budget
        assert section["steps"]
        if section.get("blamed"):
            break
        assert decision["action"] == "requeue_excluding"
        assert "run without" in decision["reason"]
    assert section["blamed"] == [BAD]
    assert decision["implicated_nodes"] == [BAD]
    assert "localized by restarts" in decision["reason"]
    assert r.engine.check_clean_runs() == []  # concluded: nothing more to do


def test_a_planned_experiment_never_ran_so_it_cannot_run_clean(make_responder: Callable[..., Responder]) -> None:
    """Monitor mode: the split is only planned; the job did not run without it, so no clean-run evidence."""
    r = make_responder(
        clock=FakeClock(1_800_000_000.0), clusters={"lab": {"policy": {"localize": {"clean_after_s": 60}}}}
    )
    assert r.post(_timeouts(0, NODES)).status_code == 200
    r.decide_now()
    assert r.post(_timeouts(1, NODES)).status_code == 200
    [planned] = [d for d in r.decide_now() if d["attempt"] == "1"]
    assert planned["outcome"] == "planned"
    assert planned["attribution"]["localization"]["split"]
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(3600)
    assert r.engine.check_clean_runs() == []


def test_without_probes_a_clean_run_is_recorded_and_nothing_restarts(make_responder: Callable[..., Responder]) -> None:
    r = _responder(make_responder)
    decision = _run(r, 0, [])
    while BAD in [n for n in NODES if n not in decision["excluded_nodes"]]:
        decision = _next(r, decision)
    assert isinstance(r.scheduler, Running)
    assert isinstance(r.clock, FakeClock)
    r.scheduler.state = WorkloadState.COMPLETED
    r.clock.advance(3600)
    assert r.engine.check_clean_runs() == []  # a workload that ended says nothing about its nodes
    r.scheduler.state = WorkloadState.RUNNING
    [written] = r.engine.check_clean_runs()
    clean = written.to_json()
    assert clean["action"] == "none"
    assert clean["attribution"]["localization"]["failed"] is False
    assert "ran clean" in clean["reason"]
    assert clean["outcome"] == "skipped"
    assert clean["attribution"]["localization"]["split"] == []  # the running attempt keeps its exclusions
    assert r.engine.check_clean_runs() == []  # one follow-up per experiment
    assert any(d["id"] == clean["id"] for d in r.decisions())


def test_disabled_by_policy_restarts_as_before(make_responder: Callable[..., Responder]) -> None:
    r = _responder(make_responder, enabled=False)
    for attempt in range(3):
        decision = _run(r, attempt, [])
        assert decision["action"] == "requeue"
        assert "localization" not in decision["attribution"]


def test_clear_evidence_keeps_its_path(make_responder: Callable[..., Responder]) -> None:
    r = _responder(make_responder)
    _run(r, 0, [])
    payload = notification([alert("TrainguardLogInfraGpu", "infra_gpu", attempt="1", host="n3", rank="3",
                                  pattern="xid_79")])  # fmt: skip
    assert r.post(payload).status_code == 200
    decision = next(d for d in _decide_and_act(r) if d["attempt"] == "1")
    assert decision["action"] == "requeue_excluding"
    assert decision["excluded_nodes"] == ["n3"]
    assert "localization" not in decision["attribution"]


def _cons_tres(cluster: list[str], excluded: list[str], size: int = 2) -> list[str]:
    """Where Slurm's ``select/cons_tres`` starts a job on idle nodes: the first consecutive block that fits
    (so excluding n2 of n1-n4 gives n3,n4, not n1,n3), else the first nodes free."""
    free = [n for n in cluster if n not in excluded]
    for i in range(len(free) - size + 1):
        block = free[i : i + size]
        if cluster.index(block[-1]) - cluster.index(block[0]) == size - 1:
            return block
    return free[:size]


def test_the_lab_scenario_a_two_node_job_on_a_four_node_cluster(make_responder: Callable[..., Responder]) -> None:
    """As in the lab's ``intermittent`` class, with its policy: Slurm places the job on consecutive nodes,
    so an experiment that only excludes n2 runs on n3,n4 and says nothing about n1; the split pins the
    allocation once the spares are known. A probe's restart kills the attempt that ran clean: its ranks'
    timeouts are no failure."""
    running = Running()
    lab = {"mode": "act", "nodes": 4, "policy": POLICY}
    breaker = {"correlated_window_s": 5, "max_node_fraction": 0.5, "window_s": 60, "max_actions": 100}  # the lab's
    r = make_responder(running, clock=FakeClock(1_800_000_000.0), clusters={"lab": lab}, breaker=breaker)
    cluster, bad, clean_after = ["n1", "n2", "n3", "n4"], "n2", POLICY["localize"]["clean_after_s"]
    assert isinstance(r.clock, FakeClock)

    def fail(number: int, hosts: list[str]) -> dict[str, Any]:
        assert r.post(_timeouts(number, hosts)).status_code == 200
        [decision] = [d for d in _decide_and_act(r) if d["attempt"] == str(number) and d["incident_id"]]
        return decision

    decision, number, seen = fail(0, ["n1", "n2"]), 0, [["n1", "n2"]]
    while not decision["attribution"]["localization"].get("blamed") and number < 8:
        assert len(decision["excluded_nodes"]) <= POLICY["localize"]["spare_nodes"]
        number += 1
        r.clock.advance(61)  # attempts a minute apart, as in the lab: outside the breaker's window
        running.nodes = tuple(_cons_tres(cluster, decision["excluded_nodes"]))
        seen.append(list(running.nodes))
        if bad in running.nodes:
            decision = fail(number, list(running.nodes))
            continue
        r.clock.advance(clean_after)
        [follow] = r.engine.check_clean_runs()
        decision = follow.to_json()
        assert decision["attribution"]["localization"]["ran_on"] == list(running.nodes)
        if follow.outcome == "pending":  # the probe: restart now with the next split
            decision = r.engine.act(follow).to_json()
            stale = fail(number, list(running.nodes))  # the restart killed the ranks: they all time out
            assert stale["action"] == "none"
            assert stale["attribution"]["localization"] == {"superseded": True, "steps": [stale["reason"]]}
    assert decision["attribution"]["localization"]["blamed"] == [bad], seen
    assert decision["implicated_nodes"] == [bad]
    assert ["n1", "n3"] in seen, "the split pinned the allocation to test n1 against n2"
    assert number <= 4, seen


def test_the_schedulers_allocation_beats_the_alerts_hosts(make_responder: Callable[..., Responder]) -> None:
    """In the lab a rank killed at once may not report before the decision: the alerts then name one
    host of two. The allocation comes from the scheduler (act mode), so the silent node stays a suspect."""
    r = _responder(make_responder)
    assert isinstance(r.scheduler, Running)
    r.scheduler.nodes = ("n1", "n2")
    decision = _run(r, 0, [])
    assert decision["attribution"]["localization"]["ran_on"] == ["n1", "n2"]
    assert r.post(_timeouts(1, ["n1"])).status_code == 200  # n2's rank said nothing this time
    [second] = [d for d in _decide_and_act(r) if d["attempt"] == "1"]
    section = second["attribution"]["localization"]
    assert section["ran_on"] == ["n1", "n2"]
    assert section["blamed"] == []  # one host's silence is no evidence against the other


def test_a_clean_run_counts_the_nodes_the_attempt_really_ran_on(make_responder: Callable[..., Responder]) -> None:
    """Excluding n1 does not put n2 in the next attempt: Slurm may start it on the spares n3 and n4. That
    clean run says nothing about n1 against n2; counting it as "n2 ran clean" would blame n1."""
    policy = {"max_attempts": 12, "localize": {"spare_nodes": 2, "min_nodes": 2, "clean_after_s": 60, "probe": True}}
    running = Running()
    r = make_responder(running, clock=FakeClock(1_800_000_000.0),
                       clusters={"lab": {"mode": "act", "nodes": 4, "policy": policy}})  # fmt: skip
    running.nodes = ("n1", "n2")
    for number in (0, 1):
        assert r.post(_timeouts(number, ["n1", "n2"])).status_code == 200
        [decision] = [d for d in _decide_and_act(r) if d["attempt"] == str(number)]
    assert decision["attribution"]["localization"]["split"] == ["n1"]
    running.nodes = ("n3", "n4")
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(61)
    [clean] = [record.to_json() for record in r.engine.check_clean_runs()]
    section = clean["attribution"]["localization"]
    assert section["ran_on"] == ["n3", "n4"]
    assert section["failed"] is False
    assert section["blamed"] == []
    assert clean["implicated_nodes"] == []
    assert set(section["suspects"]) >= {"n1", "n2"}
    assert abs(section["suspects"]["n1"] - section["suspects"]["n2"]) < 1e-6  # still one as likely as the other
