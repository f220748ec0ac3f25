"""Pure parsers for what Slurm prints: hostlists, ``squeue --json`` and ``sinfo --json`` (a job's
``AdminComment`` marker is read by ``responder.schedulers.slurm.marker``).

No I/O here, so every function is tested on output recorded from a real Slurm (``tests/data/slurm``).
Slurm 22.05 (openapi v0.0.38) prints ``job_state`` as a plain string and numbers as plain integers;
23.02 and later print state flag arrays (``["PENDING", "REQUEUED"]``) and numbers as
``{"set": true, "infinite": false, "number": 3}``. Both are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from responder.schedulers.base import SchedulerError, WorkloadState
from responder.schedulers.slurm.marker import Marker, parse_marker
from trainguard.identity import IdentityError, validate_host

MAX_HOSTLIST = 65536  # refuse to expand a hostlist into more names than any real cluster has


class SlurmParseError(SchedulerError):
    """Slurm answered, but not in a form we understand: the state is unknown."""


# ---------------------------------------------------------------------------------------- hostlists


def _split_top(expr: str) -> list[str]:
    """Split ``a[1-2],b,c[3,5]`` at the commas outside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(expr[start:])
    return parts


def _expand_ranges(body: str) -> list[str]:
    """``1-3,05,7-8`` -> ['1', '2', '3', '05', '7', '8'], keeping zero padding of each range."""
    out: list[str] = []
    for item in body.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad hostlist range {item!r}")
        if not sep:
            out.append(lo)
            continue
        start, end = int(lo), int(hi)
        if end < start:
            raise ValueError(f"descending hostlist range {item!r}")
        if end - start + len(out) >= MAX_HOSTLIST:
            raise ValueError(f"hostlist range {item!r} too large")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(start, end + 1))
    return out


def _expand_term(term: str) -> list[str]:
    open_at = term.find("[")
    if open_at < 0:
        return [term]
    close_at = term.index("]", open_at)
    prefix, body, rest = term[:open_at], term[open_at + 1 : close_at], term[close_at + 1 :]
    tails = _expand_term(rest)
    if len(tails) * max(1, body.count(",") + 1) > MAX_HOSTLIST:
        raise ValueError(f"hostlist {term!r} too large")
    names = [prefix + mid + tail for mid in _expand_ranges(body) for tail in tails]
    if len(names) > MAX_HOSTLIST:
        raise ValueError(f"hostlist {term!r} too large")
    return names


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """Expand a Slurm hostlist (``n[1-3,5]``, ``gpu[01-02]-ib,login1``) into node names, in order.

    Every name must be a valid host name (``trainguard.identity.validate_host``); anything else raises
    ``ValueError``. The empty string and Slurm's ``(null)`` give ``()``.
    """
    expr = expr.strip()
    if expr in ("", "(null)", "None"):
        return ()
    names: list[str] = []
    seen: set[str] = set()
    for term in _split_top(expr):
        if not term:
            raise ValueError(f"empty element in hostlist {expr!r}")
        for name in _expand_term(term):
            try:
                validate_host(name)
            except IdentityError as exc:
                raise ValueError(f"hostlist {expr!r} gives a bad node name {name!r}") from exc
            if name not in seen:
                seen.add(name)
                names.append(name)
            if len(names) > MAX_HOSTLIST:
                raise ValueError(f"hostlist {expr!r} too large")
    return tuple(names)


# --------------------------------------------------------------------------------------- job states

