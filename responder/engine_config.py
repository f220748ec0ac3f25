"""What the engine reads of its settings, as protocols: the edge builds the settings and passes them in, so
the engine depends on these few properties, not on the configuration module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from responder.breaker import BreakerSettings
from responder.isolation import LedgerSettings
from responder.node_groups import GroupedCluster


class ClusterConfig(GroupedCluster, Protocol):
    """What the engine reads of one cluster's settings (``responder.settings.ClusterSettings``): its mode,
    policy, approval rule and node groups (``GroupedCluster``), and its size."""

    @property
    def nodes(self) -> int | None: ...


class EngineConfig(Protocol):
    """What the engine reads of the settings (``responder.settings.Settings``): the edge passes them in."""

    @property
    def correlation_window_s(self) -> float: ...
    @property
    def breaker(self) -> BreakerSettings: ...
    @property
    def ledger(self) -> LedgerSettings: ...
    @property
    def loop_stall_after_s(self) -> float: ...
    @property
    def action_retry_s(self) -> float: ...
    @property
    def clusters(self) -> Mapping[str, object]: ...
    def cluster(self, name: str) -> ClusterConfig: ...
