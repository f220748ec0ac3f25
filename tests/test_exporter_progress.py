"""The progress hook (training side) and the exporter's reading of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporters import progress
from exporters.state import Identity, ProgressCollector, ProgressTracker, process_stuck

SLURM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "5", "SLURMD_NODENAME": "gpu-017"}


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_identity_from_slurm_environment() -> None:
    assert progress.identity_from_environ(SLURM_ENV) == {
        "scheduler": "slurm",
        "workload": "4242",
        "attempt": "0",
        "rank": "5",
        "host": "gpu-017",
    }
    env = {
        **SLURM_ENV,
        "SLURM_RESTART_COUNT": "2",
        "RANK": "13",
        "SLURM_ARRAY_JOB_ID": "77",
        "SLURM_ARRAY_TASK_ID": "3",
    }
    ident = progress.identity_from_environ(env)
    assert (ident["workload"], ident["attempt"], ident["rank"]) == ("77_3", "2", "13")


def test_identity_from_kubernetes_downward_api() -> None:
    env = {
        "JOBSET_NAME": "llama-70b",
        "POD_NAMESPACE": "ml",
        "JOBSET_RESTART_ATTEMPT": "3",
        "NODE_NAME": "node-a",
        "RANK": "7",
    }
    assert progress.identity_from_environ(env) == {
        "scheduler": "jobset",
        "workload": "ml/llama-70b",
        "attempt": "3",
        "rank": "7",
        "host": "node-a",
    }
    ident = progress.identity_from_environ({"PYTORCHJOB_NAME": "bert", "POD_NAMESPACE": "nlp", "RANK": "0"})
    assert (ident["scheduler"], ident["workload"], ident["attempt"]) == ("pytorchjob", "nlp/bert", "0")
    ident = progress.identity_from_environ({**env, "TRAINGUARD_ATTEMPT": "9"})
    assert ident["attempt"] == "9"


def test_hook_writes_atomic_state(tmp_path: Path) -> None:
    clock = Clock()
    r = progress.Reporter(str(tmp_path), env=SLURM_ENV, clock=clock, min_interval=1.0)
    r.step(10, samples=64)
    path = Path(r.path)
    assert path.name == "4242-a0-r5.json"
    state = json.loads(path.read_text())
    assert state["step"] == 10
    assert state["pid"] == os.getpid()
    assert state["identity"]["workload"] == "4242"
    clock.t += 0.5
    r.step(11, samples=64)  # throttled: not written yet
    assert json.loads(path.read_text())["step"] == 10
    clock.t += 0.5
    r.step(12, samples=64)
    state = json.loads(path.read_text())
    assert state["step"] == 12
    assert state["step_duration"] == pytest.approx(0.5)
    assert state["samples_per_second"] == pytest.approx(128.0)
    r.checkpoint_saved(12)  # always written
    state = json.loads(path.read_text())
    assert (state["checkpoint_step"], state["checkpoint_time"]) == (12, clock.t)
    assert [p.name for p in tmp_path.iterdir()] == ["4242-a0-r5.json"], "no temp file left behind"


def test_hook_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = progress.Reporter(str(blocker / "sub"), env=SLURM_ENV)
    r.step(1)
    r.checkpoint_saved(1)


def test_hook_imports_nothing_but_the_standard_library() -> None:
    code = (
        "import sys; import exporters.progress; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('prometheus_client','httpx','trainguard','yaml')]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "[]"


def _write_state(directory: Path, **fields: object) -> Path:
    ident = {"scheduler": "slurm", "workload": "4242", "attempt": "1", "rank": "3", "host": "gpu-017"}
    state: dict[str, object] = {
        "version": 1,
        "pid": os.getpid(),
        "pid_start": None,
        "pid_ns": None,
        "identity": ident,
        "streams": [],
        "step": 100,
        "step_time": 990.0,
        "step_duration": 0.8,
        "samples_per_second": 80.0,
        "heartbeat": 990.0,
        "checkpoint_step": 50,
        "checkpoint_time": 900.0,
        "exited": False,
    }
    state.update(fields)
    path = directory / "4242-a1-r3.json"
    path.write_text(json.dumps(state))
    return path


IDENT = {"cluster": "lab", "workload": "4242", "scheduler": "slurm", "attempt": "1", "rank": "3", "host": "gpu-017"}


def test_collector_emits_rank_gauges_with_identity(tmp_path: Path) -> None:
    _write_state(tmp_path)
    clock = Clock(1_000.0)
    alive = {"yes": True}
    tracker = ProgressTracker(tmp_path, "lab", clock=clock, alive=lambda pid, start: alive["yes"])
    reg = CollectorRegistry()
    reg.register(ProgressCollector(tracker))
    assert reg.get_sample_value("trainguard_rank_step", IDENT) == 100
    assert reg.get_sample_value("trainguard_rank_last_step_timestamp_seconds", IDENT) == 990.0
    assert reg.get_sample_value("trainguard_rank_step_duration_seconds", IDENT) == 0.8
    assert reg.get_sample_value("trainguard_rank_samples_per_second", IDENT) == 80.0
    assert reg.get_sample_value("trainguard_checkpoint_last_saved_step", IDENT) == 50
    assert reg.get_sample_value("trainguard_checkpoint_last_saved_timestamp_seconds", IDENT) == 900.0
    # alive: the heartbeat is when the exporter last saw the process
    assert reg.get_sample_value("trainguard_rank_heartbeat_timestamp_seconds", IDENT) == 1_000.0
    assert reg.get_sample_value("trainguard_rank_process_alive", IDENT) == 1
    assert tracker.take_gone() == []
    # the process dies without a clean exit: heartbeat stops, process_alive 0, one transition
    alive["yes"] = False
    clock.t = 1_010.0
    assert reg.get_sample_value("trainguard_rank_heartbeat_timestamp_seconds", IDENT) == 1_000.0
    assert reg.get_sample_value("trainguard_rank_process_alive", IDENT) == 0
    gone = tracker.take_gone()
    assert [g.identity.rank for g in gone] == ["3"]
    clock.t = 1_020.0
    tracker.refresh()
    assert tracker.take_gone() == [], "reported once"


def test_clean_exit_is_not_a_crash(tmp_path: Path) -> None:
    _write_state(tmp_path, exited=True)
    alive = {"yes": True}
    tracker = ProgressTracker(tmp_path, "lab", clock=Clock(), alive=lambda pid, start: alive["yes"])
    tracker.refresh()
    alive["yes"] = False
    assert tracker.refresh() == []
    reg = CollectorRegistry()
    reg.register(ProgressCollector(tracker))
    # a finished rank's series end: neither "gone" nor a frozen heartbeat that looks like a crash
    assert reg.get_sample_value("trainguard_rank_process_alive", IDENT) is None
    assert reg.get_sample_value("trainguard_rank_heartbeat_timestamp_seconds", IDENT) is None


def test_gpu_mapping_from_the_environment() -> None:
    assert progress.gpus_from_environ({"CUDA_VISIBLE_DEVICES": "3"}) == ["3"]
    assert progress.gpus_from_environ({"CUDA_VISIBLE_DEVICES": "4,5,6,7", "LOCAL_RANK": "2"}) == ["6"]
    assert progress.gpus_from_environ({"NVIDIA_VISIBLE_DEVICES": "GPU-8a5f3f0c-1111"}) == ["GPU-8a5f3f0c-1111"]
    assert progress.gpus_from_environ({"SLURM_LOCALID": "1"}) == ["1"]
    assert progress.gpus_from_environ({"TRAINGUARD_GPU": "GPU-x", "LOCAL_RANK": "0"}) == ["GPU-x"]
    assert progress.gpus_from_environ({}) == []


def test_other_pid_namespace_uses_the_hooks_heartbeat(tmp_path: Path) -> None:
    _write_state(tmp_path, pid_ns="pid:[1]", heartbeat=995.0)
    tracker = ProgressTracker(tmp_path, "lab", clock=Clock(), own_pid_ns="pid:[2]")
    reg = CollectorRegistry()
    reg.register(ProgressCollector(tracker))
    assert reg.get_sample_value("trainguard_rank_heartbeat_timestamp_seconds", IDENT) == 995.0
    assert reg.get_sample_value("trainguard_rank_process_alive", IDENT) is None


def test_real_process_liveness(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        _write_state(tmp_path, pid=child.pid, pid_start=start)
        tracker = ProgressTracker(tmp_path, "lab")
        tracker.refresh()
        assert tracker.seen[Identity(**IDENT)].alive is True
        child.kill()
        child.wait(timeout=10)
        tracker.refresh()
        assert tracker.seen[Identity(**IDENT)].alive is False
        assert len(tracker.take_gone()) == 1
    finally:
        child.kill()
        child.wait(timeout=10)


@pytest.mark.parametrize(
    "bad",
    [
        {"identity": {"scheduler": "slurm", "workload": "42; rm -rf /", "rank": "0", "host": "gpu-1"}},
        {"identity": {"scheduler": "lsf", "workload": "42", "rank": "0", "host": "gpu-1"}},
        {"identity": {"scheduler": "slurm", "workload": "42", "rank": "-1", "host": "gpu-1"}},
        {"identity": {"scheduler": "slurm", "workload": "42", "rank": "0", "host": "gpu 1"}},
    ],
)
def test_invalid_state_files_are_skipped_and_counted(tmp_path: Path, bad: dict[str, object]) -> None:
    _write_state(tmp_path, **bad)
    (tmp_path / "garbage.json").write_text("{not json")
    tracker = ProgressTracker(tmp_path, "lab", clock=Clock())
    tracker.refresh()
    assert tracker.states == {}
    assert tracker.invalid_files == 2


def test_hook_file_round_trips_through_the_tracker(tmp_path: Path) -> None:
    clock = Clock(2_000.0)
    r = progress.Reporter(str(tmp_path), env={**SLURM_ENV, "SLURM_RESTART_COUNT": "1"}, clock=clock)
    r.step(7, samples=10)
    tracker = ProgressTracker(tmp_path, "lab", clock=clock)
    reg = CollectorRegistry()
    reg.register(ProgressCollector(tracker))
    labels = {**IDENT, "rank": "5", "attempt": "1"}
    assert reg.get_sample_value("trainguard_rank_step", labels) == 7
    assert reg.get_sample_value("trainguard_rank_process_alive", labels) == 1


def test_gpu_to_rank_mapping(tmp_path: Path) -> None:
    _write_state(tmp_path, gpus=["GPU-8a5f3f0c", "bad gpu!"])
    tracker = ProgressTracker(tmp_path, "lab", clock=Clock())
    tracker.refresh()
    assert tracker.identity_for_gpu("0", "GPU-8a5f3f0c") == Identity(**IDENT)
    assert tracker.identity_for_gpu("1", "GPU-other") is None
    assert next(iter(tracker.states.values())).gpus == ["GPU-8a5f3f0c"]


@pytest.mark.parametrize(("how", "exited"), [("normal", True), ("killed", False)])
def test_exit_is_recorded_only_when_clean(tmp_path: Path, how: str, exited: bool) -> None:
    code = "from exporters import progress; progress.step(1)"
    if how == "killed":
        code += "; import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    env = {**os.environ, **SLURM_ENV, "TRAINGUARD_PROGRESS_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=False, timeout=30)
    state = json.loads((tmp_path / "4242-a0-r5.json").read_text())
    assert state["exited"] is exited
    assert state["step"] == 1


def test_busy_duration_overrides_wall_time_between_steps(tmp_path: Path) -> None:
    """Under synchronous training only the rank's own busy time tells a straggler apart."""
    times = iter([100.0, 101.0, 102.0])
    rep = progress.Reporter(str(tmp_path), {"workload": "1", "rank": "0"}, min_interval=0, clock=lambda: next(times))
    rep.step(1)
    rep.step(2)
    assert json.loads(Path(rep.path).read_text())["step_duration"] == 1.0
    rep.step(3, duration=0.25)
    assert json.loads(Path(rep.path).read_text())["step_duration"] == 0.25


def test_a_stopped_process_is_reported_stuck(tmp_path: Path) -> None:
    """SIGSTOP (or a tracer, or a driver in D state) leaves a rank alive but unable to progress:
    the hang's laggard, told apart from the peers that merely wait for it in a collective."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_stuck(child.pid) is False
        child.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not process_stuck(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_stuck(child.pid) is True
    finally:
        child.kill()
        child.wait()
    assert process_stuck(child.pid) is None
