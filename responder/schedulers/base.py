"""The ``Scheduler`` protocol: what the decision core may ask of a scheduler, and what comes back.

The core decides *what* should happen; an adapter decides *how*, then verifies the result with a
fresh observation of the scheduler. Methods are synchronous (adapters shell out or call HTTP APIs
with their own timeouts); the engine runs them in a worker thread.

Idempotency is part of the contract: a request names the ``attempt`` it was decided for, and an
adapter that finds the workload already past that attempt (requeued by an earlier, interrupted
try) reports ``done`` without acting again. This is what lets the engine retry an action after a
crash without requeueing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal, Protocol, TypeVar, runtime_checkable

from responder.model import Action
from trainguard.identity import IdentityError, validate_cluster, validate_host, validate_workload


class WorkloadState(StrEnum):
    """A scheduler's job state, reduced to what the core reasons about."""

    PENDING = "pending"
    HELD = "held"
    RUNNING = "running"
    COMPLETING = "completing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    def is_terminal(self) -> bool:
        return self in (WorkloadState.COMPLETED, WorkloadState.FAILED, WorkloadState.CANCELLED)


class SchedulerError(RuntimeError):
    """The scheduler could not be asked or did not answer; the state is unknown, not empty."""


class SchedulerRefused(SchedulerError):
    """The scheduler answered and refused the request (no permission, no such object): asking again will
    not change that, so the action fails at once instead of being tried again."""


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """One action, decided by the core. Values are validated identities (``trainguard.identity``)."""

    action: Action
    cluster: str
    workload: str
    incident_id: str
    reason: str
    attempt: str | None = None
    exclude_nodes: tuple[str, ...] = ()  # the whole desired exclusion set, not a delta
    node: str | None = None  # for drain_node / resume_node


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What the adapter did and whether a fresh look at the scheduler confirmed it."""

    outcome: Literal["done", "failed", "skipped", "planned"]
    detail: str
    verified: bool = False
    acted_at: datetime | None = None
    excluded_nodes: tuple[str, ...] = ()  # what was applied, after any pruning
    # The scheduler could not be asked or did not answer while acting: the effect is unknown, and the
    # same request (idempotent per attempt) may be sent again later (``responder/acting.py``).
    retry: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadObservation:
    workload: str
    state: WorkloadState
    attempt: int | None = None
    nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    reason: str = ""
    opted_in: bool | None = None  # the workload asked to be acted on; None: the scheduler cannot say
    extra: dict[str, str] = field(default_factory=dict)


def identity_refusal(request: ActionRequest, scheduler: str, own_cluster: str | None) -> str | None:
    """Why ``request`` must not reach a scheduler, or None: every value that could end up in a command
    or an API call is checked again here, in the adapter, whatever the responder checked before."""
    try:
        validate_cluster(request.cluster)
        if own_cluster is not None and request.cluster != own_cluster:
            return f"cluster {request.cluster!r} is not this adapter's cluster {own_cluster!r}"
        node_action = request.action in (Action.DRAIN_NODE, Action.RESUME_NODE)
        if node_action and request.node is None:
            return f"{request.action} needs a node"
        if request.node is not None:
            validate_host(request.node)
        if not node_action:
            validate_workload(request.workload, scheduler)
        for node in request.exclude_nodes:
            validate_host(node)
    except IdentityError as exc:
        return str(exc)
    if request.attempt is not None and not (request.attempt.isdigit() and len(request.attempt) <= 9):
        return f"attempt {request.attempt!r} is not a decimal number"
    if request.action not in set(Action):
        return f"unknown action {request.action!r}"
    return None


@runtime_checkable
class Scheduler(Protocol):
    """How the core reaches a scheduler. Every method may raise ``SchedulerError``."""

    name: str

    def act(self, request: ActionRequest) -> ActionResult:
        """Carry out ``request`` idempotently and verify it; see the module docstring."""
        ...

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        """A fresh look at one workload; ``WorkloadState.UNKNOWN`` when the scheduler cannot tell."""
        ...


_T = TypeVar("_T")
_log = logging.getLogger(__name__)


def act_frame(
    request: ActionRequest,
    refusal: str | None,
    scheduler: str,
    unit: str,
    node_action: Callable[[ActionRequest], ActionResult],
    workload_action: Callable[[ActionRequest], ActionResult],
) -> ActionResult:
    """What every adapter's ``act`` does around its own work: refuse a bad request before any ``unit``
    (command, request) is sent, dispatch node and workload actions, and turn a ``SchedulerError`` into a
    failed result: one that may be retried (the scheduler's state is unknown), unless the scheduler
    answered with a refusal (``SchedulerRefused``)."""
    if refusal is not None:
        _log.warning("refused %s for %s: %s", request.action, request.workload, refusal)
        return ActionResult("failed", f"refused before any {unit}: {refusal}")
    try:
        if request.action in (Action.DRAIN_NODE, Action.RESUME_NODE):
            return node_action(request)
        if request.action is Action.NONE:
            return ActionResult("skipped", "action none: nothing to do")
        return workload_action(request)
    except SchedulerRefused as exc:
        return ActionResult("failed", f"{scheduler}: {exc}")
    except SchedulerError as exc:
        return ActionResult("failed", f"{scheduler}: {exc}", retry=True)


def poll(
    read: Callable[[], _T],
    ok: Callable[[_T], bool],
    timeout_s: float,
    interval_s: float,
    sleep: Callable[[float], None],
) -> tuple[bool, _T]:
    """Fresh reads until ``ok`` or the deadline: (confirmed, the last read). How every adapter verifies."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if ok(value):
            return True, value
        if time.monotonic() >= deadline:
            return False, value
        sleep(interval_s)


def first_fresh(
    read: Callable[[], _T | None],
    ok: Callable[[_T], bool],
    timeout_s: float,
    interval_s: float,
    sleep: Callable[[float], None],
) -> _T | None:
    """``poll`` for an object that may be absent: the first read that exists and is ``ok``, else None."""
    confirmed, value = poll(read, lambda v: v is not None and ok(v), timeout_s, interval_s, sleep)
    return value if confirmed else None
