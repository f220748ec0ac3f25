"""Scheduler adapters: the only code that knows a Slurm command or a Kubernetes verb."""

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
