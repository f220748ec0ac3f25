"""The one seam to the Kubernetes API that the JobSet and PyTorchJob adapters share, and its vocabulary.

Every request to the API server goes through ``KubeAPI``: the official ``kubernetes`` client with a
timeout on each call; every patch sent as ``application/merge-patch+json``, named explicitly (the
generated client otherwise picks strategic merge or JSON patch by itself, and custom resources have
no strategic merge patch); raw JSON back as plain dicts; any failure turned into ``SchedulerError``
(state unknown, never "nothing there"); each call counted in ``KubeRequestMetrics``.
``PERMISSIONS`` lists the (API group, resource, verb) triples the adapters use; the Helm chart's
ClusterRole grants exactly these, and a test holds the three together.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from responder.clock import format_rfc3339
from responder.schedulers.base import ActionRequest, SchedulerError, SchedulerRefused, identity_refusal
from responder.schedulers.seam import Seam, SeamMetrics
from trainguard.identity import validate_optional_cluster

PREFIX: Final = "trainguard.io/"
TAINT_KEY: Final = PREFIX + "implicated"
LABEL_ISOLATED_BY: Final = PREFIX + "isolated-by"
ANNOTATION_INCIDENT: Final = PREFIX + "incident"
ANNOTATION_REASON: Final = PREFIX + "isolation-reason"
ANNOTATION_ISOLATED_AT: Final = PREFIX + "isolated-at"
ANNOTATION_CORDONED: Final = PREFIX + "cordoned"
NODE_ANNOTATIONS: Final = (ANNOTATION_INCIDENT, ANNOTATION_REASON, ANNOTATION_ISOLATED_AT, ANNOTATION_CORDONED)
# on the workload object
ANNOTATION_EXCLUDED: Final = PREFIX + "excluded-nodes"
ANNOTATION_HELD_AT: Final = PREFIX + "held-at"
ANNOTATION_STOPPED_AT: Final = PREFIX + "stopped-at"
ANNOTATION_LAST_INCIDENT: Final = PREFIX + "last-incident"

MERGE_PATCH: Final = "application/merge-patch+json"

# (API group, resource, verb): everything the adapters ask of the API server. The chart's ClusterRole
# (k8s/trainguard/files/rbac-rules.yaml) grants exactly this; tests/test_k8s_rbac.py checks both ways.
PERMISSIONS: Final = frozenset(
    {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "patch"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("jobset.x-k8s.io", "jobsets/status", "get"),
        ("kubeflow.org", "pytorchjobs", "get"),
        ("kubeflow.org", "pytorchjobs", "patch"),
        ("kubeflow.org", "pytorchjobs", "delete"),
    }
)

# A label value (also a taint value): what the incident id must look like to name a taint.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
MAX_REASON: Final = 1024


def valid_label_value(value: str) -> bool:
    return bool(_LABEL_VALUE.fullmatch(value))


def rfc3339(moment: datetime) -> str:
    """The form of trainguard's timestamps on Kubernetes objects: RFC 3339 in whole seconds."""
    return format_rfc3339(moment, "seconds")


