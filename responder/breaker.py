"""The circuit breaker: bounds how much automation may do to one cluster within a window.

Three limits, checked before every action (in monitor mode too, so reviewed decisions show what the
breaker would have stopped):

* correlated failures: when many workloads fail together, the cause is shared (storage, fabric,
  scheduler), not bad nodes. The breaker trips, stays open for a cooldown, and every decision in
  that time is refused with the reason;
* actions per window across workloads;
* share of the cluster's nodes excluded or drained per window.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from responder.store import BreakerStore


class BreakerSettings(BaseModel):
    """Blast-radius limits, per cluster (NVSentinel-style circuit breaker)."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(600.0, gt=0, description="window over which actions are counted")
    max_actions: int = Field(20, ge=1, description="most actions per window across workloads")
    max_node_fraction: float = Field(0.1, gt=0, le=1, description="most share of nodes excluded/drained")
    max_nodes_without_size: int = Field(4, ge=1, description="node cap when the cluster size is unknown")
    correlated_workloads: int = Field(3, ge=2, description="this many workloads failing together trips it")
    correlated_window_s: float = Field(120.0, gt=0, description="...within this many seconds")
    cooldown_s: float = Field(600.0, ge=0, description="how long a tripped breaker stays open")


@dataclass(frozen=True, slots=True)
class BreakerCheck:
    """The breaker's verdict. It only reads the store: a new ``trip`` is for the caller to persist."""

    allowed: bool
    reason: str = ""
    tripped: bool = False  # open because of correlated failures (shown as a metric)
    trip: str | None = None  # the reason of a trip that starts now (record it with ``record_trip``)


def check(
    store: BreakerStore,
    cluster: str,
    mode: str,
    now: float,
    settings: BreakerSettings,
    cluster_nodes: int | None,
    new_nodes: frozenset[str],
    counts_action: bool,
) -> BreakerCheck:
    last = store.last_trip(cluster)
    if last is not None and now - last[0] < settings.cooldown_s:
        return BreakerCheck(False, f"circuit breaker open since {now - last[0]:.0f}s ago: {last[1]}", True)
    failing = store.workloads_failing_since(cluster, now - settings.correlated_window_s)
    if len(failing) >= settings.correlated_workloads:
        reason = (
            f"{len(failing)} workloads failed within {settings.correlated_window_s:.0f}s: likely a shared cause "
            "(storage, fabric, scheduler), not bad nodes; not acting"
        )
        return BreakerCheck(False, f"circuit breaker tripped: {reason}", True, trip=reason)
    if not counts_action:
        return BreakerCheck(True)
    since = now - settings.window_s
    done = store.actions_since(cluster, mode, since)
    if done >= settings.max_actions:
        window, limit = settings.window_s, settings.max_actions
        return BreakerCheck(False, f"circuit breaker: {done} actions in the last {window:.0f}s (limit {limit})")
    if new_nodes:
        isolated = store.isolated_nodes_since(cluster, mode, since)
        total = len(isolated | new_nodes)
        cap = (
            max(1, int(settings.max_node_fraction * cluster_nodes))
            if cluster_nodes
            else settings.max_nodes_without_size
        )
        if total > cap and not new_nodes <= isolated:
            return BreakerCheck(
                False,
                f"circuit breaker: isolating {', '.join(sorted(new_nodes - isolated))} would make {total} nodes "
                f"excluded or drained in {settings.window_s:.0f}s (limit {cap})",
            )
    return BreakerCheck(True)


def is_open(store: BreakerStore, cluster: str, now: float, settings: BreakerSettings) -> bool:
    last = store.last_trip(cluster)
    return last is not None and now - last[0] < settings.cooldown_s