# Base job states (squeue/scontrol names) and what the core reasons about.
_JOB_STATES: Final[Mapping[str, WorkloadState]] = {
    "PENDING": WorkloadState.PENDING,
    "REQUEUED": WorkloadState.PENDING,
    "REQUEUE_FED": WorkloadState.PENDING,
    "REQUEUE_HOLD": WorkloadState.HELD,
    "SPECIAL_EXIT": WorkloadState.HELD,
    "RUNNING": WorkloadState.RUNNING,
    "CONFIGURING": WorkloadState.RUNNING,
    "RESIZING": WorkloadState.RUNNING,
    "SIGNALING": WorkloadState.RUNNING,
    "COMPLETING": WorkloadState.COMPLETING,
    "STAGE_OUT": WorkloadState.COMPLETING,
    "COMPLETED": WorkloadState.COMPLETED,
    "CANCELLED": WorkloadState.CANCELLED,
    "REVOKED": WorkloadState.CANCELLED,
    "FAILED": WorkloadState.FAILED,
    "TIMEOUT": WorkloadState.FAILED,
    "NODE_FAIL": WorkloadState.FAILED,
    "BOOT_FAIL": WorkloadState.FAILED,
    "DEADLINE": WorkloadState.FAILED,
    "OUT_OF_MEMORY": WorkloadState.FAILED,
    "PREEMPTED": WorkloadState.FAILED,
    # SUSPENDED and STOPPED are neither running nor pending: the core should not act on them.
    "SUSPENDED": WorkloadState.UNKNOWN,
    "STOPPED": WorkloadState.UNKNOWN,
}
# Flags that override the base state when present (23.02+ arrays, e.g. ["RUNNING", "COMPLETING"]).
_STATE_FLAG_OVERRIDES: Final = ("COMPLETING", "REQUEUE_HOLD", "SPECIAL_EXIT", "STAGE_OUT", "CONFIGURING")
_HOLD_REASONS: Final = frozenset({"JobHeldUser", "JobHeldAdmin"})


def job_state(raw: object, reason: str = "", priority: int | None = None) -> tuple[WorkloadState, str]:
    """Map Slurm's ``job_state`` (string or flag array) to (WorkloadState, Slurm's base state name).

    A pending job counts as HELD when Slurm says it is held (reason ``JobHeldUser``/``JobHeldAdmin``,
    or priority 0, which is what a hold sets); so does a job still COMPLETING after a requeuehold.
    Unknown names give ``UNKNOWN``, never a guess.
    """
    if isinstance(raw, str):
        names = [raw]
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw) and raw:
        names = list(raw)
    else:
        return WorkloadState.UNKNOWN, "UNKNOWN"
    names = [n.upper() for n in names]
    base = names[0]
    state = _JOB_STATES.get(base, WorkloadState.UNKNOWN)
    for flag in _STATE_FLAG_OVERRIDES:
        if flag in names[1:]:
            state = _JOB_STATES[flag]
            break
    if state is WorkloadState.PENDING and (reason in _HOLD_REASONS or priority == 0):
        state = WorkloadState.HELD
    elif state is WorkloadState.COMPLETING and reason in _HOLD_REASONS:
        # right after `scontrol requeuehold` 22.05 prints COMPLETING (the old tasks are being killed)
        # while the job is already pending and held (scontrol: JobState=PENDING, Priority=0)
        state = WorkloadState.HELD
    return state, base


# ---------------------------------------------------------------------------------------- squeue


def _num(value: object) -> int | None:
    """A Slurm number: a plain int (22.05) or ``{"set": bool, "infinite": bool, "number": n}`` (23.02+)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        number = value.get("number")
        return number if isinstance(number, int) and not isinstance(number, bool) else None
    return None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job from ``squeue --json``, reduced to what trainguard uses."""

    # what it is and how it stands
    job_id: str
    state: WorkloadState
    slurm_state: str
    reason: str
    restart_cnt: int
    requeue: bool
    priority: int | None
    # where it runs, and where it must not
    partitions: tuple[str, ...]
    nodes: tuple[str, ...]
    node_count: int
    batch_host: str
    excluded_nodes: tuple[str, ...]
    # what people, and trainguard, wrote on it
    comment: str
    admin_comment: str
    name: str = ""
    marker: Marker = field(default_factory=Marker)

    @property
    def held(self) -> bool:
        return self.state is WorkloadState.HELD