class KubeSettings(BaseModel):
    """How trainguard reaches one Kubernetes cluster and what it may do there (shared by both adapters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str | None = Field(
        None, description="Cluster name (docs/interfaces.md §1); requests for another cluster are refused. None: any."
    )
    in_cluster: bool = Field(
        False, description="Use the pod's service account (the Helm chart sets this); else a kubeconfig."
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
    context: str | None = Field(None, description="kubeconfig context (default: the current one).")
    request_timeout_s: float = Field(10.0, gt=0, le=300, description="Timeout of one API request.")
    verify_timeout_s: float = Field(
        30.0, ge=0, le=600, description="How long to poll the API for an action's effect to show."
    )
    poll_interval_s: float = Field(0.5, gt=0, le=30, description="Pause between two verification reads.")
    opt_in_label: str = Field(
        "trainguard.io/policy",
        min_length=3,
        description="A workload opts in when it carries this label or annotation (any non-empty value).",
    )
    require_opt_in: bool = Field(
        True, description="Refuse (skip) workload actions on workloads that did not opt in; release is allowed."
    )
    actor: str = Field(
        "trainguard", description="Who isolates: the value of the trainguard.io/isolated-by label on nodes."
    )
    max_isolated_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Circuit breaker: at most this fraction of nodes (at least 1) isolated by trainguard "
        "at once; further isolations are skipped.",
    )

    _cluster = field_validator("cluster")(validate_optional_cluster)

    @field_validator("actor")
    @classmethod
    def _actor(cls, v: str) -> str:
        if not valid_label_value(v):
            raise ValueError(f"actor {v!r} is not a Kubernetes label value")
        return v


def make_api_client(settings: KubeSettings) -> Any:
    """An ``ApiClient`` from the pod's service account or a kubeconfig (imported here: optional extra)."""
    from kubernetes import client, config  # noqa: PLC0415 - optional dependency, trainguard[k8s]

    configuration = client.Configuration()
    if settings.in_cluster:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(settings.kubeconfig) if settings.kubeconfig else None,
            context=settings.context,
            client_configuration=configuration,
        )
    return client.ApiClient(configuration)


class KubeRequestMetrics(SeamMetrics):
    """The Kubernetes seam's metrics; share one per registry (``JobSetScheduler(..., metrics=m)``)."""

    SEAM = Seam("trainguard_kubernetes_request", "call", "Kubernetes API requests", "made",
                "ok, not_found, error", "the HTTP status, or the error's type",
                (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))  # fmt: skip


