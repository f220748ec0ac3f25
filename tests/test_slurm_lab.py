"""The Slurm adapter and watchdog against a REAL Slurm: 4 slurmd nodes on this machine (slurm/lab.sh).

One lab per session, on free ports and in a temporary directory (another engineer's services may
run on this machine). Jobs are bash heartbeat writers: every task writes
``<restart count> <time>`` to ``hb/<job id>/<SLURMD_NODENAME>`` twice a second, so a test can see on
which nodes each attempt really runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.base import ActionRequest, WorkloadState
from responder.schedulers.slurm import watchdog
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.collector import SlurmCollector
from responder.schedulers.slurm.commands import CommandResult
from responder.schedulers.slurm.settings import SlurmSettings
from tests.services import free_port, require_binary, require_root, wait_until
from trainguard.lab.common import HEARTBEAT_JOB, free_port_block, heartbeats

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]

ROOT = Path(__file__).parent.parent
LAB = ROOT / "slurm" / "lab.sh"
FORCED = ROOT / "slurm" / "trainguard_ssh_command.py"


@dataclass
class Lab:
    dir: Path
    env: dict[str, str]
    conf: Path

    def sh(self, *argv: str, check: bool = True) -> str:
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"{shlex.join(argv)}: {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def scheduler(self, **settings: object) -> SlurmScheduler:
        s = SlurmSettings.model_validate({"cluster": "lab", "slurm_conf": str(self.conf), **settings})
        return SlurmScheduler(s, registry=CollectorRegistry())

    def submit(self, nodes: int, *extra: str) -> str:
        script = self.dir / "jobs" / "hb.sh"
        script.write_text(HEARTBEAT_JOB.format(hb=self.dir / "hb", interval=0.5), encoding="utf-8")
        out = self.sh(
            "sbatch", "--parsable", f"-N{nodes}", "--ntasks-per-node=1", "--requeue", "--open-mode=append",
            "--comment=trainguard:policy=default", f"-o{self.dir}/jobs/%j.out", f"-D{self.dir}/jobs",
            *extra, str(script),
        )  # fmt: skip
        return out.strip().split(";")[0]

    def heartbeats(self, job: str, attempt: int, since: float) -> set[str]:
        """Nodes whose task of ``attempt`` wrote a heartbeat after ``since``."""
        return heartbeats(self.dir / "hb", job, attempt, since)

    def cancel(self, job: str) -> None:
        self.sh("scancel", job, check=False)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    require_root("slurmd runs as root in the lab")
    for binary in ("slurmctld", "slurmd", "munged"):
        require_binary(binary)
    # not under pytest's tmp_path: munged wants o+x on every directory above its socket
    directory = Path(tempfile.mkdtemp(prefix="trainguard-slurm-lab-", dir="/tmp"))
    directory.chmod(0o755)
    env = {
        **os.environ,
        "SLURM_LAB_DIR": str(directory),
        "SLURM_LAB_CTLD_PORT": str(free_port()),
        "SLURM_LAB_NODE_PORT_BASE": str(free_port_block(4)),
        "SLURM_CONF": str(directory / "etc" / "slurm.conf"),
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
    }
    proc = subprocess.run([str(LAB), "up"], env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=60, check=False)
        shutil.rmtree(directory, ignore_errors=True)
        pytest.fail(f"slurm/lab.sh up failed: {proc.stderr[-2000:]}")
    try:
        yield Lab(directory, env, directory / "etc" / "slurm.conf")
    finally:
        subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=60, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def wait_running(lab: Lab, s: SlurmScheduler, job: str, attempt: int, nodes: int, since: float) -> set[str]:
    def ready() -> set[str] | None:
        obs = s.observe("lab", job)
        if obs.state is not WorkloadState.RUNNING or obs.attempt != attempt:
            return None
        beats = lab.heartbeats(job, attempt, since)
        return beats if len(beats) == nodes else None

    result = wait_until(ready, timeout=40, interval=0.2, what=f"job {job} attempt {attempt} running on {nodes}")
    assert isinstance(result, set)
    return result


def request(action: Action, job: str, incident: str, **kw: object) -> ActionRequest:
    return ActionRequest(action, "lab", job, incident, "lab test", **kw)  # type: ignore[arg-type]


def test_lab_up_is_idempotent(lab: Lab) -> None:
    t0 = time.monotonic()
    subprocess.run([str(LAB), "up"], env=lab.env, capture_output=True, timeout=60, check=True)
    assert time.monotonic() - t0 < 10
    nodes = lab.scheduler().list_nodes()
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert all(n.usable for n in nodes.values())


def test_requeue_excluding_n2_runs_again_on_the_other_three(lab: Lab) -> None:
    s = lab.scheduler()
    job = lab.submit(3)
    try:
        first = wait_running(lab, s, job, 0, 3, 0)
        node = "n2" if "n2" in first else sorted(first)[1]
        decided = time.time()
        result = s.act(request(Action.REQUEUE_EXCLUDING, job, "inc-a", attempt="0", exclude_nodes=(node,)))
        assert result.outcome == "done", result.detail
        assert result.verified, result.detail
        assert result.excluded_nodes == (node,)
        # the engine retries the same decision (e.g. after a crash): no second requeue
        retry = s.act(request(Action.REQUEUE_EXCLUDING, job, "inc-a", attempt="0", exclude_nodes=(node,)))
        assert retry.outcome == "done"
        assert "not requeued again" in retry.detail
        again = wait_running(lab, s, job, 1, 3, decided)
        assert node not in again
        assert again == {"n1", "n2", "n3", "n4"} - {node}
        obs = s.observe("lab", job)
        assert obs.attempt == 1
        assert obs.excluded_nodes == (node,)
        assert obs.extra.get("trainguard_held_at") is None  # hold mark cleared after release

        registry = CollectorRegistry()
        registry.register(SlurmCollector(s, "lab", workloads=lambda: [job]))
        ids = {"cluster": "lab", "workload": job, "scheduler": "slurm"}
        assert registry.get_sample_value("trainguard_slurm_job_restart_count", ids) == 1
        assert registry.get_sample_value("trainguard_slurm_job_state", {**ids, "state": "RUNNING"}) == 1
    finally:
        lab.cancel(job)


def test_second_incident_carries_the_earlier_exclusion(lab: Lab) -> None:
    s = lab.scheduler()
    job = lab.submit(2)
    try:
        first = wait_running(lab, s, job, 0, 2, 0)
        one = sorted(first)[-1]
        t = time.time()
        r1 = s.act(request(Action.REQUEUE_EXCLUDING, job, "inc-b1", attempt="0", exclude_nodes=(one,)))
        assert r1.verified, r1.detail
        second = wait_running(lab, s, job, 1, 2, t)
        assert one not in second
        two = sorted(second)[0]
        t = time.time()
        # the core sends the whole set: the earlier node and the new one
        r2 = s.act(request(Action.REQUEUE_EXCLUDING, job, "inc-b2", attempt="1", exclude_nodes=(one, two)))
        assert r2.verified, r2.detail
        assert set(r2.excluded_nodes) == {one, two}
        third = wait_running(lab, s, job, 2, 2, t)
        assert third == {"n1", "n2", "n3", "n4"} - {one, two}
        assert set(s.observe("lab", job).excluded_nodes) == {one, two}
    finally:
        lab.cancel(job)


def test_drain_and_resume(lab: Lab) -> None:
    s = lab.scheduler()
    drained = s.act(request(Action.DRAIN_NODE, "1", "inc-c", node="n4"))
    assert drained.verified, drained.detail
    node = s.list_nodes()["n4"]
    assert node.drain
    assert node.reason == "trainguard: inc-c"
    assert s.act(request(Action.DRAIN_NODE, "1", "inc-c", node="n4")).outcome == "done"
    resumed = s.act(request(Action.RESUME_NODE, "1", "inc-c", node="n4"))
    assert resumed.verified, resumed.detail
    assert not s.list_nodes()["n4"].drain


def test_stop(lab: Lab) -> None:
    s = lab.scheduler()
    job = lab.submit(1)
    try:
        wait_running(lab, s, job, 0, 1, 0)
        stopped = s.act(request(Action.STOP, job, "inc-d"))
        assert stopped.verified, stopped.detail
        wait_until(lambda: s.observe("lab", job).state is WorkloadState.CANCELLED, 20, 0.2, "cancelled")
        assert s.act(request(Action.STOP, job, "inc-d")).outcome == "done"
    finally:
        lab.cancel(job)


KILLED_RESPONDER = """
import os, signal, sys
from responder.model import Action
from responder.schedulers.base import ActionRequest
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.settings import SlurmSettings
from responder.schedulers.slurm.commands import SubprocessRunner

