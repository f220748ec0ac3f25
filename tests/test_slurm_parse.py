"""Pure parsing of Slurm output, on output recorded from a real Slurm 22.05.8 lab (tests/data/slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from responder.schedulers.base import WorkloadState
from responder.schedulers.slurm.exclusions import plan_exclusions
from responder.schedulers.slurm.marker import Marker, parse_marker
from responder.schedulers.slurm.parse import (
    SlurmParseError,
    expand_hostlist,
    job_state,
    parse_job,
    parse_sinfo_json,
    parse_squeue_json,
)

DATA = Path(__file__).parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------ hostlists


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("n1", ("n1",)),
        ("n[1-3,5]", ("n1", "n2", "n3", "n5")),
        ("n[1,3-4]", ("n1", "n3", "n4")),
        ("gpu[08-11]", ("gpu08", "gpu09", "gpu10", "gpu11")),
        ("a1,b[1-2]-ib,c", ("a1", "b1-ib", "b2-ib", "c")),
        ("r[1-2]-n[1-2]", ("r1-n1", "r1-n2", "r2-n1", "r2-n2")),
        ("n[1-2],n2", ("n1", "n2")),
        ("", ()),
        ("(null)", ()),
        ("node1.example.org", ("node1.example.org",)),
    ],
)
def test_expand_hostlist(expr: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(
    "expr",
    ["n[1-", "n1]", "n[3-1]", "n[a-b]", "n[1-2", "n[[1]]", "n[1-9999999]", "n1;rm", "n1 n2", "-h", "n1,,n2", "n[]"],
)
def test_expand_hostlist_refuses(expr: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies with the defect
        expand_hostlist(expr)


# ------------------------------------------------------------------------------------- squeue


def test_running_job_from_real_squeue() -> None:
    jobs = parse_squeue_json(read("squeue-running.json"))
    job = jobs["1"]
    assert job.state is WorkloadState.RUNNING
    assert job.slurm_state == "RUNNING"
    assert job.nodes == ("n1", "n2", "n3")
    assert job.restart_cnt == 0
    assert job.node_count == 3
    assert job.partitions == ("debug",)
    assert job.comment == "trainguard:policy=default"
    assert job.excluded_nodes == ()
    assert job.batch_host == "n1"
    assert job.requeue


def test_requeuehold_is_held_and_counts_a_restart() -> None:
    job = parse_squeue_json(read("squeue-requeuehold.json"))["1"]
    assert job.state is WorkloadState.HELD
    assert job.held
    assert job.restart_cnt == 1
    assert job.reason == "JobHeldUser"
    assert job.nodes == ()
    held = parse_squeue_json(read("squeue-held-excluded.json"))["1"]
    assert held.excluded_nodes == ("n2",)
    completing = parse_squeue_json(read("squeue-requeuehold-completing.json"))["7"]
    assert completing.slurm_state == "COMPLETING"
    assert completing.state is WorkloadState.HELD  # tasks still being killed, job already held
    assert completing.restart_cnt == 1
    released = parse_squeue_json(read("squeue-released.json"))["1"]
    assert released.state is WorkloadState.PENDING
    assert released.excluded_nodes == ("n2",)


def test_mixed_states_from_real_squeue() -> None:
    jobs = parse_squeue_json(read("squeue-failed-and-unavailable.json"))
    assert jobs["1"].nodes == ("n1", "n3", "n4")
    assert jobs["1"].excluded_nodes == ("n2",)
    assert jobs["2"].state is WorkloadState.CANCELLED
    assert jobs["3"].state is WorkloadState.HELD  # sbatch --hold
    assert jobs["4"].state is WorkloadState.FAILED
    assert jobs["4"].reason == "NonZeroExitCode"
    assert jobs["5"].state is WorkloadState.PENDING
    assert jobs["5"].reason == "Resources"
    assert jobs["5"].excluded_nodes == ("n1",)


def test_newer_slurm_format_flag_arrays_and_number_objects() -> None:
    """Shape of 23.11+ (openapi v0.0.40+) per INTEGRATION.md §5.1; constructed, not recorded."""
    raw = json.loads(read("squeue-running.json"))["jobs"][0]
    raw.update(
        job_state=["PENDING", "REQUEUED"],
        restart_cnt={"set": True, "infinite": False, "number": 2},
        priority={"set": True, "infinite": False, "number": 0},
        node_count={"set": True, "infinite": False, "number": 3},
        array_task_id={"set": False, "infinite": False, "number": 0},
        state_reason="JobHeldAdmin",
    )
    job = parse_job(raw)
    assert job.state is WorkloadState.HELD
    assert job.restart_cnt == 2
    assert job.job_id == "1"
    raw.update(job_state=["RUNNING", "COMPLETING"], state_reason="None", priority=5)
    assert parse_job(raw).state is WorkloadState.COMPLETING


def test_array_task_id() -> None:
    raw = json.loads(read("squeue-running.json"))["jobs"][0]
    raw.update(job_id=41, array_job_id=40, array_task_id=3)
    assert parse_job(raw).job_id == "40_3"


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("RUNNING", WorkloadState.RUNNING),
        ("CONFIGURING", WorkloadState.RUNNING),
        ("NODE_FAIL", WorkloadState.FAILED),
        ("TIMEOUT", WorkloadState.FAILED),
        ("REQUEUE_HOLD", WorkloadState.HELD),
        ("SUSPENDED", WorkloadState.UNKNOWN),
        ("SOMETHING_NEW", WorkloadState.UNKNOWN),
        (["PENDING"], WorkloadState.PENDING),
        ([], WorkloadState.UNKNOWN),
        (None, WorkloadState.UNKNOWN),
        (7, WorkloadState.UNKNOWN),
    ],
)
def test_job_state_mapping(raw: object, state: WorkloadState) -> None:
    assert job_state(raw)[0] is state


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"meta": {}, "errors": []}',
        '{"jobs": {}, "errors": []}',
        '{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}',
        '{"jobs": [{"job_state": "RUNNING"}], "errors": []}',
        '{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n[1-"}], "errors": []}',
    ],
)
def test_unusable_squeue_answer_is_an_error_not_an_empty_list(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)


def test_empty_job_list_is_a_real_answer() -> None:
    assert parse_squeue_json('{"jobs": [], "errors": []}') == {}


# -------------------------------------------------------------------------------------- sinfo


def test_nodes_from_real_sinfo() -> None:
    nodes = parse_sinfo_json(read("sinfo-allocated.json"))
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert nodes["n1"].state == "mixed"
    assert nodes["n4"].state == "idle"
    assert all(n.usable for n in nodes.values())

    draining = parse_sinfo_json(read("sinfo-draining.json"))["n4"]
    assert draining.drain
    assert draining.drained_by_trainguard
    assert draining.reason == "trainguard: inc-42"
    assert not draining.usable

    lost = parse_sinfo_json(read("sinfo-not-responding.json"))["n2"]
    assert lost.not_responding
    assert not lost.down
    assert not lost.usable

    down = parse_sinfo_json(read("sinfo-down-drain.json"))["n2"]
    assert down.down
    assert down.not_responding
    assert down.reason == "Not responding"


def test_newer_sinfo_state_array() -> None:
    doc = json.loads(read("sinfo-allocated.json"))
    doc["nodes"][0]["state"] = ["IDLE", "DRAIN"]
    doc["nodes"][0]["state_flags"] = []
    node = parse_sinfo_json(json.dumps(doc))["n1"]
    assert node.state == "idle"
    assert node.drain


def test_sinfo_bad_node_name_is_an_error() -> None:
    doc = json.loads(read("sinfo-allocated.json"))
    doc["nodes"][0]["name"] = "n1;reboot"
    with pytest.raises(SlurmParseError):
        parse_sinfo_json(json.dumps(doc))


# ------------------------------------------------------------------------------------- marker


def test_marker_round_trip_keeps_other_words() -> None:
    m = Marker(held_at=1795951068, excluded=("n2", "n3"), incident="inc-1", other="site:note")
    text = m.format()
    assert text == "site:note trainguard:held=1795951068 trainguard:exc=n2,n3 trainguard:inc=inc-1"
    assert parse_marker(text) == m
    assert parse_marker("") == Marker()


def test_malformed_marker_tokens_are_not_trusted() -> None:
    m = parse_marker("trainguard:held=soon trainguard:exc=n1;reboot trainguard:inc=-x")
    assert m.held_at is None
    assert m.excluded == ()
    assert m.incident is None


# --------------------------------------------------------------------------------- exclusions


def test_plan_prunes_oldest_first_to_keep_the_job_schedulable() -> None:
    job = parse_squeue_json(read("squeue-running.json"))["1"]  # 3 nodes, 4 in the partition
    nodes = parse_sinfo_json(read("sinfo-allocated.json"))
    plan = plan_exclusions(["n2", "n3"], job, nodes)
    assert plan.applied == ("n3",)
    assert plan.dropped == ("n2",)
    assert plan.exc_node_list == ("n3",)
    assert plan.notes


def test_plan_keeps_down_nodes_and_user_exclusions_and_clears_stale_ones() -> None:
    jobs = parse_squeue_json(read("squeue-failed-and-unavailable.json"))
    nodes = parse_sinfo_json(read("sinfo-down-drain.json"))  # n2 down, n4 draining
    user_job = jobs["5"]  # submitted with --exclude=n1, 3 nodes
    plan = plan_exclusions(["n2"], user_job, nodes)
    assert plan.exc_node_list == ("n1", "n2")  # the user's own n1 kept; n2 is down, excluding it is free
    assert plan.applied == ("n2",)

    ours = parse_job(
        {**json.loads(read("squeue-running.json"))["jobs"][0], "admin_comment": "trainguard:exc=n2",
         "excluded_nodes": "n2"}
    )  # fmt: skip
    cleared = plan_exclusions([], ours, parse_sinfo_json(read("sinfo-allocated.json")))
    assert cleared.exc_node_list == ()  # stale trainguard exclusion cleared


def test_plan_ignores_nodes_slurm_does_not_know() -> None:
    job = parse_squeue_json(read("squeue-running.json"))["1"]
    plan = plan_exclusions(["n9"], job, parse_sinfo_json(read("sinfo-allocated.json")))
    assert plan.applied == ()
    assert plan.dropped == ("n9",)


def test_plan_min_spare_nodes() -> None:
    job = parse_squeue_json(read("squeue-running.json"))["1"]
    plan = plan_exclusions(["n2"], job, parse_sinfo_json(read("sinfo-allocated.json")), min_spare_nodes=1)
    assert plan.applied == ()


def test_scontrol_recordings_agree_with_squeue_json() -> None:
    """scontrol show job -o (recorded) and squeue --json agree on the fields trainguard reads.

    The adapter reads squeue --json only: scontrol's one-line form does not quote values, so a user's
    ``--comment='x AdminComment=trainguard:held=1'`` could not be told apart from the real field.
    """
    fields = dict(
        kv.split("=", 1) for kv in read("scontrol-show-job-held.txt").split() if "=" in kv and kv[0].isupper()
    )
    held = parse_squeue_json(read("squeue-requeuehold.json"))["1"]
    assert fields["JobState"] == "PENDING"
    assert fields["Priority"] == "0"
    assert int(fields["Restarts"]) == held.restart_cnt == 1
    assert held.state is WorkloadState.HELD
    running = dict(
        kv.split("=", 1) for kv in read("scontrol-show-job-running.txt").split() if "=" in kv and kv[0].isupper()
    )
    assert running["JobState"] == "RUNNING"
    assert expand_hostlist(running["NodeList"]) == parse_squeue_json(read("squeue-running.json"))["1"].nodes


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_every_recording_parses(name: str) -> None:
    parsed = parse_squeue_json(read(name)) if name.startswith("squeue") else parse_sinfo_json(read(name))
    assert parsed
    if name == "squeue-running-and-pending.json":  # two 3-node jobs fit the 4 two-CPU nodes side by side
        assert [j.state for j in parse_squeue_json(read(name)).values()] == [WorkloadState.RUNNING] * 2
