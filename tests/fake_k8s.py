"""A fake Kubernetes API server at the HTTP level, for the JobSet and PyTorchJob adapter tests.

No Kubernetes API server can run on the test machines, so this one stands in for it: a small
``http.server`` on a free loopback port that serves the endpoints the adapters use, with the
response shapes of the real API (``NodeList``/``Node`` with taints, ``PodList``, ``JobList``,
JobSet and PyTorchJob objects and the JobSet ``/status`` subresource, ``Status`` errors), and the
real ``kubernetes`` client is pointed at it. Every request is recorded (verb, path, query, body,
content type) so a test asserts exactly what a real API server would receive.

What the real server would do and this one does too:

- PATCH honours the content type: ``application/merge-patch+json`` (RFC 7386) and, for built-in
  kinds only, ``application/strategic-merge-patch+json`` are applied as merges (lists replaced, as
  for taints; custom resources answer a strategic merge patch with 415, as a real server does);
  ``application/json-patch+json`` needs a JSON array (a dict body gets 400, as from a real server);
  any other type gets 415. A ``metadata.resourceVersion`` in a patch is a precondition (409 on
  mismatch); every write bumps the object's ``resourceVersion``.
- Node taints are validated (key, effect, value a label value) and 422 is answered otherwise.
- Unknown paths get 404 with a ``Status`` body; so does a missing object.

And a few controllers, much simplified, so that effects can be verified by a fresh read:

- a child Job whose ``activeDeadlineSeconds`` is lowered fails (reason ``DeadlineExceeded``); the
  JobSet controller then restarts the JobSet on the next read of it (``status.restarts`` + 1, and
  ``restartsCountTowardsMax`` + 1 unless a ``RestartJobSetAndIgnoreMaxRestarts`` rule matched),
  re-creating its child Jobs and pods with the next ``restart-attempt`` label; new pods are placed
  by a toy scheduler on nodes that are schedulable and have no ``NoSchedule`` taint;
- ``spec.suspend`` (JobSet) and ``spec.runPolicy.suspend`` (PyTorchJob) set a ``Suspended`` condition;
- a deleted pod of a PyTorchJob is re-created by the "operator" (same name, new uid) on the next list;
- a foreground delete marks the object (``deletionTimestamp``) and removes it on the next read.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest

from responder.clock import format_rfc3339
from responder.model import Action
from responder.schedulers.base import ActionRequest, ActionResult
from tests.services import unavailable

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PYTORCHJOB = ("kubeflow.org", "v1", "pytorchjobs")
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
PYTORCH_POD_LABEL = "training.kubeflow.org/job-name"
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")
T0 = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)  # the adapters' clock in the tests, an hour after T0
MERGE = "application/merge-patch+json"


Scheduler = TypeVar("Scheduler")


def build_adapter(
    scheduler: Callable[..., Scheduler], settings: Callable[..., Any], server: FakeServer, overrides: dict[str, Any]
) -> Scheduler:
    """An adapter on ``server`` at ``NOW``, with the tests' settings (short verify timeout, fast polling)."""
    options = {"verify_timeout_s": 2.0, "poll_interval_s": 0.01, "max_isolated_fraction": 0.5, **overrides}
    return scheduler(settings(**options), api_client=server.api_client(), now=lambda: NOW)


def make_request(action: Action, workload: str, reason: str, incident: str, /, **fields: Any) -> ActionRequest:
    """An attempt-0 request on cluster ``lab``; ``fields`` override any of its values."""
    values: dict[str, Any] = {
        "cluster": "lab",
        "workload": workload,
        "incident_id": incident,
        "reason": reason,
        "attempt": "0",
        **fields,
    }
    return ActionRequest(action=action, **values)


def assert_foreground_delete(kube: FakeKube, result: ActionResult, path: str) -> None:
    """The action did one write, a verified foreground DELETE of ``path``."""
    assert result.outcome == "done"
    assert result.verified
    [delete] = kube.writes()
    assert (delete.method, delete.path, delete.query) == ("DELETE", path, {"propagationPolicy": ["Foreground"]})