inner = SubprocessRunner()
def runner(argv, timeout):
    result = inner(argv, timeout)
    if list(argv[:2]) == ["scontrol", "requeuehold"]:
        os.kill(os.getpid(), signal.SIGKILL)  # the responder dies between requeuehold and release
    return result

s = SlurmScheduler(SlurmSettings(cluster="lab", slurm_conf=sys.argv[1]), runner=runner)
s.act(ActionRequest(Action.REQUEUE_EXCLUDING, "lab", sys.argv[2], "inc-e", "t", attempt="0",
                    exclude_nodes=("n2",)))
print("not reached")
"""


def test_watchdog_releases_a_job_left_held_by_a_killed_responder(lab: Lab) -> None:
    s = lab.scheduler()
    job = lab.submit(3)
    try:
        wait_running(lab, s, job, 0, 3, 0)
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(KILLED_RESPONDER), str(lab.conf), job],
            cwd=ROOT, env=lab.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        obs = s.observe("lab", job)
        assert obs.state is WorkloadState.HELD
        assert "trainguard_held_at" in obs.extra

        parser = argparse.ArgumentParser()
        watchdog.add_parser(parser.add_subparsers())
        out = io.StringIO()
        young = parser.parse_args(["watchdog", "--once", "--max-hold", "3600", "--slurm-conf", str(lab.conf)])
        assert young.handler(young, out) == 0
        assert s.observe("lab", job).state is WorkloadState.HELD  # lease not over: left alone
        released_at = time.time()
        args = parser.parse_args(
            ["watchdog", "--once", "--max-hold", "0.5", "--slurm-conf", str(lab.conf), "--cluster", "lab"]
        )
        time.sleep(1.0)
        assert args.handler(args, out) == 0
        records = [json.loads(line) for line in out.getvalue().splitlines()]
        assert [r["workload"] for r in records] == [job]
        assert records[0]["outcome"] == "done"
        assert records[0]["incident_id"] == "inc-e"
        wait_running(lab, s, job, 1, 3, released_at)
        # the restarted responder retries its decision: the job is past attempt 0, nothing is requeued
        retry = s.act(request(Action.REQUEUE_EXCLUDING, job, "inc-e", attempt="0", exclude_nodes=("n2",)))
        assert retry.outcome == "done"
        assert s.observe("lab", job).attempt == 1
    finally:
        lab.cancel(job)


def test_ssh_forced_command_path_against_the_real_lab(lab: Lab) -> None:
    """The ssh transport with sshd replaced by running the forced command locally (no sshd needed)."""

    def fake_ssh(argv: Sequence[str], timeout: float) -> CommandResult:
        assert argv[0] == "ssh"
        env = {**lab.env, "SSH_ORIGINAL_COMMAND": argv[-1]}
        proc = subprocess.run(
            [sys.executable, str(FORCED)], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    s = SlurmScheduler(
        SlurmSettings(cluster="lab", transport="ssh", ssh_host="head"), runner=fake_ssh, registry=CollectorRegistry()
    )
    job = lab.submit(1, "--begin=now+3600")
    try:
        assert s.observe("lab", job).state is WorkloadState.PENDING
        held = s.act(request(Action.HOLD, job, "inc-f"))
        assert held.verified, held.detail
        released = s.act(request(Action.RELEASE, job, "inc-f"))
        assert released.verified, released.detail
        assert s.observe("lab", job).state is WorkloadState.PENDING
    finally:
        lab.cancel(job)


def test_unknown_job_is_unknown(lab: Lab) -> None:
    assert lab.scheduler().observe("lab", "999999").state is WorkloadState.UNKNOWN


def test_collector_sees_a_lost_node_no_rank_could_report(lab: Lab) -> None:
    """Last in the module: it kills n4's slurmd (and its tasks), then brings it back."""
    s = lab.scheduler()
    job = lab.submit(1, "-w", "n4")
    registry = CollectorRegistry()
    registry.register(SlurmCollector(s, "lab", workloads=lambda: [job]))
    try:
        wait_running(lab, s, job, 0, 1, 0)
        lab.sh(str(LAB), "kill-node", "n4")
        labels = {"cluster": "lab", "host": "n4"}
        wait_until(
            lambda: registry.get_sample_value("trainguard_slurm_node_not_responding", labels) == 1,
            timeout=40, interval=0.5, what="n4 not responding in trainguard_slurm_node_*",
        )  # fmt: skip
        assert registry.get_sample_value("trainguard_slurm_up", {"cluster": "lab"}) == 1
    finally:
        lab.cancel(job)
        lab.sh(str(LAB), "start-node", "n4")
        wait_until(lambda: s.list_nodes()["n4"].usable, timeout=40, interval=0.5, what="n4 back")
