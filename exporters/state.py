"""Per-rank state on this node: the progress hook's files, the log progress parser, process liveness.

``ProgressTracker.refresh()`` reads the state directory (validating every value that becomes a label with
``trainguard.identity``), checks each rank's process, and remembers when it last saw each one alive. The
Prometheus collector and the exporter's poll loop both call it; transitions alive -> gone (without a
clean exit) are handed to the fast path.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.identity import (
    IdentityError,
    validate_decimal,
    validate_host,
    validate_scheduler,
    validate_workload,
)

IDENTITY_LABELS: Final = ("cluster", "workload", "scheduler", "attempt", "rank", "host")
MAX_STATE_BYTES: Final = 64 * 1024
_GPU: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")  # an index or an NVML UUID (GPU-...)


class Identity(NamedTuple):
    cluster: str
    workload: str
    scheduler: str
    attempt: str
    rank: str
    host: str


def identity_from_state(raw: Mapping[str, Any], cluster: str) -> Identity:
    """Validated identity labels from a state file; raises IdentityError (or KeyError/TypeError)."""
    scheduler = validate_scheduler(str(raw["scheduler"]))
    return Identity(
        cluster,
        validate_workload(str(raw["workload"]), scheduler),
        scheduler,
        validate_decimal("attempt", str(raw.get("attempt", "0"))),
        validate_decimal("rank", str(raw["rank"])),
        validate_host(str(raw["host"])),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(slots=True)
class RankState:
    identity: Identity
    path: str
    pid: int | None
    pid_start: str | None
    pid_ns: str | None
    streams: list[tuple[int, int]]
    gpus: list[str]
    step: float | None
    step_time: float | None
    step_duration: float | None
    samples_per_second: float | None
    heartbeat: float | None
    checkpoint_step: float | None
    checkpoint_time: float | None
    exited: bool
    mtime: float

    @classmethod
    def parse(cls, data: Mapping[str, Any], cluster: str, path: str, mtime: float) -> RankState:
        ident = identity_from_state(data["identity"], cluster)
        pid = data.get("pid")
        streams = []
        for s in data.get("streams") or []:
            if isinstance(s, dict) and isinstance(s.get("dev"), int) and isinstance(s.get("ino"), int):
                streams.append((s["dev"], s["ino"]))
        gpus = [str(g) for g in data.get("gpus") or [] if isinstance(g, str | int) and _GPU.fullmatch(str(g))]
        return cls(
            identity=ident,
            path=path,
            gpus=gpus[:16],
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
            pid_start=str(data["pid_start"]) if data.get("pid_start") is not None else None,
            pid_ns=str(data["pid_ns"]) if data.get("pid_ns") is not None else None,
            streams=streams,
            step=_number(data.get("step")),
            step_time=_number(data.get("step_time")),
            step_duration=_number(data.get("step_duration")),
            samples_per_second=_number(data.get("samples_per_second")),
            heartbeat=_number(data.get("heartbeat")),
            checkpoint_step=_number(data.get("checkpoint_step")),
            checkpoint_time=_number(data.get("checkpoint_time")),
            exited=data.get("exited") is True,
            mtime=mtime,
        )


def _own_pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_alive(pid: int, pid_start: str | None) -> bool:
    """Whether ``pid`` runs and is the same process (start time) the hook recorded."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if pid_start is None:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    # a zombie has exited already
    return len(fields) > 19 and fields[19] == pid_start and fields[0] != "Z"


@dataclass(slots=True)
class LogProgress:
    """Progress parsed from log lines for a rank that has no hook."""

    step: float
    step_time: float
    step_duration: float | None = None


