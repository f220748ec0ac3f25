"""The Alertmanager webhook payload (version 4), validated at the edge, and each alert's disposition.

Structure is checked strictly (a body that is not a v4 notification is refused with 400). Label
*values* are checked per alert: one alert with hostile identity values is kept and audited as
rejected, while its siblings in the same notification proceed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from responder.clock import parse_rfc3339
from trainguard.identity import IdentityError, WorkloadIdentity, identity_from_labels

# Bounds keep one notification from exhausting memory through a single field. They are declared as
# types so pydantic's core checks them without a Python call per alert (10,000 alerts in one body).
_MAX_LABELS = 64
_ALERTNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_:.-]{0,127}")
_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# ASCII digits only: ``\d`` would admit any script's digits, which no later parser accepts.
_RFC3339 = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
_MAX_INT64 = 2**63 - 1


def _representable(value: str) -> str:
    """A real date with a valid offset whose UTC moment falls in years 1-9999 (what the audit API can print)."""
    ts = _parse_time(value)  # ValueError for month 13, Feb 30, hour 99, year 0, offset +99:99
    try:
        datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError("the time in UTC falls outside the years 1-9999") from exc
    return value


Timestamp = Annotated[str, StringConstraints(pattern=_RFC3339), AfterValidator(_representable)]
Key = Annotated[str, StringConstraints(max_length=256)]
Value = Annotated[str, StringConstraints(max_length=4096)]
LabelSet = Annotated[dict[Key, Value], Field(max_length=_MAX_LABELS)]


class Alert(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: LabelSet
    annotations: LabelSet = Field(default_factory=dict)
    startsAt: Timestamp  # noqa: N815 - Alertmanager's field name
    endsAt: str | None = Field(None, max_length=64)  # noqa: N815
    generatorURL: str = Field("", max_length=4096)  # noqa: N815
    fingerprint: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{1,64}$")]


class Notification(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal["4"]
    groupKey: str = Field(max_length=8192)  # noqa: N815
    status: Literal["firing", "resolved"]
    receiver: str = Field("", max_length=512)
    truncatedAlerts: int = Field(0, ge=0, le=_MAX_INT64)  # noqa: N815 - SQLite's INTEGER
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = Field("", max_length=2048)  # noqa: N815
    alerts: list[Alert]


Disposition = Literal["evidence", "resolved", "ignored", "rejected"]


@dataclass(frozen=True, slots=True)
class ClassifiedAlert:
    """One alert with what the responder will do with it, decided once at ingest."""

    alert: Alert
    starts_at: float
    disposition: Disposition
    identity: WorkloadIdentity | None = None
    reason: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.alert.fingerprint, self.alert.startsAt, self.alert.status)


@functools.lru_cache(maxsize=4096)
def _parse_time(value: str) -> float:
    return parse_rfc3339(value)


def classify(alert: Alert) -> ClassifiedAlert:
    """Evidence about a workload, a resolution, another team's alert (ignored), or rejected."""
    starts_at = _parse_time(alert.startsAt)
    labels = alert.labels
    if "cluster" not in labels or "workload" not in labels:
        return ClassifiedAlert(alert, starts_at, "ignored", reason="no cluster/workload labels")
    if labels.get("trainguard_source") == "responder":  # the responder's own alerts: never evidence (no loop)
        return ClassifiedAlert(alert, starts_at, "ignored", reason="the responder's own alert")
    try:
        identity = identity_from_labels(labels)
    except IdentityError as exc:
        return ClassifiedAlert(alert, starts_at, "rejected", reason=str(exc))
    name = labels.get("alertname", "")
    if not _ALERTNAME.fullmatch(name):
        return ClassifiedAlert(alert, starts_at, "rejected", identity, f"alertname {name[:80]!r} is not valid")
    pattern = labels.get("pattern")
    if pattern is not None and not _PATTERN.fullmatch(pattern):
        return ClassifiedAlert(alert, starts_at, "rejected", identity, f"pattern {pattern[:80]!r} is not valid")
    if alert.status == "resolved":
        return ClassifiedAlert(alert, starts_at, "resolved", identity)
    return ClassifiedAlert(alert, starts_at, "evidence", identity)


def parse_notification(payload: Any) -> tuple[Notification, list[dict[str, str]]]:
    """The notification without its invalid alerts, and what was wrong with each of those.

    An alert that fails validation is left out (and named) so that its valid siblings are kept; a
    notification whose envelope is invalid, or whose every alert is, raises ``ValidationError``.
    """
    try:
        return Notification.model_validate(payload), []
    except ValidationError as exc:
        bad: dict[int, dict[str, str]] = {}
        for err in exc.errors(include_url=False):
            loc = err["loc"]
            if len(loc) < 2 or loc[0] != "alerts" or not isinstance(loc[1], int):
                raise  # the envelope itself is wrong
            where = ".".join(str(part) for part in loc)
            bad.setdefault(loc[1], {"loc": where, "msg": err["msg"]})
        alerts = payload["alerts"]
        kept = [alert for i, alert in enumerate(alerts) if i not in bad]
        if not kept:
            raise
        return Notification.model_validate({**payload, "alerts": kept}), [bad[i] for i in sorted(bad)]
