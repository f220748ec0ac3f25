"""Strict validation of identity label values (docs/interfaces.md §1).

Label values travel from training logs through Prometheus and Alertmanager to the responder and,
eventually, into scheduler commands. They are untrusted all the way. Every value is checked against
the narrow form the scheduler itself gives such names before anything acts on it; nothing is
"cleaned" or truncated, because a value that needs cleaning is not a name we should act on.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

SCHEDULERS: Final = frozenset({"slurm", "jobset", "pytorchjob"})

# A cluster name from configuration: short, no spaces, no leading punctuation.
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# Slurm job id, optionally an array task (1234_7). Restarts keep the id.
_SLURM_JOB = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?")
# Kubernetes namespace: RFC 1123 label. Object name: RFC 1123 subdomain (JobSet, PyTorchJob).
_K8S_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_K8S_SUBDOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")
# A node name as Slurm or Kubernetes knows it: an RFC 1123 host name (never a Slurm hostlist).
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,8}")


class IdentityError(ValueError):
    """A label value that does not have the form its scheduler gives such names."""

    def __init__(self, label: str, value: str, expected: str) -> None:
        super().__init__(f"label {label}={value!r} is not {expected}")
        self.label = label
        self.value = value
        self.expected = expected


def validate_cluster(value: str) -> str:
    if not _CLUSTER.fullmatch(value):
        raise IdentityError("cluster", value, "a cluster name (letters, digits, '.', '_', '-'; at most 63)")
    return value


def validate_optional_cluster(value: str | None) -> str | None:
    """``validate_cluster`` for a setting that may be unset (None)."""
    return None if value is None else validate_cluster(value)


def validate_scheduler(value: str) -> str:
    if value not in SCHEDULERS:
        raise IdentityError("scheduler", value, f"one of {sorted(SCHEDULERS)}")
    return value


def is_slurm_job_id(value: str) -> bool:
    return bool(_SLURM_JOB.fullmatch(value))


def is_k8s_workload(value: str) -> bool:
    namespace, sep, name = value.partition("/")
    return (
        bool(sep)
        and bool(_K8S_LABEL.fullmatch(namespace))
        and len(name) <= 253
        and bool(_K8S_SUBDOMAIN.fullmatch(name))
    )


def validate_workload(value: str, scheduler: str | None = None) -> str:
    """A Slurm job id, or ``namespace/name`` of a Kubernetes object; checked per scheduler when known."""
    if scheduler == "slurm":
        ok, expected = is_slurm_job_id(value), "a Slurm job id"
    elif scheduler in ("jobset", "pytorchjob"):
        ok, expected = is_k8s_workload(value), "a Kubernetes namespace/name"
    else:
        ok = is_slurm_job_id(value) or is_k8s_workload(value)
        expected = "a Slurm job id or a Kubernetes namespace/name"
    if not ok:
        raise IdentityError("workload", value, expected)
    return value


def validate_host(value: str) -> str:
    if len(value) > 253 or not _HOST.fullmatch(value):
        raise IdentityError("host", value, "a node name (RFC 1123 host name)")
    return value


def validate_decimal(label: str, value: str) -> str:
    if not _DECIMAL.fullmatch(value):
        raise IdentityError(label, value, "a decimal number")
    return value


@dataclass(frozen=True, slots=True)
class WorkloadIdentity:
    """Who an alert is about, after validation. ``attempt`` is ``None`` when the alert did not say."""

    cluster: str
    workload: str
    scheduler: str | None
    attempt: str | None
    host: str | None
    rank: str | None


def identity_from_labels(labels: dict[str, str]) -> WorkloadIdentity:
    """Validate the identity labels of one alert; raises IdentityError naming the first bad value."""
    return _identity(
        labels["cluster"], labels["workload"], labels.get("scheduler") or None, labels.get("attempt") or None,
        labels.get("host") or None, labels.get("rank") or None,
    )  # fmt: skip


@functools.lru_cache(maxsize=65536)
def _identity(
    cluster: str, workload: str, scheduler: str | None, attempt: str | None, host: str | None, rank: str | None
) -> WorkloadIdentity:
    """Cached: one notification repeats the same few identities thousands of times."""
    validate_cluster(cluster)
    if scheduler is not None:
        validate_scheduler(scheduler)
    validate_workload(workload, scheduler)
    if attempt is not None:
        validate_decimal("attempt", attempt)
    if host is not None:
        validate_host(host)
    if rank is not None:
        validate_decimal("rank", rank)
    return WorkloadIdentity(cluster, workload, scheduler, attempt, host, rank)
