"""The one object the HTTP endpoints read: everything ``create_app`` built, on ``app.state.services``."""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from starlette.requests import Request

from responder.clock import Clock
from responder.engine import Engine
from responder.lease import Leadership
from responder.loki import LokiMirror
from responder.metrics import ResponderMetrics
from responder.settings import Settings
from responder.store import AuditStore


@dataclass
class Services:
    """The responder's parts, built once per app; endpoints are plain functions over it."""

    settings: Settings
    store: AuditStore
    engine: Engine
    clock: Clock
    metrics: ResponderMetrics
    registry: CollectorRegistry
    webhook_token: str | None
    operator_token: str | None
    mirror: LokiMirror | None = None
    loop_task: asyncio.Task[None] | None = None
    leadership: Leadership | None = None  # with a shared store: this replica's side of the lease
    # The console's CSRF token: derived from a per-process secret, so a page of another origin cannot know it.
    csrf: str = field(
        default_factory=lambda: hmac.new(secrets.token_bytes(32), b"trainguard-console-mode", "sha256").hexdigest()
    )


def services(request: Request) -> Services:
    """The ``Services`` of the app serving ``request``."""
    found: Services = request.app.state.services
    return found