def _job_id(raw: Mapping[str, Any]) -> str:
    job_id = _num(raw.get("job_id"))
    if job_id is None or job_id <= 0:
        raise SlurmParseError(f"squeue job without a job_id: {raw.get('job_id')!r}")
    array_job = _num(raw.get("array_job_id"))
    array_task = _num(raw.get("array_task_id"))
    if array_job and array_task is not None:
        return f"{array_job}_{array_task}"
    return str(job_id)


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    reason = _str(raw.get("state_reason"))
    priority = _num(raw.get("priority"))
    state, base = job_state(raw.get("job_state"), reason, priority)
    try:
        nodes = expand_hostlist(_str(raw.get("nodes")))
        excluded = expand_hostlist(_str(raw.get("excluded_nodes")))
    except ValueError as exc:
        raise SlurmParseError(str(exc)) from exc
    if state is WorkloadState.PENDING or state is WorkloadState.HELD:
        nodes = ()  # 22.05 keeps the old NodeList on some pending jobs; they hold no nodes now
    admin_comment = _str(raw.get("admin_comment"))
    partitions = tuple(p for p in _str(raw.get("partition")).split(",") if p)
    return SlurmJob(
        job_id=_job_id(raw),
        state=state,
        slurm_state=base,
        reason=reason,
        restart_cnt=_num(raw.get("restart_cnt")) or 0,
        nodes=nodes,
        excluded_nodes=excluded,
        node_count=_num(raw.get("node_count")) or 0,
        partitions=partitions,
        comment=_str(raw.get("comment")),
        admin_comment=admin_comment,
        priority=priority,
        requeue=raw.get("requeue") is not False,
        batch_host=_str(raw.get("batch_host")),
        name=_str(raw.get("name")),
        marker=parse_marker(admin_comment),
    )


def _load(text: str, key: str, command: str) -> list[Mapping[str, Any]]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError(f"{command}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{command}: expected an object, got {type(doc).__name__}")
    errors = doc.get("errors")
    if errors:
        raise SlurmParseError(f"{command}: Slurm reported errors: {errors!r}"[:500])
    items = doc.get(key)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        # a missing list is "Slurm did not say", never "there is nothing"
        raise SlurmParseError(f"{command}: no {key!r} list in the answer")
    return items


def parse_squeue_json(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``squeue --json``. Raises ``SlurmParseError`` when the answer is unusable."""
    return {job.job_id: job for job in map(parse_job, _load(text, "jobs", "squeue --json"))}


# ----------------------------------------------------------------------------------------- sinfo

_NODE_BASE_STATES: Final = frozenset({"IDLE", "DOWN", "ALLOCATED", "MIXED", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING"})
_UNUSABLE_FLAGS: Final = frozenset(
    {"DRAIN", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "POWERED_DOWN", "POWER_DOWN", "REBOOT_ISSUED"}
)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # upper case: DRAIN, NOT_RESPONDING, ...
    reason: str
    partitions: tuple[str, ...]

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.flags

    @property
    def usable(self) -> bool:
        """Could take a job now or soon: not down, drained, failing or unreachable."""
        return self.state not in ("down", "error", "future", "unknown") and not (self.flags & _UNUSABLE_FLAGS)

    @property
    def drained_by_trainguard(self) -> bool:
        return self.drain and self.reason.startswith("trainguard:")


def parse_node(raw: Mapping[str, Any]) -> SlurmNode:
    name = _str(raw.get("name"))
    try:
        validate_host(name)
    except IdentityError as exc:
        raise SlurmParseError(f"sinfo node with a bad name {name!r}") from exc
    state_raw = raw.get("state")
    flags = {f.upper() for f in raw.get("state_flags") or [] if isinstance(f, str)}
    if isinstance(state_raw, list):  # 23.02+: ["IDLE", "DRAIN"]
        names = [s.upper() for s in state_raw if isinstance(s, str)]
        base = next((s for s in names if s in _NODE_BASE_STATES), "UNKNOWN")
        flags |= {s for s in names if s != base}
    elif isinstance(state_raw, str):
        base = state_raw.upper()
    else:
        base = "UNKNOWN"
    partitions = raw.get("partitions") or []
    return SlurmNode(
        name=name,
        state=base.lower(),
        flags=frozenset(flags),
        reason=_str(raw.get("reason")),
        partitions=tuple(p for p in partitions if isinstance(p, str)),
    )


def parse_sinfo_json(text: str) -> dict[str, SlurmNode]:
    """Nodes by name from ``sinfo --json`` (one entry per node; duplicates per partition merge)."""
    nodes: dict[str, SlurmNode] = {}
    for parsed in map(parse_node, _load(text, "nodes", "sinfo --json")):
        old = nodes.get(parsed.name)
        if old is not None:
            merged = tuple(dict.fromkeys(old.partitions + parsed.partitions))
            parsed = SlurmNode(parsed.name, parsed.state, parsed.flags, parsed.reason, merged)  # noqa: PLW2901
        nodes[parsed.name] = parsed
    return nodes
