"""The responder as an Alertmanager client (v2 API): its own alerts, and silences during remediation.

Only three calls, each with a timeout and a clear error: ``POST /api/v2/alerts`` (an alert with an
``endsAt`` resolves by itself at that time; re-posting it with ``endsAt`` = now resolves it at once),
``POST /api/v2/silences`` and ``DELETE /api/v2/silence/{id}`` (expire). Matchers are always exact
(``isRegex: false``), so a silence can never match more than it names; and a silence never matches
the responder's own alerts (``trainguard_source!="responder"``), or its own pending/done alerts
would go quiet with the attempt they are about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from responder.clock import rfc3339

SOURCE_LABEL = "trainguard_source"
SOURCE = "responder"  # the label value that tells a team's routing tree "this came from trainguard itself"


class AlertmanagerSettings(BaseModel):
    """Where the responder posts its own alerts and silences (global; silences are opted in per cluster)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Alertmanager base URL, e.g. http://alertmanager:9093")
    console_url: str = Field("http://127.0.0.1:9480", description="the responder's URL as operators reach it")
    timeout_s: float = Field(5.0, gt=0, le=60)
    notify: bool = Field(True, description="post decision-pending, action-done/failed and breaker alerts")
    event_ttl_s: float = Field(3600.0, gt=0, description="how long a done/failed alert stays firing")
    check_interval_s: float = Field(15.0, gt=0, le=3600, description="how often silences are checked")


class SilenceSettings(BaseModel):
    """Per cluster: silence a workload attempt's alerts while trainguard remediates it. Off by default."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="create a silence when an action on a workload attempt is done")
    max_s: float = Field(7200.0, gt=0, le=86400, description="the bound: a silence never outlives this")


class AlertmanagerError(Exception):
    """Alertmanager could not be reached or refused the call."""


class AlertmanagerClient:
    def __init__(self, settings: AlertmanagerSettings) -> None:
        self.base = settings.url.rstrip("/")
        self._http = httpx.Client(timeout=settings.timeout_s)

    def _send(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self._http.request(method, f"{self.base}{path}", json=body)
        except httpx.HTTPError as exc:
            raise AlertmanagerError(f"{method} {path}: {exc}") from exc
        if response.status_code >= 300:
            raise AlertmanagerError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        self._send("POST", "/api/v2/alerts", list(alerts))

    def create_silence(
        self, matchers: Mapping[str, str], starts: float, ends: float, comment: str, unless: Mapping[str, str]
    ) -> str:
        """A silence of alerts whose labels equal ``matchers`` and do not equal ``unless``; its id."""
        exact = [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()]
        negative = [{"name": k, "value": v, "isRegex": False, "isEqual": False} for k, v in unless.items()]
        body = {
            "matchers": exact + negative,
            "startsAt": rfc3339(starts),
            "endsAt": rfc3339(ends),
            "createdBy": "trainguard",
            "comment": comment,
        }
        answer = self._send("POST", "/api/v2/silences", body)
        return str(answer["silenceID"])

    def expire_silence(self, silence_id: str) -> None:
        self._send("DELETE", f"/api/v2/silence/{silence_id}")

    def close(self) -> None:
        self._http.close()