class KubeAPI:
    """The one seam to the API server: raw JSON dicts in and out, a timeout per call, errors counted.

    ``get``-style methods return ``None`` for 404; every other failure raises ``SchedulerError``.
    """

    def __init__(
        self, api_client: Any, timeout_s: float, metrics: KubeRequestMetrics | None = None, cluster: str = ""
    ) -> None:
        from kubernetes import client  # noqa: PLC0415 - optional dependency, trainguard[k8s]

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._timeout = timeout_s
        self.metrics = metrics if metrics is not None else KubeRequestMetrics()
        self._cluster = cluster

    @classmethod
    def connect(
        cls, settings: KubeSettings, api_client: Any | None = None, metrics: KubeRequestMetrics | None = None
    ) -> KubeAPI:
        """The seam to the cluster of ``settings``: through ``api_client`` (a test's), else one the settings make."""
        client = api_client if api_client is not None else make_api_client(settings)
        return cls(client, settings.request_timeout_s, metrics, settings.cluster or "")

    def close(self) -> None:
        """Close the client's connection pool."""
        self._client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - optional dependency

        m = self.metrics
        started = time.monotonic()
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            data = response.data
        except ApiException as exc:
            if exc.status == 404:
                m.calls.labels(self._cluster, what, "not_found").inc()
                return None
            m.calls.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, str(exc.status)).inc()
            # 4xx is the API server's answer (forbidden, invalid): final, except a timeout, a conflict, a throttle
            final = 400 <= (exc.status or 0) < 500 and exc.status not in (408, 409, 429)
            error = SchedulerRefused if final else SchedulerError
            raise error(f"{what}: HTTP {exc.status} {exc.reason}: {_status_message(exc.body)}") from exc
        except Exception as exc:  # the client raises urllib3, socket and ssl errors unwrapped
            m.calls.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, type(exc).__name__).inc()
            raise SchedulerError(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            m.duration.labels(self._cluster, what).observe(time.monotonic() - started)
        try:
            body: dict[str, Any] = json.loads(data) if data else {}
        except ValueError as exc:
            m.calls.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, "not_json").inc()
            raise SchedulerError(f"{what}: the API server answered something that is not JSON") from exc
        m.calls.labels(self._cluster, what, "ok").inc()
        return body

    def _need(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        body = self._call(what, fn, *args, **kwargs)
        if body is None:
            raise SchedulerRefused(f"{what}: not found")
        return body

    # -- core/v1

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self._call("read_node", self._core.read_node, name)

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self._need("list_node", self._core.list_node).get("items") or [])

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need("patch_node", self._core.patch_node, name, patch, _content_type=MERGE_PATCH)

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        body = self._need(
            "list_namespaced_pod", self._core.list_namespaced_pod, namespace, label_selector=label_selector
        )
        return list(body.get("items") or [])

    def delete_pod(self, namespace: str, name: str) -> bool:
        """False when the pod was already gone."""
        return self._call("delete_namespaced_pod", self._core.delete_namespaced_pod, name, namespace) is not None

    # -- batch/v1

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        body = self._need(
            "list_namespaced_job", self._batch.list_namespaced_job, namespace, label_selector=label_selector
        )
        return list(body.get("items") or [])

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need(
            "patch_namespaced_job", self._batch.patch_namespaced_job, name, namespace, patch, _content_type=MERGE_PATCH
        )

    # -- custom resources

    def get_object(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self._call(f"get {ref.plural}", self._custom.get_namespaced_custom_object, *ref.path)

    def get_object_status(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self._call(f"get {ref.plural}/status", self._custom.get_namespaced_custom_object_status, *ref.path)

    def patch_object(self, ref: ObjectRef, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need(
            f"patch {ref.plural}",
            self._custom.patch_namespaced_custom_object,
            *ref.path, patch,
            _content_type=MERGE_PATCH,
        )  # fmt: skip

    def delete_object(self, ref: ObjectRef) -> bool:
        """Foreground deletion (children first); False when the object was already gone."""
        answer = self._call(
            f"delete {ref.plural}",
            self._custom.delete_namespaced_custom_object,
            *ref.path,
            propagation_policy="Foreground",
        )  # fmt: skip
        return answer is not None


def _status_message(body: object) -> str:
    """The ``message`` of a Kubernetes ``Status`` error body, else a short prefix of the body."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return body[:200]
        if isinstance(parsed, dict):
            return str(parsed.get("message", ""))[:300]
    return ""


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind of namespaced custom resource: where the API serves it, and what people call it."""

    group: str
    version: str
    plural: str
    kind: str

    def ref(self, workload: str) -> ObjectRef:
        """The object named by a workload id, ``namespace/name``."""
        namespace, name = split_workload(workload)
        return ObjectRef(self.group, self.version, self.plural, namespace, name)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    group: str
    version: str
    plural: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group} {self.namespace}/{self.name}"

    @property
    def path(self) -> tuple[str, str, str, str, str]:
        """The leading arguments of every ``CustomObjectsApi`` call on a namespaced object."""
        return self.group, self.version, self.namespace, self.plural, self.name


def split_workload(workload: str) -> tuple[str, str]:
    namespace, _, name = workload.partition("/")
    return namespace, name


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def labels_and_annotations(obj: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    meta = metadata(obj)
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


def opted_in(obj: Mapping[str, Any], key: str) -> bool:
    labels, annotations = labels_and_annotations(obj)
    return bool(labels.get(key) or annotations.get(key))


def excluded_from(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes trainguard isolated for this workload, as recorded on the workload object."""
    _, annotations = labels_and_annotations(obj)
    raw = annotations.get(ANNOTATION_EXCLUDED, "")
    return tuple(n for n in raw.split(",") if n)


def refusal(request: ActionRequest, settings: KubeSettings, scheduler: str) -> str | None:
    """Validate every value that may reach a request; a reason to refuse, or None."""
    reason = identity_refusal(request, scheduler, settings.cluster)
    if reason is None and not valid_label_value(request.incident_id):
        reason = f"incident id {request.incident_id!r} is not a Kubernetes label value (it names the node taint)"
    return reason


def conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Status conditions by type (the last of a type wins)."""
    status = obj.get("status") or {}
    return {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return str(conditions(obj).get(kind, {}).get("status", "")) == "True"
