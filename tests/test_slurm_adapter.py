"""The Slurm adapter against its one seam, swapped for output recorded from a real Slurm 22.05.8 lab."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.base import ActionRequest, Scheduler, SchedulerError, WorkloadState
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.collector import SlurmCollector
from responder.schedulers.slurm.commands import CommandResult, SlurmCommandMetrics, Transport
from responder.schedulers.slurm.settings import SlurmSettings
from responder.schedulers.slurm.watchdog import release_stale_holds

DATA = Path(__file__).parent / "data" / "slurm"
ROOT = Path(__file__).parent.parent
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def with_job(name: str, job_id: str = "1", **fields: object) -> str:
    """A recording (file name, or JSON text) with fields of one job changed."""
    doc = json.loads(name if name.lstrip().startswith("{") else read(name))
    for job in doc["jobs"]:
        if str(job["job_id"]) == job_id:
            job.update(fields)
    return json.dumps(doc)


def inner(argv: list[str]) -> list[str]:
    """The Slurm argv inside an ssh call (what the forced command on the head node receives)."""
    return shlex.split(argv[-1]) if argv[0] == "ssh" else argv


class FakeSlurm:
    """A runner: answers squeue/sinfo from recordings (a queue; the last answer repeats), records argv."""

    def __init__(self, squeue: Sequence[str] = (), sinfo: Sequence[str] = (), fail: dict[str, str] | None = None):
        self.answers = {"squeue": list(squeue), "sinfo": list(sinfo)}
        self.fail = fail or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        assert timeout > 0
        argv = list(argv)
        self.calls.append(argv)
        argv = inner(argv)
        key = " ".join(argv[:2])
        if key in self.fail:
            return CommandResult(1, "", self.fail[key])
        queue = self.answers.get(argv[0])
        if queue is not None:
            if not queue:
                return CommandResult(1, "", f"{argv[0]}: no recording")
            return CommandResult(0, queue.pop(0) if len(queue) > 1 else queue[0], "")
        return CommandResult(0, "", "")

    def actions(self) -> list[list[str]]:
        return [inner(c) for c in self.calls if inner(c)[0] not in ("squeue", "sinfo")]


def make(runner: FakeSlurm, **settings: object) -> SlurmScheduler:
    return SlurmScheduler(
        SlurmSettings.model_validate({"cluster": "lab", "verify_timeout_s": 0, **settings}),
        runner=runner,
        registry=CollectorRegistry(),
        now=lambda: NOW,
        sleep=lambda s: None,
    )


def req(action: Action, workload: str = "1", **kw: object) -> ActionRequest:
    return ActionRequest(action, "lab", workload, kw.pop("incident_id", "inc-1"), "test", **kw)  # type: ignore[arg-type]


def test_is_a_scheduler() -> None:
    assert isinstance(make(FakeSlurm()), Scheduler)


# ----------------------------------------------------------------------------------- hostile values


@pytest.mark.parametrize("workload", ["12; rm -rf /", "-h", "0", "1 2", "$(reboot)", "1\n2", "n[1-2]", "ml/job", ""])
@pytest.mark.parametrize("action", [Action.REQUEUE, Action.REQUEUE_EXCLUDING, Action.STOP, Action.HOLD, Action.RELEASE])
def test_hostile_job_ids_refused_before_any_command(workload: str, action: Action) -> None:
    runner = FakeSlurm([read("squeue-running.json")])
    result = make(runner).act(req(action, workload))
    assert result.outcome == "failed"
    assert "refused" in result.detail
    assert not result.retry, "a refusal is final"
    assert runner.calls == []


@pytest.mark.parametrize("node", ["n1 && reboot", "-h", "n[1-2]", "n1,n2", "n1;id", "--all", "n1\n", ""])
def test_hostile_node_names_refused_before_any_command(node: str) -> None:
    runner = FakeSlurm([read("squeue-running.json")], [read("sinfo-allocated.json")])
    s = make(runner)
    for action in (Action.DRAIN_NODE, Action.RESUME_NODE):
        assert s.act(req(action, node=node)).outcome == "failed"
    assert s.act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n3", node))).outcome == "failed"
    assert runner.calls == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("incident_id", "x; reboot"), ("incident_id", "-rf"), ("attempt", "1; id"), ("attempt", "-1"), ("cluster", "a b")],
)
def test_hostile_request_fields_refused(field: str, value: str) -> None:
    runner = FakeSlurm([read("squeue-running.json")], [read("sinfo-allocated.json")])
    base = {"incident_id": "inc-1", "attempt": "0", "cluster": "lab"}
    base[field] = value
    request = ActionRequest(Action.REQUEUE_EXCLUDING, base["cluster"], "1", base["incident_id"], "r",
                            attempt=base["attempt"], exclude_nodes=("n2",))  # fmt: skip
    assert make(runner).act(request).outcome == "failed"
    assert runner.calls == []


def test_other_cluster_refused() -> None:
    runner = FakeSlurm([read("squeue-running.json")])
    request = ActionRequest(Action.STOP, "other", "1", "inc-1", "r")
    assert make(runner).act(request).outcome == "failed"
    with pytest.raises(ValueError, match="cluster"):
        make(runner).observe("other", "1")
    assert runner.calls == []


# ------------------------------------------------------------------------------------- observing


def test_observe_from_real_squeue() -> None:
    obs = make(FakeSlurm([read("squeue-running.json")])).observe("lab", "1")
    assert obs.state is WorkloadState.RUNNING
    assert obs.attempt == 0
    assert obs.nodes == ("n1", "n2", "n3")
    assert obs.opted_in is True
    assert obs.extra["batch_host"] == "n1"


def test_observe_not_listed_is_unknown_not_absent() -> None:
    obs = make(FakeSlurm([read("squeue-running.json")])).observe("lab", "77")
    assert obs.state is WorkloadState.UNKNOWN


def test_observe_failure_raises_and_counts() -> None:
    runner = FakeSlurm(fail={"squeue --json": "slurm_load_jobs error: Unable to contact slurm controller"})
    s = make(runner)
    with pytest.raises(SchedulerError, match="Unable to contact"):
        s.observe("lab", "1")
    assert s.commands.failure_count == 1
    value = s.commands.registry.get_sample_value(
        "trainguard_slurm_command_failures_total", {"cluster": "lab", "command": "squeue", "reason": "exit"}
    )
    assert value == 1


def test_timeout_and_spawn_failures_are_unknown() -> None:
    def slow(argv: Sequence[str], timeout: float) -> CommandResult:
        raise subprocess.TimeoutExpired(list(argv), timeout)

    def missing(argv: Sequence[str], timeout: float) -> CommandResult:
        raise FileNotFoundError(argv[0])

    for runner, reason in ((slow, "timeout"), (missing, "spawn")):
        s = SlurmScheduler(SlurmSettings(), runner=runner, registry=CollectorRegistry())
        with pytest.raises(SchedulerError):
            s.list_jobs()
        labels = {"cluster": "default", "command": "squeue", "reason": reason}
        assert s.commands.registry.get_sample_value("trainguard_slurm_command_failures_total", labels) == 1
        failed = s.act(req(Action.STOP))
        assert failed.outcome == "failed"
        assert failed.retry, "Slurm could not be asked: the engine may try again"


def test_opt_in_by_partition_allowlist() -> None:
    squeue = with_job("squeue-running.json", comment="")
    assert make(FakeSlurm([squeue])).observe("lab", "1").opted_in is False
    assert make(FakeSlurm([squeue]), opt_in_partitions=["debug"]).observe("lab", "1").opted_in is True


def test_not_opted_in_is_only_observed() -> None:
    runner = FakeSlurm([with_job("squeue-running.json", comment="")])
    result = make(runner).act(req(Action.STOP))
    assert result.outcome == "skipped"
    assert runner.actions() == []


# ---------------------------------------------------------------------------------------- acting


def test_requeue_excluding_command_sequence() -> None:
    runner = FakeSlurm([read("squeue-running.json"), read("squeue-released.json")], [read("sinfo-allocated.json")])
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",)))
    assert result.outcome == "done"
    assert result.verified
    assert result.acted_at == NOW
    assert result.excluded_nodes == ("n2",)
    t = int(NOW.timestamp())
    assert runner.actions() == [
        ["scontrol", "update", "JobId=1", f"AdminComment=trainguard:held={t} trainguard:inc=inc-1"],
        ["scontrol", "requeuehold", "1"],
        ["scontrol", "update", "JobId=1", "ExcNodeList=n2",
         f"AdminComment=trainguard:held={t} trainguard:exc=n2 trainguard:inc=inc-1"],
        ["scontrol", "release", "1"],
        ["scontrol", "update", "JobId=1", "AdminComment=trainguard:exc=n2 trainguard:inc=inc-1"],
    ]  # fmt: skip
    assert runner.calls[-1] == ["squeue", "--json"]  # verified with a fresh look


def test_retry_of_a_done_requeue_does_not_requeue_twice() -> None:
    after = with_job("squeue-released.json", admin_comment="trainguard:exc=n2 trainguard:inc=inc-1")
    runner = FakeSlurm([after], [read("sinfo-allocated.json")])
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",)))
    assert result.outcome == "done"
    assert "not requeued again" in result.detail
    assert result.excluded_nodes == ("n2",)
    assert runner.actions() == []
    # running again on the next attempt: nothing at all
    running = FakeSlurm([with_job("squeue-running.json", restart_cnt=1)])
    assert make(running).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",))).outcome == "done"
    assert running.actions() == []


def test_requeued_but_not_started_gets_its_exclusions_without_a_second_requeue() -> None:
    """Crash between `scontrol requeue` (ended job) and the ExcNodeList update, or Slurm requeued it."""
    pending = with_job("squeue-released.json", excluded_nodes="", admin_comment="")
    runner = FakeSlurm([pending, read("squeue-released.json")], [read("sinfo-allocated.json")])
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",)))
    assert result.verified, result.detail
    assert runner.actions() == [
        ["scontrol", "update", "JobId=1", "ExcNodeList=n2", "AdminComment=trainguard:exc=n2 trainguard:inc=inc-1"],
    ]


def test_retry_after_a_crash_between_hold_and_release_finishes_without_requeueing() -> None:
    t = int(NOW.timestamp()) - 3
    held = with_job("squeue-requeuehold.json", admin_comment=f"trainguard:held={t} trainguard:inc=inc-1")
    runner = FakeSlurm([held, read("squeue-released.json")], [read("sinfo-allocated.json")])
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",)))
    assert result.outcome == "done"
    assert result.verified
    verbs = [c[1] for c in runner.actions()]
    assert "requeuehold" not in verbs
    assert "requeue" not in verbs
    assert verbs == ["update", "release", "update"]


def test_plain_requeue_and_its_retry() -> None:
    runner = FakeSlurm([read("squeue-running.json"), read("squeue-released.json")])
    assert make(runner).act(req(Action.REQUEUE, attempt="0")).verified
    assert runner.actions() == [["scontrol", "requeue", "1"]]
    retry = FakeSlurm([read("squeue-released.json")])
    assert make(retry).act(req(Action.REQUEUE, attempt="0")).outcome == "done"
    assert retry.actions() == []


def test_request_for_a_future_attempt_is_skipped() -> None:
    runner = FakeSlurm([read("squeue-running.json")])
    assert make(runner).act(req(Action.REQUEUE, attempt="3")).outcome == "skipped"
    assert runner.actions() == []


def test_requeue_failure_restores_the_mark_and_fails() -> None:
    runner = FakeSlurm([read("squeue-running.json")], [read("sinfo-allocated.json")],
                       fail={"scontrol requeuehold": "Requested operation is presently disabled"})  # fmt: skip
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",)))
    assert result.outcome == "failed"
    assert "presently disabled" in result.detail
    assert runner.actions()[-1] == ["scontrol", "update", "JobId=1", "AdminComment="]


def test_stop() -> None:
    runner = FakeSlurm([read("squeue-running.json"), with_job("squeue-running.json", job_state="CANCELLED")])
    result = make(runner).act(req(Action.STOP))
    assert result.verified
    assert "inc-1" in result.detail
    assert runner.actions()[-1] == ["scancel", "1"]
    again = FakeSlurm([with_job("squeue-running.json", job_state="CANCELLED")])
    assert make(again).act(req(Action.STOP)).outcome == "done"
    assert again.actions() == []


def test_hold_pending_and_release() -> None:
    pending = read("squeue-released.json")
    runner = FakeSlurm([pending, read("squeue-requeuehold.json")])
    assert make(runner).act(req(Action.HOLD)).verified
    assert runner.actions()[-1] == ["scontrol", "hold", "1"]
    t = int(NOW.timestamp())
    held = with_job("squeue-requeuehold.json", admin_comment=f"trainguard:held={t}")
    rel = FakeSlurm([held, pending])
    assert make(rel).act(req(Action.RELEASE)).verified
    assert rel.actions() == [["scontrol", "release", "1"], ["scontrol", "update", "JobId=1", "AdminComment="]]


def test_drain_resume_and_circuit_breaker() -> None:
    runner = FakeSlurm(sinfo=[read("sinfo-allocated.json"), read("sinfo-draining.json")])
    result = make(runner).act(req(Action.DRAIN_NODE, node="n4"))
    assert result.verified
    assert runner.actions() == [["scontrol", "update", "NodeName=n4", "State=DRAIN", "Reason=trainguard: inc-1"]]
    # n4 is already drained by trainguard: idempotent, and the breaker (1 of 4 at 0.1) blocks another
    done = FakeSlurm(sinfo=[read("sinfo-draining.json")])
    assert make(done).act(req(Action.DRAIN_NODE, node="n4")).outcome == "done"
    assert make(done).act(req(Action.DRAIN_NODE, node="n1")).outcome == "skipped"
    assert done.actions() == []
    # resume only undoes trainguard's own drains
    resume = FakeSlurm(sinfo=[read("sinfo-draining.json"), read("sinfo-allocated.json")])
    assert make(resume).act(req(Action.RESUME_NODE, node="n4")).verified
    assert resume.actions() == [["scontrol", "update", "NodeName=n4", "State=RESUME"]]
    other = FakeSlurm(sinfo=[read("sinfo-down-drain.json")])
    assert make(other).act(req(Action.RESUME_NODE, node="n2")).outcome == "skipped"
    assert make(other).act(req(Action.DRAIN_NODE, node="n9")).outcome == "failed"
    assert other.actions() == []


# ------------------------------------------------------------------------------------ ssh transport


def load_forced_command() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tg_forced", ROOT / "slurm" / "trainguard_ssh_command.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ssh_transport_argv_and_forced_command_accepts_every_command_the_adapter_sends() -> None:
    forced = load_forced_command()
    runner = FakeSlurm([read("squeue-running.json"), read("squeue-released.json")], [read("sinfo-allocated.json")])
    s = make(runner, transport="ssh", ssh_host="head1", ssh_user="trainguard", ssh_key="/k", ssh_known_hosts="/kh")
    assert s.act(req(Action.REQUEUE_EXCLUDING, attempt="0", exclude_nodes=("n2",))).verified
    drain = FakeSlurm(sinfo=[read("sinfo-allocated.json"), read("sinfo-draining.json")])
    sd = make(drain, transport="ssh", ssh_host="head1")
    assert sd.act(req(Action.DRAIN_NODE, node="n4")).verified
    for argv in runner.calls + drain.calls:
        assert argv[0] == "ssh"
        assert "BatchMode=yes" in argv
        assert "StrictHostKeyChecking=yes" in argv
        assert argv[-3:-1] == ["--", "head1"]
        assert forced.allowed(shlex.split(argv[-1])), argv[-1]
    assert "UserKnownHostsFile=/kh" in runner.calls[0]


def test_ssh_transport_needs_a_host() -> None:
    with pytest.raises(ValueError, match="ssh_host"):
        SlurmSettings(transport="ssh")
    with pytest.raises(ValueError, match="ssh_user"):
        SlurmSettings(transport="ssh", ssh_host="h", ssh_user="-oProxyCommand=x")
    assert Transport().wrap(["squeue", "--json"], 5) == ["squeue", "--json"]


@pytest.mark.parametrize(
    "command",
    [
        "squeue --json",
        "sinfo --json",
        "scontrol ping",
        "scontrol requeuehold 42",
        "scontrol release 42_3",
        "scancel 42",
        "scontrol update JobId=42 ExcNodeList=n2,n3 'AdminComment=trainguard:held=1 trainguard:exc=n2,n3'",
        "scontrol update JobId=42 ExcNodeList=",
        "scontrol update NodeName=n4 State=DRAIN 'Reason=trainguard: inc-1'",
        "scontrol update NodeName=n4 State=RESUME",
    ],
)
def test_forced_command_allows(command: str) -> None:
    assert load_forced_command().allowed(shlex.split(command))


@pytest.mark.parametrize(
    "command",
    [
        "",
        "bash",
        "squeue",
        "squeue --json -u root",
        "scancel --user=root",
        "scancel 12; rm -rf /",
        "scancel -h",
        "scontrol shutdown",
        "scontrol requeue 0",
        "scontrol update JobId=42 Partition=big",
        "scontrol update JobId=42",
        "scontrol update JobId=42 ExcNodeList=n1 ExcNodeList=n2",
        "scontrol update JobId=42 'ExcNodeList=n[1-2]'",
        "scontrol update NodeName=n4 State=DOWN 'Reason=trainguard: x'",
        "scontrol update NodeName=n4 State=DRAIN 'Reason=because'",
        "scontrol update 'NodeName=n1 && reboot' State=RESUME",
        "scontrol update NodeName=ALL State=RESUME extra",
        "sinfo --json; id",
    ],
)
def test_forced_command_refuses(command: str) -> None:
    forced = load_forced_command()
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    assert not forced.allowed(argv)


def test_forced_command_main_refuses_with_126(monkeypatch: pytest.MonkeyPatch) -> None:
    forced = load_forced_command()
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "scontrol shutdown")
    assert forced.main() == 126


# ----------------------------------------------------------------------------- collector, watchdog


def test_collector_from_recordings() -> None:
    runner = FakeSlurm([read("squeue-failed-and-unavailable.json")], [read("sinfo-down-drain.json")])
    registry = CollectorRegistry()
    registry.register(SlurmCollector(make(runner), "lab", workloads=lambda: ["1", "5", "404"]))
    get = registry.get_sample_value
    assert get("trainguard_slurm_up", {"cluster": "lab"}) == 1
    ids = {"cluster": "lab", "workload": "1", "scheduler": "slurm"}
    assert get("trainguard_slurm_job_state", {**ids, "state": "RUNNING"}) == 1
    assert get("trainguard_slurm_job_restart_count", ids) == 1
    assert get("trainguard_slurm_job_node", {**ids, "attempt": "1", "host": "n3"}) == 1
    assert get("trainguard_slurm_job_reason", {**ids, "workload": "5", "reason": "Resources"}) == 1
    assert get("trainguard_slurm_node_down", {"cluster": "lab", "host": "n2"}) == 1
    assert get("trainguard_slurm_node_not_responding", {"cluster": "lab", "host": "n2"}) == 1
    assert get("trainguard_slurm_node_drain", {"cluster": "lab", "host": "n4", "trainguard": "1"}) == 1
    assert get("trainguard_slurm_nodes_drained_by_trainguard", {"cluster": "lab"}) == 1
    assert get("trainguard_slurm_job_state", {**ids, "workload": "404", "state": "RUNNING"}) is None


def test_collector_exports_up_0_and_nothing_else_when_slurm_is_unreachable() -> None:
    registry = CollectorRegistry()
    registry.register(SlurmCollector(make(FakeSlurm(fail={"squeue --json": "down"})), "lab"))
    assert registry.get_sample_value("trainguard_slurm_up", {"cluster": "lab"}) == 0
    names = {m.name for m in registry.collect()}
    assert names == {"trainguard_slurm_up", "trainguard_slurm_scrape_duration_seconds"}


def test_watchdog_releases_only_old_trainguard_holds() -> None:
    t = int(NOW.timestamp())
    doc = json.loads(read("squeue-failed-and-unavailable.json"))
    jobs = {str(j["job_id"]): j for j in doc["jobs"]}
    jobs["3"]["admin_comment"] = f"trainguard:held={t - 600} trainguard:inc=inc-9"  # held by us, 10 min
    runner = FakeSlurm([json.dumps(doc)])
    records: list[dict[str, object]] = []
    released = release_stale_holds(make(runner), 300, records.append, now=lambda: NOW)
    assert released == ["3"]
    assert runner.actions()[0] == ["scontrol", "release", "3"]
    assert records[0]["workload"] == "3"
    assert records[0]["incident_id"] == "inc-9"
    assert records[0]["action"] == "release"
    # young hold: untouched; a hold without trainguard's mark (sbatch --hold): never touched
    jobs["3"]["admin_comment"] = f"trainguard:held={t - 10}"
    young = FakeSlurm([json.dumps(doc)])
    assert release_stale_holds(make(young), 300, records.append, now=lambda: NOW) == []
    jobs["3"]["admin_comment"] = ""
    other = FakeSlurm([json.dumps(doc)])
    assert release_stale_holds(make(other), 0, records.append, now=lambda: NOW) == []
    assert young.actions() == other.actions() == []


def test_several_clusters_share_one_registry() -> None:
    registry = CollectorRegistry()
    metrics = SlurmCommandMetrics(registry)
    a = SlurmScheduler(SlurmSettings(cluster="a"), runner=FakeSlurm([read("squeue-running.json")]), metrics=metrics)
    b = SlurmScheduler(SlurmSettings(cluster="b"), runner=FakeSlurm(fail={"squeue --json": "x"}), metrics=metrics)
    a.list_jobs()
    with pytest.raises(SchedulerError):
        b.list_jobs()
    get = registry.get_sample_value
    assert get("trainguard_slurm_commands_total", {"cluster": "a", "command": "squeue", "result": "ok"}) == 1
    assert get("trainguard_slurm_command_failures_total", {"cluster": "b", "command": "squeue", "reason": "exit"}) == 1


def test_completing_job_is_not_requeued_yet() -> None:
    runner = FakeSlurm([with_job("squeue-running.json", job_state="COMPLETING")])
    for action in (Action.REQUEUE, Action.REQUEUE_EXCLUDING, Action.HOLD):
        result = make(runner, settle_timeout_s=0).act(req(action, attempt="0", exclude_nodes=("n2",)))
        assert result.outcome == "failed"
        assert "COMPLETING" in result.detail
    assert runner.actions() == []


def test_a_job_that_ends_while_we_act_is_requeued_once_it_settled() -> None:
    """A dying rank ends the step at once: the decision often meets the job COMPLETING, then FAILED."""
    failed = read("squeue-failed-and-unavailable.json")
    completing = with_job(failed, "4", job_state="COMPLETING", comment="trainguard:policy=x")
    after = with_job(failed, "4", job_state="PENDING", restart_cnt=1, excluded_nodes="n2")
    runner = FakeSlurm(
        [completing, completing, with_job(failed, "4", comment="trainguard:policy=x"), after],
        [read("sinfo-allocated.json")],
    )
    result = make(runner, settle_timeout_s=10).act(req(Action.REQUEUE_EXCLUDING, "4", attempt="0",
                                                       exclude_nodes=("n2",)))  # fmt: skip
    assert result.outcome == "done", result.detail
    assert ["scontrol", "requeue", "4"] in runner.actions()
    assert sum(a[:2] == ["scontrol", "requeue"] for a in runner.actions()) == 1


def test_failed_job_is_requeued_then_excluded_without_a_hold() -> None:
    """Slurm refuses AdminComment on an ended job: requeue, then ExcNodeList during its BeginTime wait."""
    failed = read("squeue-failed-and-unavailable.json")
    after = with_job(failed, "4", job_state="PENDING", restart_cnt=1, excluded_nodes="n2")
    runner = FakeSlurm([with_job(failed, "4", comment="trainguard:policy=x"), after], [read("sinfo-allocated.json")])
    result = make(runner).act(req(Action.REQUEUE_EXCLUDING, "4", attempt="0", exclude_nodes=("n2",)))
    assert result.verified, result.detail
    assert runner.actions() == [
        ["scontrol", "requeue", "4"],
        ["scontrol", "update", "JobId=4", "ExcNodeList=n2", "AdminComment=trainguard:exc=n2 trainguard:inc=inc-1"],
    ]


def test_failed_job_is_requeued() -> None:
    failed = read("squeue-failed-and-unavailable.json")  # job 4: FAILED, NonZeroExitCode
    after = with_job(failed, "4", job_state="PENDING", restart_cnt=1)
    runner = FakeSlurm([with_job(failed, "4", comment="trainguard:policy=x"), after])
    result = make(runner).act(req(Action.REQUEUE, "4", attempt="0"))
    assert result.verified, result.detail
    assert runner.actions() == [["scontrol", "requeue", "4"]]
