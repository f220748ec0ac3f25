"""Progress hook for training code: standard library only, no thread, no network.

Call it from the training loop::

    from exporters import progress

    for step in range(start, steps):
        train_one_step()
        progress.step(step, samples=global_batch_size)
        if step % 1000 == 0:
            save_checkpoint()
            progress.checkpoint_saved(step)

Each rank writes one small JSON state file (temp file + ``os.replace``, so a reader never sees half a
file) under ``TRAINGUARD_PROGRESS_DIR`` (default ``/tmp/trainguard-progress``), at most once per
``TRAINGUARD_PROGRESS_INTERVAL`` seconds (default 1) unless something important happened (first step,
checkpoint, exit). The file records the rank's identity, taken from the scheduler's environment, so the
node's ``trainguard exporter`` needs no knowledge of the job. A write that fails is logged once and
otherwise ignored: the hook never breaks training.

This file may be copied on its own into a code base that cannot install trainguard.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import socket
import stat
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

FORMAT_VERSION: Final = 1
DEFAULT_DIR: Final = "/tmp/trainguard-progress"  # noqa: S108 - shared with the exporter's default, documented
JOBSET_RESTART_LABEL: Final = "jobset.sigs.k8s.io/restart-attempt"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_log = logging.getLogger("trainguard.progress")


def identity_from_environ(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The rank's identity labels from the scheduler's environment (raw strings; the exporter validates).

    ``TRAINGUARD_WORKLOAD``, ``TRAINGUARD_SCHEDULER``, ``TRAINGUARD_ATTEMPT``, ``TRAINGUARD_RANK`` and
    ``TRAINGUARD_HOST`` override what is detected. Slurm: ``SLURM_JOB_ID`` (or array job and task),
    ``SLURM_RESTART_COUNT`` (0 when unset), ``SLURMD_NODENAME``; Kubernetes: ``POD_NAMESPACE`` with
    ``JOBSET_NAME`` or ``PYTORCHJOB_NAME``, ``JOBSET_RESTART_ATTEMPT`` (the child Job's
    ``jobset.sigs.k8s.io/restart-attempt`` label or annotation through the downward API), ``NODE_NAME``.
    The rank is ``RANK`` (torchrun, PyTorchJob) or else ``SLURM_PROCID``.
    """
    env = os.environ if env is None else env
    ident: dict[str, str] = {}
    if env.get("SLURM_JOB_ID"):
        ident["scheduler"] = "slurm"
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            ident["workload"] = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        else:
            ident["workload"] = env["SLURM_JOB_ID"]
        ident["attempt"] = env.get("SLURM_RESTART_COUNT") or "0"
        if env.get("SLURMD_NODENAME"):
            ident["host"] = env["SLURMD_NODENAME"]
    elif env.get("JOBSET_NAME") or env.get("PYTORCHJOB_NAME"):
        namespace = env.get("POD_NAMESPACE") or env.get("NAMESPACE") or "default"
        if env.get("JOBSET_NAME"):
            ident["scheduler"] = "jobset"
            ident["workload"] = f"{namespace}/{env['JOBSET_NAME']}"
            ident["attempt"] = env.get("JOBSET_RESTART_ATTEMPT") or "0"
        else:
            ident["scheduler"] = "pytorchjob"
            ident["workload"] = f"{namespace}/{env['PYTORCHJOB_NAME']}"
            ident["attempt"] = env.get("PYTORCHJOB_RESTART_ATTEMPT") or "0"
        if env.get("NODE_NAME"):
            ident["host"] = env["NODE_NAME"]
    rank = env.get("RANK") or env.get("SLURM_PROCID")
    if rank:
        ident["rank"] = rank
    for key in ("workload", "scheduler", "attempt", "rank", "host"):
        override = env.get(f"TRAINGUARD_{key.upper()}")
        if override:
            ident[key] = override
    ident.setdefault("host", socket.gethostname().split(".")[0])
    return ident


