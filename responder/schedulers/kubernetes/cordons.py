"""Whose cordon is it? A node taken out of service by someone else is evidence against it.

NVSentinel's fault quarantine, node-problem-detector, Kubernetes' node lifecycle controller and admins
take GPU nodes out of service: a cordon (``spec.unschedulable``), a taint, a node condition. trainguard
isolates with its own taint and labels (``isolation.py``) and reads its own back: never evidence, and
never undone over another owner's cordon. What someone else did is parsed into a bounded ``source`` and
a short ``reason`` for metric labels; the node object keeps the full text.

- ``nvsentinel``: a ``<prefix>cordon-by`` label or annotation (NVSentinel's fault quarantine, default
  prefix ``k8saas.nvidia.com/``) naming NVSentinel, with its ``<prefix>cordon-reason``;
- ``admin``: any other cordon, with a ``cordon-reason`` label or annotation when one says why;
- ``node_problem``: a node condition other than the kubelet's own that is ``True`` (node-problem-detector
  and NVSentinel health conditions: ``KernelDeadlock``, ``GpuXidError``...), with its reason;
- ``kubernetes``: the node not ``Ready``, a kubelet pressure condition, or a lifecycle taint
  (``node.kubernetes.io/unreachable``...).

Not evidence: cluster-autoscaler and Karpenter scale-down taints (the node is going away, not bad), and
any other taint (a dedicated-node taint such as ``nvidia.com/gpu`` says nothing about health).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from responder.schedulers.kubernetes.api import ANNOTATION_CORDONED, LABEL_ISOLATED_BY, TAINT_KEY, metadata

SOURCES = ("trainguard", "nvsentinel", "admin", "node_problem", "kubernetes")
MAX_REASON = 64
KUBELET_CONDITIONS = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})
LIFECYCLE_TAINTS = frozenset(
    {"not-ready", "unreachable", "memory-pressure", "disk-pressure", "pid-pressure", "network-unavailable"}
)
SCALE_DOWN_TAINTS = frozenset(
    {"ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler", "karpenter.sh/disruption"}
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Cordon:
    source: str  # one of SOURCES
    reason: str  # at most MAX_REASON printable characters


def cordon_of(node: Mapping[str, Any]) -> Cordon | None:
    """Who took ``node`` out of service and why (``trainguard`` for its own isolation); None: in service."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    if any(t.get("key") in SCALE_DOWN_TAINTS for t in taints):
        return None
    marks = _marks(node)
    by = next((v for k, v in marks.items() if k.endswith("cordon-by")), None)
    why = next((v for k, v in marks.items() if k.endswith("cordon-reason")), "")
    if by is not None and _nvsentinel(by, marks):
        return Cordon("nvsentinel", _short(why or by))
    ours = marks.get(LABEL_ISOLATED_BY) is not None or any(t.get("key") == TAINT_KEY for t in taints)
    if spec.get("unschedulable") and not (ours and marks.get(ANNOTATION_CORDONED) == "true"):
        return Cordon("admin", _short(why or (f"cordoned by {by}" if by else "cordoned")))
    condition = _bad_condition(node)
    if condition is not None:
        return condition
    lifecycle = next((t["key"] for t in taints if _lifecycle(str(t.get("key", "")))), None)
    if lifecycle is not None:
        return Cordon("kubernetes", _short(lifecycle.removeprefix("node.kubernetes.io/")))
    return Cordon("trainguard", "isolated by trainguard") if ours else None


def isolated_by_other(node: Mapping[str, Any]) -> Cordon | None:
    """The cordon of someone other than trainguard, or None."""
    found = cordon_of(node)
    return None if found is None or found.source == "trainguard" else found


def _marks(node: Mapping[str, Any]) -> dict[str, str]:
    meta = metadata(node)
    return {str(k): str(v) for k, v in {**(meta.get("annotations") or {}), **(meta.get("labels") or {})}.items()}


def _nvsentinel(by: str, marks: Mapping[str, str]) -> bool:
    named = "nvsentinel" in by.lower() or "quarantine" in by.lower()
    return named or any(k.startswith("k8saas.nvidia.com/") for k in marks)


def _bad_condition(node: Mapping[str, Any]) -> Cordon | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if not isinstance(c, dict):
            continue
        kind, status, reason = str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason") or "")
        if kind == "Ready" and status != "True":
            return Cordon("kubernetes", _short(f"NotReady: {reason}" if reason else "NotReady"))
        if status == "True" and kind in KUBELET_CONDITIONS:
            return Cordon("kubernetes", _short(kind))
        if status == "True" and kind and not kind.endswith(("Ready", "Available", "Healthy")):
            return Cordon("node_problem", _short(f"{kind}: {reason}" if reason else kind))
    return None


def _lifecycle(key: str) -> bool:
    return key.startswith("node.kubernetes.io/") and key.removeprefix("node.kubernetes.io/") in LIFECYCLE_TAINTS


def _short(text: str) -> str:
    spaced = _SPACE.sub(" ", text)  # newlines and tabs become one space before the rest goes
    return "".join(ch for ch in spaced if ch.isprintable()).strip()[:MAX_REASON]