def process_stuck(pid: int) -> bool | None:
    """Whether the process cannot progress on its own: stopped by a signal or a tracer (``T``/``t``)
    or in uninterruptible sleep (``D``: stuck in the kernel or a driver). None: cannot read it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t", "D")
    except (OSError, IndexError):
        return None


@dataclass(slots=True)
class _Seen:
    alive: bool | None = None  # None: cannot tell (another pid namespace)
    last_alive: float | None = None
    stuck: bool | None = None


@dataclass
class Transition:
    identity: Identity
    state: RankState


@dataclass
class ProgressTracker:
    directory: Path
    cluster: str
    state_ttl: float = 3600.0
    clock: Callable[[], float] = time.time
    alive: Callable[[int, str | None], bool] = process_alive
    stuck: Callable[[int], bool | None] = process_stuck
    own_pid_ns: str | None = field(default_factory=_own_pid_namespace)
    states: dict[str, RankState] = field(default_factory=dict)
    log_progress: dict[Identity, LogProgress] = field(default_factory=dict)
    seen: dict[Identity, _Seen] = field(default_factory=dict)
    invalid_files: int = 0
    gone: list[Transition] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> list[Transition]:
        """Re-read the state directory; returns ranks whose process vanished without a clean exit."""
        now = self.clock()
        fresh: dict[str, RankState] = {}
        invalid = 0
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            entries = []
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                st = entry.stat()
                if st.st_size > MAX_STATE_BYTES or now - st.st_mtime > self.state_ttl:
                    continue
                with open(entry.path, "rb") as f:
                    data = json.loads(f.read(MAX_STATE_BYTES))
                fresh[entry.path] = RankState.parse(data, self.cluster, entry.path, st.st_mtime)
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError, IdentityError):
                invalid += 1
        gone: list[Transition] = []
        with self.lock:
            self.states = fresh
            self.invalid_files = invalid
            live = {s.identity for s in fresh.values()}
            for ident in [i for i in self.seen if i not in live]:
                del self.seen[ident]
            for s in fresh.values():
                seen = self.seen.setdefault(s.identity, _Seen())
                can_tell = s.pid is not None and (s.pid_ns is None or s.pid_ns == self.own_pid_ns)
                if not can_tell:
                    seen.alive, seen.last_alive = None, s.heartbeat
                    continue
                assert s.pid is not None
                alive = self.alive(s.pid, s.pid_start)
                seen.stuck = self.stuck(s.pid) if alive else None
                if alive:
                    seen.last_alive = now
                elif seen.last_alive is None:
                    seen.last_alive = s.heartbeat
                if seen.alive and not alive and not s.exited:
                    gone.append(Transition(s.identity, s))
                seen.alive = alive
            self.gone.extend(gone[: max(0, 10_000 - len(self.gone))])
        return gone

    def take_gone(self) -> list[Transition]:
        """Ranks that vanished since the last call, whichever refresh (poll or scrape) saw it."""
        with self.lock:
            gone, self.gone = self.gone, []
        return gone

    def record_log_step(self, ident: Identity, step: float, when: float) -> None:
        with self.lock:
            prev = self.log_progress.get(ident)
            duration = None
            if prev is not None and step > prev.step:
                duration = (when - prev.step_time) / (step - prev.step)
            elif prev is not None:
                duration = prev.step_duration
            if prev is None or step != prev.step:
                self.log_progress[ident] = LogProgress(step, when, duration)

    def identities(self) -> list[Identity]:
        with self.lock:
            return [s.identity for s in self.states.values()]

    def live_identities(self) -> list[Identity]:
        """Ranks that have not exited and whose process is alive (or cannot be checked)."""
        with self.lock:
            return [
                s.identity
                for s in self.states.values()
                if not s.exited and (seen := self.seen.get(s.identity)) is not None and seen.alive is not False
            ]

    def recent_identities(self, within_s: float) -> list[Identity]:
        """Live ranks, and ranks whose process was alive (or wrote its state) within ``within_s``.

        A GPU that falls off the bus kills its rank in the same moment the kernel logs the XID: by the
        time the exporter reads that line, the rank may be gone. The line still belongs to it.
        """
        now = self.clock()
        with self.lock:
            found = []
            for s in self.states.values():
                seen = self.seen.get(s.identity)
                alive = seen is not None and seen.alive is not False and not s.exited
                last = max(s.mtime, (seen.last_alive if seen is not None else None) or 0.0)
                if alive or now - last <= within_s:
                    found.append(s.identity)
            return found

    def identity_for_gpu(self, index: str, uuid: str | None) -> Identity | None:
        """The live rank that records this GPU (by UUID or index); None when none or several do."""
        with self.lock:
            found = {
                s.identity
                for s in self.states.values()
                if not s.exited and (index in s.gpus or (uuid is not None and uuid in s.gpus))
            }
        return found.pop() if len(found) == 1 else None

    def identities_for_stream(self, dev: int, ino: int) -> list[Identity]:
        with self.lock:
            return [s.identity for s in self.states.values() if (dev, ino) in s.streams]


_GAUGES: Final = (
    ("trainguard_rank_step", "Last completed global training step of the rank."),
    ("trainguard_rank_last_step_timestamp_seconds", "Unix time the rank last completed a step."),
    ("trainguard_rank_step_duration_seconds", "Wall time of the rank's last step."),
    ("trainguard_rank_samples_per_second", "The rank's recent throughput."),
    ("trainguard_rank_heartbeat_timestamp_seconds", "Last time the exporter saw the rank's process alive."),
    (
        "trainguard_rank_process_alive",
        "1 while the rank's process runs, 0 once it is gone without a clean exit (absent: cannot tell).",
    ),
    (
        "trainguard_rank_process_stuck",
        "1 while the rank's process cannot progress on its own: stopped (T/t) or in uninterruptible sleep (D).",
    ),
    ("trainguard_checkpoint_last_saved_timestamp_seconds", "Unix time of the rank's newest complete checkpoint."),
    ("trainguard_checkpoint_last_saved_step", "Step of that checkpoint."),
)


class ProgressCollector(Collector):
    """Per-rank gauges, fresh at each scrape from the state files and the log progress parser."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self.tracker = tracker

    def collect(self) -> Iterator[Metric]:
        self.tracker.refresh()
        fams = {name: GaugeMetricFamily(name, doc, labels=IDENTITY_LABELS) for name, doc in _GAUGES}

        def put(name: str, ident: Identity, value: float | None) -> None:
            if value is not None:
                fams[name].add_metric(list(ident), value)

        t = self.tracker
        with t.lock:
            hooked = set()
            for s in t.states.values():
                ident = s.identity
                hooked.add(ident)
                seen = t.seen.get(ident, _Seen())
                if s.exited and not seen.alive:
                    continue  # finished normally: its series end (stale) instead of looking like a crash
                put("trainguard_rank_step", ident, s.step)
                put("trainguard_rank_last_step_timestamp_seconds", ident, s.step_time)
                put("trainguard_rank_step_duration_seconds", ident, s.step_duration)
                put("trainguard_rank_samples_per_second", ident, s.samples_per_second)
                put("trainguard_rank_heartbeat_timestamp_seconds", ident, seen.last_alive)
                if seen.alive is not None:
                    put("trainguard_rank_process_alive", ident, 1.0 if seen.alive else 0.0)
                if seen.stuck is not None:
                    put("trainguard_rank_process_stuck", ident, 1.0 if seen.stuck else 0.0)
                put("trainguard_checkpoint_last_saved_timestamp_seconds", ident, s.checkpoint_time)
                put("trainguard_checkpoint_last_saved_step", ident, s.checkpoint_step)
            for ident, lp in t.log_progress.items():
                if ident in hooked:
                    continue
                put("trainguard_rank_step", ident, lp.step)
                put("trainguard_rank_last_step_timestamp_seconds", ident, lp.step_time)
                put("trainguard_rank_step_duration_seconds", ident, lp.step_duration)
        yield from fams.values()


DEFAULT_PROGRESS_PATTERNS: Final = (
    r"\b[Ss]tep[ :=]+(?P<step>\d+)\b",
    r"\biteration\s+(?P<step>\d+)\s*/\s*\d+",
)


def compile_progress_patterns(patterns: list[str]) -> re.Pattern[bytes] | None:
    """One bytes regex for all progress patterns; each must have a ``step`` group."""
    if not patterns:
        return None
    parts = []
    for i, p in enumerate(patterns):
        rx = re.compile(p)
        if "step" not in rx.groupindex:
            raise ValueError(f"progress pattern {p!r} has no (?P<step>...) group")
        parts.append(f"(?:{p.replace('(?P<step>', f'(?P<step{i}>')})")
    return re.compile("|".join(parts).encode())
