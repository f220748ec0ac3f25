"""Scheduler adapters: the only code that knows a Slurm command or a Kubernetes verb.

``base`` is the port the engine uses (``Scheduler``, ``ActionRequest``, ``ActionResult``); ``router``
picks each cluster's adapter from its settings (a union keyed on ``kind``); ``slurm/`` and
``kubernetes/`` are the adapters, ``recording`` the stand-in for tests and demos. A lint rule
(ruff banned-api) keeps ``subprocess`` and ``kubernetes`` imports inside this package.
"""

from responder.model import Action
from responder.schedulers.base import (
    ActionRequest,
    ActionResult,
    Scheduler,
    SchedulerError,
    WorkloadObservation,
    WorkloadState,
)
from responder.schedulers.recording import RecordingScheduler

__all__ = [
    "Action",
    "ActionRequest",
    "ActionResult",
    "RecordingScheduler",
    "Scheduler",
    "SchedulerError",
    "WorkloadObservation",
    "WorkloadState",
]
