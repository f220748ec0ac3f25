"""Node isolation on Kubernetes: cordon + taint of implicated nodes, labelled who/why/when, and its undo.

Isolation of a node (``isolate_node``) is one JSON merge patch with the node's ``resourceVersion``
(a concurrent change makes it fail with 409 and it is retried on a fresh read):

- ``spec.unschedulable: true`` (cordon), unless the node already was;
- ``spec.taints``: the taints read from the node plus ``trainguard.io/implicated=<incident>:NoSchedule``
  (the list is replaced as a whole, so it is always read first);
- label ``trainguard.io/isolated-by=<actor>`` and annotations with the incident, the reason, the time
  and whether trainguard cordoned the node (``trainguard.io/cordoned``).

Its undo (``resume_node``, an operator's command) removes trainguard's taint, labels and annotations
and uncordons the node only when trainguard cordoned it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from responder.schedulers.base import ActionRequest, ActionResult, SchedulerError, first_fresh
from responder.schedulers.kubernetes.api import (
    ANNOTATION_CORDONED,
    ANNOTATION_INCIDENT,
    ANNOTATION_ISOLATED_AT,
    ANNOTATION_REASON,
    LABEL_ISOLATED_BY,
    MAX_REASON,
    NODE_ANNOTATIONS,
    TAINT_KEY,
    KubeAPI,
    KubeSettings,
    labels_and_annotations,
    metadata,
    rfc3339,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Isolated:
    applied: tuple[str, ...]
    notes: tuple[str, ...]


class NodeIsolation:
    """Cordon + taint (and the undo) of nodes, with a circuit breaker on how many trainguard holds."""

    def __init__(
        self,
        api: KubeAPI,
        settings: KubeSettings,
        now: Callable[[], datetime],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.settings = settings
        self._now = now
        self._sleep = sleep

    @staticmethod
    def ours(node: Mapping[str, Any]) -> bool:
        return any(t.get("key") == TAINT_KEY for t in _taints(node))

    def isolate(self, nodes: tuple[str, ...], incident: str, reason: str) -> Isolated:
        """Isolate each of ``nodes`` (already isolated ones count as applied); breaker-limited."""
        applied: list[str] = []
        notes: list[str] = []
        wanted = list(dict.fromkeys(nodes))
        if not wanted:
            return Isolated((), ())
        everything = self.api.list_nodes()
        by_name = {metadata(n).get("name", ""): n for n in everything}
        held = {name for name, n in by_name.items() if self.ours(n)}
        limit = max(1, int(len(by_name) * self.settings.max_isolated_fraction))
        for name in wanted:
            node = by_name.get(name)
            if node is None:
                notes.append(f"{name}: no such node")
                continue
            if name in held:
                applied.append(name)
                continue
            if len(held) >= limit:
                notes.append(
                    f"{name}: circuit breaker, {len(held)} node(s) already isolated by trainguard "
                    f"(limit {limit} of {len(by_name)}); not isolated"
                )
                continue
            outcome = self.isolate_node(name, incident, reason)
            notes.append(outcome)
            held.add(name)
            applied.append(name)
        return Isolated(tuple(applied), tuple(notes))

    def isolate_node(self, name: str, incident: str, reason: str) -> str:
        """Cordon and taint one node, labelled who/why/when; a note on what was done."""
        for attempt in range(3):
            node = self.api.read_node(name)
            if node is None:
                raise SchedulerError(f"node {name} vanished")
            if self.ours(node):
                return f"{name}: already isolated by trainguard"
            spec = node.get("spec") or {}
            cordon = not spec.get("unschedulable", False)
            taint = {"key": TAINT_KEY, "value": incident, "effect": "NoSchedule"}  # when: the isolated-at annotation
            patch = {
                "metadata": {
                    "resourceVersion": metadata(node).get("resourceVersion"),
                    "labels": {LABEL_ISOLATED_BY: self.settings.actor},
                    "annotations": {
                        ANNOTATION_INCIDENT: incident,
                        ANNOTATION_REASON: reason[:MAX_REASON],
                        ANNOTATION_ISOLATED_AT: rfc3339(self._now()),
                        ANNOTATION_CORDONED: "true" if cordon else "false",
                    },
                },
                "spec": {"unschedulable": True, "taints": [*_taints(node), taint]},
            }
            try:
                self.api.patch_node(name, patch)
            except SchedulerError as exc:
                if "HTTP 409" in str(exc) and attempt < 2:
                    continue  # the node changed between our read and our patch: read it again
                raise
            log.warning("isolated node %s (incident %s): cordon=%s taint %s", name, incident, cordon, TAINT_KEY)
            return f"{name}: {'cordoned and ' if cordon else ''}tainted {TAINT_KEY}={incident}:NoSchedule"
        raise SchedulerError(f"node {name}: kept changing under three patches")  # pragma: no cover

    def resume(self, request: ActionRequest) -> ActionResult:
        """The operator's undo: remove trainguard's taint and marks; uncordon only if we cordoned."""
        name = request.node
        assert name is not None  # checked by refusal()
        for attempt in range(3):
            node = self.api.read_node(name)
            if node is None:
                return ActionResult("failed", f"node {name} is not known to the API server")
            labels, annotations = labels_and_annotations(node)
            if not self.ours(node) and LABEL_ISOLATED_BY not in labels:
                return ActionResult("done", f"{name} is not isolated by trainguard; nothing to undo", True)
            we_cordoned = annotations.get(ANNOTATION_CORDONED) == "true"
            acted_at = self._now()
            patch: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": metadata(node).get("resourceVersion"),
                    "labels": {LABEL_ISOLATED_BY: None},
                    "annotations": dict.fromkeys(NODE_ANNOTATIONS),
                },
                "spec": {"taints": [t for t in _taints(node) if t.get("key") != TAINT_KEY]},
            }
            if we_cordoned:
                patch["spec"]["unschedulable"] = None  # merge patch: null removes the field (schedulable)
            try:
                self.api.patch_node(name, patch)
            except SchedulerError as exc:
                if "HTTP 409" in str(exc) and attempt < 2:
                    continue
                raise
            after = self.verify_node(name, lambda n: not self.ours(n))
            cordon = "uncordoned" if we_cordoned else "left cordoned (not cordoned by trainguard)"
            return ActionResult(
                "done",
                f"{name}: removed taint {TAINT_KEY}, {cordon}" + ("" if after else "; not confirmed by a fresh read"),
                verified=after is not None,
                acted_at=acted_at,
            )
        raise SchedulerError(f"node {name}: kept changing under three patches")  # pragma: no cover

    def verify_node(self, name: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        s = self.settings
        return first_fresh(lambda: self.api.read_node(name), ok, s.verify_timeout_s, s.poll_interval_s, self._sleep)

    def drain(self, request: ActionRequest) -> ActionResult:
        """``drain_node``: isolate one node (cordon + taint); running pods are not evicted."""
        name = request.node
        assert name is not None
        acted_at = self._now()
        done = self.isolate((name,), request.incident_id, request.reason)
        if name not in done.applied:
            return ActionResult("skipped", "; ".join(done.notes) or f"{name}: not isolated")
        after = self.verify_node(name, self.ours)
        return ActionResult(
            "done",
            "; ".join(done.notes) + ("" if after else "; not confirmed by a fresh read"),
            verified=after is not None,
            acted_at=acted_at,
        )


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = node.get("spec") or {}
    return [dict(t) for t in spec.get("taints") or []]
