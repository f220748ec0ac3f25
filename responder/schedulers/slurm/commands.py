"""The one seam through which trainguard runs Slurm commands.

Every call is an argv list run with ``shell=False`` and a timeout, through one of two transports:
``local`` (the commands on this machine, e.g. on the head node) or ``ssh`` (to a head node whose
``authorized_keys`` entry forces ``slurm/trainguard_ssh_command.py``, which allows only the verbs below).
Every failure is counted and raised as ``SchedulerError``: a failed ``squeue`` means "unknown", never
"no jobs". Tests swap the ``runner`` for recorded real output.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from prometheus_client import CollectorRegistry

from responder.schedulers.base import SchedulerError
from responder.schedulers.seam import Seam, SeamMetrics

log = logging.getLogger(__name__)

VERBS: Final = frozenset({"squeue", "sinfo", "scontrol", "scancel"})


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


# A runner executes one argv with a timeout (seconds). It may raise subprocess.TimeoutExpired or OSError.
Runner = Callable[[Sequence[str], float], CommandResult]


class SlurmCommandError(SchedulerError):
    """A Slurm command ran and failed (non-zero exit); ``stderr`` says why, in Slurm's words."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        text = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(f"{shlex.join(argv)}: exit {returncode}: {text}"[:500])
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr


class SubprocessRunner:
    """Runs argv with ``subprocess.run`` (never a shell), with ``env`` added to the environment."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = {**os.environ, **env} if env else None

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        proc = subprocess.run(
            list(argv), shell=False, capture_output=True, text=True, timeout=timeout, env=self._env, check=False
        )
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True, slots=True)
class Transport:
    """How argv reaches Slurm. ``ssh``: one ssh call per command, host keys checked, no agent, no tty."""

    kind: Literal["local", "ssh"] = "local"
    ssh_host: str | None = None
    ssh_user: str | None = None
    ssh_port: int = 22
    ssh_key: str | None = None
    ssh_known_hosts: str | None = None
    ssh_binary: str = "ssh"

    def wrap(self, argv: Sequence[str], timeout: float) -> list[str]:
        if self.kind == "local":
            return list(argv)
        if not self.ssh_host:
            raise SchedulerError("ssh transport without ssh_host")
        cmd = [
            self.ssh_binary,
            "-T",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={max(1, int(timeout))}",
            "-o", "ForwardAgent=no",
            "-o", "ClearAllForwardings=yes",
            "-p", str(self.ssh_port),
        ]  # fmt: skip
        if self.ssh_known_hosts:
            cmd += ["-o", f"UserKnownHostsFile={self.ssh_known_hosts}"]
        if self.ssh_key:
            cmd += ["-i", self.ssh_key, "-o", "IdentitiesOnly=yes"]
        if self.ssh_user:
            cmd += ["-l", self.ssh_user]
        # The remote side gets one string (SSH_ORIGINAL_COMMAND); the forced command re-splits it
        # with shlex and validates every word, so quoting here only has to be exact, not safe.
        return [*cmd, "--", self.ssh_host, shlex.join(argv)]


class SlurmCommandMetrics(SeamMetrics):
    """The Slurm seam's metrics; share one per registry (``SlurmScheduler(..., metrics=m)``)."""

    SEAM = Seam("trainguard_slurm_command", "command", "Slurm commands", "run",
                "ok, exit, timeout, spawn", "non-zero exit, timeout, could not start",
                (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))  # fmt: skip


@dataclass
class SlurmCommands:
    """The seam. ``run(["squeue", "--json"])`` returns stdout or raises ``SchedulerError``."""

    transport: Transport
    runner: Runner
    timeout: float = 10.0
    metrics: SlurmCommandMetrics = field(default_factory=SlurmCommandMetrics)
    cluster: str = "default"
    clock: Callable[[], float] = time.monotonic
    failure_count: int = field(default=0, init=False)

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def _fail(self, verb: str, reason: str) -> None:
        self.failure_count += 1
        self.metrics.failures.labels(self.cluster, verb, reason).inc()
        self.metrics.calls.labels(self.cluster, verb, reason).inc()

    def run(self, argv: Sequence[str]) -> str:
        if not argv or argv[0] not in VERBS:
            raise SchedulerError(f"not a Slurm verb trainguard uses: {argv[:1]!r}")
        if any(not isinstance(a, str) or "\x00" in a or "\n" in a for a in argv):
            raise SchedulerError("refusing an argument with NUL or newline")
        verb = argv[0]
        full = self.transport.wrap(argv, self.timeout)
        started = self.clock()
        try:
            result = self.runner(full, self.timeout)
        except subprocess.TimeoutExpired as exc:
            self._fail(verb, "timeout")
            raise SchedulerError(f"{shlex.join(argv)}: no answer within {self.timeout:g}s") from exc
        except OSError as exc:
            self._fail(verb, "spawn")
            raise SchedulerError(f"{shlex.join(argv)}: could not run: {exc}") from exc
        finally:
            self.metrics.duration.labels(self.cluster, verb).observe(max(0.0, self.clock() - started))
        if result.returncode != 0:
            self._fail(verb, "exit")
            err = SlurmCommandError(argv, result.returncode, result.stderr)
            log.warning("slurm command failed: %s", err)
            raise err
        self.metrics.calls.labels(self.cluster, verb, "ok").inc()
        return result.stdout