def gpus_from_environ(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPU(s) this rank uses, as the exporter's NVML names them: a UUID or an index.

    ``TRAINGUARD_GPU`` wins; else the entry of ``CUDA_VISIBLE_DEVICES`` (or ``NVIDIA_VISIBLE_DEVICES``,
    UUIDs under Kubernetes) for this local rank (``LOCAL_RANK``, ``SLURM_LOCALID``); else the local rank.
    Indices are only right where the job and the node number GPUs alike; UUIDs always are.
    """
    env = os.environ if env is None else env
    if env.get("TRAINGUARD_GPU"):
        return [g for g in env["TRAINGUARD_GPU"].split(",") if g]
    visible = [
        g.strip()
        for g in (env.get("CUDA_VISIBLE_DEVICES") or env.get("NVIDIA_VISIBLE_DEVICES") or "").split(",")
        if g.strip() and g.strip() not in ("all", "none", "void")
    ]
    local = env.get("LOCAL_RANK") or env.get("SLURM_LOCALID")
    if len(visible) == 1:
        return visible
    if local is not None and local.isdigit() and int(local) < len(visible):
        return [visible[int(local)]]
    if visible:
        return visible
    return [local] if local is not None and local.isdigit() else []


def state_file_name(ident: Mapping[str, str]) -> str:
    parts = (ident.get("workload", "unknown"), ident.get("attempt", "0"), ident.get("rank", "0"))
    return "{}-a{}-r{}.json".format(*(_UNSAFE.sub("_", p) for p in parts))


def _proc_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _streams() -> list[dict[str, Any]]:
    """Where this process's stdout and stderr go, when they are regular files (the exporter maps logs)."""
    out: list[dict[str, Any]] = []
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            out.append({"fd": fd, "path": path, "dev": st.st_dev, "ino": st.st_ino})
    return out


class Reporter:
    """One rank's progress. Cheap to call every step: a write at most every ``min_interval`` seconds."""

    def __init__(
        self,
        directory: str | None = None,
        identity: Mapping[str, str] | None = None,
        min_interval: float | None = None,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.directory = directory or env.get("TRAINGUARD_PROGRESS_DIR") or DEFAULT_DIR
        self.identity = dict(identity) if identity is not None else identity_from_environ(env)
        if min_interval is None:
            min_interval = float(env.get("TRAINGUARD_PROGRESS_INTERVAL") or 1.0)
        self.min_interval = min_interval
        self._clock = clock
        self.path = os.path.join(self.directory, state_file_name(self.identity))
        pid = os.getpid()
        self._state: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "pid": pid,
            "pid_start": _proc_start_time(pid),
            "pid_ns": _pid_namespace(),
            "identity": self.identity,
            "gpus": gpus_from_environ(env),
            "streams": _streams(),
            "step": None,
            "step_time": None,
            "step_duration": None,
            "samples_per_second": None,
            "heartbeat": None,
            "checkpoint_step": None,
            "checkpoint_time": None,
            "exited": False,
        }
        self._last_write = float("-inf")
        self._window_start: float | None = None
        self._window_samples = 0.0
        self._failed = False

    def step(self, n: int, samples: float | None = None, duration: float | None = None) -> None:
        """Step ``n`` is complete; ``samples`` were processed in it (for samples/second).

        ``duration``: the rank's own busy time for the step, without waiting for its peers. Under
        synchronous training every rank's wall time per step is the slowest rank's, so only this
        tells a straggler apart; without it the step duration is the wall time between steps.
        """
        now = self._clock()
        st = self._state
        prev_step, prev_time = st["step"], st["step_time"]
        if duration is not None:
            st["step_duration"] = float(duration)
        elif prev_step is not None and prev_time is not None and n > prev_step:
            st["step_duration"] = (now - prev_time) / (n - prev_step)
        if samples is not None:
            if self._window_start is None:  # the first step's start time is unknown: the window opens here
                self._window_start = now
            else:
                self._window_samples += samples
        st["step"], st["step_time"], st["heartbeat"] = n, now, now
        self._maybe_write(now, force=prev_step is None)

    def checkpoint_saved(self, step: int) -> None:
        """A complete checkpoint of ``step`` is on storage."""
        now = self._clock()
        self._state.update(checkpoint_step=step, checkpoint_time=now, heartbeat=now)
        self._maybe_write(now, force=True)

    def heartbeat(self) -> None:
        """Alive but not stepping (evaluation, data loading): keeps the state file fresh."""
        now = self._clock()
        self._state["heartbeat"] = now
        self._maybe_write(now, force=False)

    def close(self) -> None:
        """The process ends normally (registered with atexit): the exporter will not call it a crash."""
        self._state["exited"] = True
        self._maybe_write(self._clock(), force=True)

    def _maybe_write(self, now: float, force: bool) -> None:
        if not force and now - self._last_write < self.min_interval:
            return
        if self._window_start is not None and now > self._window_start:
            self._state["samples_per_second"] = self._window_samples / (now - self._window_start)
            self._window_start, self._window_samples = now, 0.0
        self._last_write = now
        self._write()

    def _write(self) -> None:
        tmp = os.path.join(self.directory, f".{os.path.basename(self.path)}.{os.getpid()}.tmp")
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._state, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                _log.warning("trainguard progress: cannot write %s: %s (further failures are silent)", tmp, exc)


_default: Reporter | None = None


def reporter() -> Reporter:
    """The process-wide reporter, created on first use from the environment."""
    global _default  # noqa: PLW0603 - one reporter per process is the point of the module-level API
    if _default is None:
        _default = Reporter()
        atexit.register(_default.close)
    return _default


def step(n: int, samples: float | None = None, duration: float | None = None) -> None:
    reporter().step(n, samples=samples, duration=duration)


def checkpoint_saved(step: int) -> None:
    reporter().checkpoint_saved(step)


def heartbeat() -> None:
    reporter().heartbeat()