def require_module(module: str, package: str) -> Any:
    """Import ``module`` or skip naming its PyPI package; under TRAINGUARD_REQUIRE_SERVICES=1 (CI), fail."""
    try:
        return importlib.import_module(module)
    except ImportError:
        unavailable(f"{module} not importable: pip install {package}")


def k8s_only() -> pytest.MarkDecorator:
    """For ``pytestmark``: the ``k8s`` mark, once the kubernetes client is known to import (else skip or fail)."""
    require_module("kubernetes", "'trainguard[k8s]' (the kubernetes client)")
    return pytest.mark.k8s


def ts(moment: datetime) -> str:
    return format_rfc3339(moment, "seconds")


@dataclass(frozen=True)
class Recorded:
    """One request as the API server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    content_type: str | None
    authorization: str | None = None

    def permission(self) -> tuple[str, str, str]:
        """The RBAC (API group, resource, verb) this request needs, as the API server's authorizer sees it."""
        parts = self.path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[2:]
        else:
            group, rest = parts[1], parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        if len(rest) > 2:
            resource = f"{resource}/{rest[2]}"
        verb = {
            "GET": "get" if name else ("watch" if self.query.get("watch") == ["true"] else "list"),
            "PATCH": "patch",
            "PUT": "update",
            "POST": "create",
            "DELETE": "delete" if name else "deletecollection",
        }[self.method]
        return group, resource, verb


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902, the operations a client might send here (add, replace, remove on object paths)."""
    doc = copy.deepcopy(target)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if op["op"] in ("add", "replace"):
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), op["value"])
            else:
                node[last] = op["value"]
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise ApiError(422, "Invalid", f"unsupported op {op['op']}")
    return doc


class FakeKube:
    """The API server's state, its request log, and the toy controllers. Thread-safe (one lock)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (resource, namespace, name)
        self.requests: list[Recorded] = []
        self._rv = itertools.count(1000)
        self.clock: Callable[[], datetime] = lambda: T0 + timedelta(hours=1, seconds=5)
        self._pending_restarts: set[tuple[str, str]] = set()
        self._pending_pods: list[dict[str, Any]] = []
        self.fail_next: dict[tuple[str, str], int] = {}  # (method, path) -> HTTP status to answer once

    # -- seeding -----------------------------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", ts(T0))
        return obj

    def add(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        with self.lock:
            self.objects[(resource, meta.get("namespace", ""), meta["name"])] = self._stamp(obj)
        return obj

    @classmethod
    def four_nodes(cls, taints: dict[str, list[dict[str, Any]]] | None = None) -> FakeKube:
        """A fake cluster with the nodes ``gpu-1`` to ``gpu-4``, tainted as ``taints`` says (by node name)."""
        kube = cls()
        for name in ("gpu-1", "gpu-2", "gpu-3", "gpu-4"):
            kube.add_node(name, taints=(taints or {}).get(name))
        return kube

    def add_node(self, name: str, taints: list[dict[str, Any]] | None = None, unschedulable: bool = False) -> None:
        spec: dict[str, Any] = {"podCIDR": "10.0.0.0/24"}
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        self.add(
            "nodes",
            {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": spec,
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
        )

    def add_jobset(
        self,
        namespace: str,
        name: str,
        replicas: int = 2,
        nodes: list[str] | None = None,
        opt_in: bool = True,
        failure_policy: dict[str, Any] | None = None,
        restarts: int = 0,
    ) -> None:
        labels = {"trainguard.io/policy": "default"} if opt_in else {}
        self.add(
            "jobsets",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": name, "namespace": namespace, "labels": labels, "generation": 1},
                "spec": {
                    "failurePolicy": failure_policy if failure_policy is not None else {"maxRestarts": 3},
                    "replicatedJobs": [
                        {
                            "name": "workers",
                            "replicas": replicas,
                            "template": {"spec": {"backoffLimit": 0, "template": {"spec": {"containers": []}}}},
                        }
                    ],
                    "suspend": False,
                },
                "status": {
                    "restarts": restarts,
                    "restartsCountTowardsMax": restarts,
                    "replicatedJobsStatus": [{"name": "workers", "active": replicas, "ready": replicas}],
                    "conditions": [],
                },
            },
        )
        self._create_children(namespace, name, restarts, replicas, nodes)

    def _create_children(
        self, namespace: str, name: str, attempt: int, replicas: int, nodes: list[str] | None = None
    ) -> None:
        for index in range(replicas):
            job = f"{name}-workers-{index}"
            labels = {
                JOBSET_NAME: name,
                REPLICATED_JOB: "workers",
                RESTART_ATTEMPT: str(attempt),
                GLOBAL_INDEX: str(index),
                "jobset.sigs.k8s.io/job-index": str(index),
            }
            self.add(
                "jobs",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": job, "namespace": namespace, "labels": labels, "annotations": dict(labels)},
                    "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1},
                    "status": {"active": 1, "startTime": ts(T0), "ready": 1},
                },
            )
            node = nodes[index] if nodes else self.schedule()
            self.add(
                "pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job}-{uuid.uuid4().hex[:5]}",
                        "namespace": namespace,
                        "labels": {**labels, "batch.kubernetes.io/job-name": job, "job-name": job},
                        "creationTimestamp": ts(self.clock()),
                    },
                    "spec": {"nodeName": node, "containers": [{"name": "trainer"}]},
                    "status": {"phase": "Running"},
                },
            )

    def add_pytorchjob(
        self, namespace: str, name: str, workers: int = 2, nodes: list[str] | None = None, opt_in: bool = True
    ) -> None:
        labels = {"trainguard.io/policy": "default"} if opt_in else {}
        self.add(
            "pytorchjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "runPolicy": {"cleanPodPolicy": "None"},
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "restartPolicy": "OnFailure"},
                        "Worker": {"replicas": workers, "restartPolicy": "OnFailure"},
                    },
                },
                "status": {
                    "conditions": [
                        {"type": "Created", "status": "True"},
                        {"type": "Running", "status": "True"},
                    ],
                    "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": workers}},
                },
            },
        )
        roles = [("master", 0)] + [("worker", i) for i in range(workers)]
        for i, (role, index) in enumerate(roles):
            self.add(
                "pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{role}-{index}",
                        "namespace": namespace,
                        "labels": {PYTORCH_POD_LABEL: name, "training.kubeflow.org/replica-type": role},
                    },
                    "spec": {"nodeName": nodes[i] if nodes else self.schedule()},
                    "status": {"phase": "Running"},
                },
            )

    # -- views used by tests -----------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def items(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and (namespace is None or ns == namespace)
            ]

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    def permissions(self) -> set[tuple[str, str, str]]:
        return {r.permission() for r in self.requests}

    def schedule(self) -> str:
        """Toy scheduler: the first schedulable node without a NoSchedule taint."""
        for obj in self.items("nodes"):
            spec = obj.get("spec") or {}
            if spec.get("unschedulable"):
                continue
            if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
                continue
            return str(obj["metadata"]["name"])
        return ""

    # -- request handling --------------------------------------------------------------------------

    def handle(
        self, method: str, url: str, body: Any, content_type: str | None, authorization: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        split = urlsplit(url)
        query = parse_qs(split.query)
        with self.lock:
            self.requests.append(Recorded(method, split.path, query, body, content_type, authorization))
            status = self.fail_next.pop((method, split.path), None)
            if status is not None:
                return status, _status(status, "InternalError", "injected failure")
            try:
                return 200, self._route(method, split.path, query, body, content_type)
            except ApiError as exc:
                return exc.code, _status(exc.code, exc.reason, exc.message)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, content_type: str | None
    ) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            group_version = "v1"
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            rest = parts[3:]
            group_version = f"{parts[1]}/{parts[2]}"
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        known = {
            "v1": {"nodes", "pods"},
            "batch/v1": {"jobs"},
            "jobset.x-k8s.io/v1alpha2": {"jobsets"},
            "kubeflow.org/v1": {"pytorchjobs"},
        }
        if not rest or rest[0] not in known.get(group_version, set()):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub not in (None, "status") or (sub == "status" and resource != "jobsets"):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        if name is None:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not served here")
            return self._list(resource, namespace, query)
        self._controllers_on_read(resource, namespace, name)
        key = (resource, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
        if method == "GET":
            return copy.deepcopy(obj)
        if method == "PATCH":
            return copy.deepcopy(self._patch(key, obj, body, content_type))
        if method == "DELETE":
            return self._delete(key, obj, query, body)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not served here")

    def _list(self, resource: str, namespace: str, query: dict[str, list[str]]) -> dict[str, Any]:
        if resource == "pods":
            self._operator_recreates_pods()
        selector = query.get("labelSelector", [""])[0]
        wanted = dict(item.split("=", 1) for item in selector.split(",") if item)
        items = [
            o
            for o in self.items(resource, namespace or None)
            if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        kind = {"nodes": "NodeList", "pods": "PodList", "jobs": "JobList"}.get(resource, "List")
        return {
            "kind": kind,
            "apiVersion": "batch/v1" if resource == "jobs" else "v1",
            "metadata": {"resourceVersion": str(next(self._rv))},
            "items": items,
        }

    def _patch(
        self, key: tuple[str, str, str], obj: dict[str, Any], body: Any, content_type: str | None
    ) -> dict[str, Any]:
        if content_type == "application/strategic-merge-patch+json" and key[0] in ("jobsets", "pytorchjobs"):
            raise ApiError(  # custom resources have no strategic merge patch
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        if content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != obj["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {key[0]} "{key[2]}": the object has been modified',
                )
            patched: dict[str, Any] = merge_patch(obj, body)
        elif content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            patched = json_patch(obj, body)
        else:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
            )
        patched["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        if key[0] == "nodes":
            _validate_taints(patched)
        self._stamp(patched)
        self.objects[key] = patched
        self._controllers_on_write(key, obj, patched)
        return patched

    def _delete(
        self, key: tuple[str, str, str], obj: dict[str, Any], query: dict[str, list[str]], body: Any
    ) -> dict[str, Any]:
        policy = query.get("propagationPolicy", [None])[0] or (body or {}).get("propagationPolicy")
        if key[0] in ("jobsets", "pytorchjobs") and policy == "Foreground":
            obj["metadata"]["deletionTimestamp"] = ts(self.clock())
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._stamp(obj)
            return copy.deepcopy(obj)
        del self.objects[key]
        if key[0] == "pods" and PYTORCH_POD_LABEL in (obj["metadata"].get("labels") or {}):
            self._pending_pods.append(obj)
        return copy.deepcopy(obj)

    # -- the toy controllers -----------------------------------------------------------------------

    def _controllers_on_write(self, key: tuple[str, str, str], before: dict[str, Any], after: dict[str, Any]) -> None:
        resource, namespace, _ = key
        if resource == "jobs":
            deadline = (after.get("spec") or {}).get("activeDeadlineSeconds")
            if deadline is not None and deadline <= 60 and not (before.get("spec") or {}).get("activeDeadlineSeconds"):
                after["status"] = {
                    "failed": 1,
                    "conditions": [
                        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "DeadlineExceeded",
                            "message": "Job was active longer than specified deadline",
                        },
                    ],
                }
                jobset = after["metadata"]["labels"].get(JOBSET_NAME)
                if jobset:
                    self._pending_restarts.add((namespace, jobset))
        elif resource == "jobsets":
            suspended = bool((after.get("spec") or {}).get("suspend"))
            _set_condition(after, "Suspended", suspended, "SuspendedJobs" if suspended else "ResumeJobs")
            if suspended:
                after["status"]["replicatedJobsStatus"] = [{"name": "workers", "active": 0, "ready": 0}]
        elif resource == "pytorchjobs":
            suspended = bool(((after.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
            _set_condition(after, "Suspended", suspended, "PyTorchJobSuspended" if suspended else "PyTorchJobResumed")
            _set_condition(after, "Running", not suspended, "PyTorchJobRunning")

    def _controllers_on_read(self, resource: str, namespace: str, name: str) -> None:
        key = (resource, namespace, name)
        obj = self.objects.get(key)
        if obj is not None and obj["metadata"].get("deletionTimestamp"):
            del self.objects[key]  # foreground deletion finished
            for child in [
                k for k, o in self.objects.items() if o["metadata"].get("labels", {}).get(JOBSET_NAME) == name
            ]:
                del self.objects[child]
            return
        if resource == "jobsets" and (namespace, name) in self._pending_restarts and obj is not None:
            self._pending_restarts.discard((namespace, name))
            status = obj["status"]
            ignore = any(
                r.get("action") == "RestartJobSetAndIgnoreMaxRestarts"
                for r in (obj["spec"].get("failurePolicy") or {}).get("rules") or []
            )
            status["restarts"] = int(status.get("restarts", 0)) + 1
            if not ignore:
                status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
            for child in [
                k for k, o in self.objects.items() if k[0] in ("jobs", "pods")
                and k[1] == namespace and o["metadata"].get("labels", {}).get(JOBSET_NAME) == name
            ]:  # fmt: skip
                del self.objects[child]
            replicas = obj["spec"]["replicatedJobs"][0]["replicas"]
            self._create_children(namespace, name, status["restarts"], replicas)
            self._stamp(obj)

    def _operator_recreates_pods(self) -> None:
        while self._pending_pods:
            old = self._pending_pods.pop(0)
            meta = old["metadata"]
            self.add(
                "pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "labels": meta["labels"],
                        "creationTimestamp": ts(self.clock()),
                    },
                    "spec": {"nodeName": self.schedule()},
                    "status": {"phase": "Pending"},
                },
            )


def _set_condition(obj: dict[str, Any], kind: str, value: bool, reason: str) -> None:
    conditions = [c for c in obj.setdefault("status", {}).get("conditions") or [] if c.get("type") != kind]
    conditions.append({"type": kind, "status": "True" if value else "False", "reason": reason})
    obj["status"]["conditions"] = conditions


def _validate_taints(node: dict[str, Any]) -> None:
    for i, taint in enumerate((node.get("spec") or {}).get("taints") or []):
        if not taint.get("key") or taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ApiError(422, "Invalid", f"spec.taints[{i}]: key and a valid effect are required")
        if not _LABEL_VALUE.fullmatch(str(taint.get("value", ""))):
            raise ApiError(422, "Invalid", f"spec.taints[{i}].value: must be a valid label value")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class FakeServer:
    """A running fake API server: ``url`` for the client, ``kube`` for its state and request log."""

    kube: FakeKube
    url: str
    clients: list[Any] = field(default_factory=list, repr=False)

    def api_client(self) -> Any:
        """A real ``kubernetes.client.ApiClient`` pointed at this server (no auth, plain HTTP)."""
        from kubernetes import client  # noqa: PLC0415 - only the k8s tests import the client

        configuration = client.Configuration()
        configuration.host = self.url
        api_client = client.ApiClient(configuration)
        self.clients.append(api_client)
        return api_client


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                code, answer = 400, _status(400, "BadRequest", "the body is not JSON")
            else:
                code, answer = kube.handle(
                    self.command, self.path, body, self.headers.get("Content-Type"), self.headers.get("Authorization")
                )
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    return Handler


def serve(kube: FakeKube) -> Iterator[FakeServer]:
    """Run the fake on a free loopback port for the duration of a fixture."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(kube))  # port 0: the kernel picks a free one
    server.daemon_threads = True
    server.block_on_close = False  # handler threads wait on the client's keep-alive connections
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    running = FakeServer(kube, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield running
    finally:
        for api_client in running.clients:
            api_client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
