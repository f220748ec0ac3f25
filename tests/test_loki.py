"""The audit mirror to Loki / VictoriaLogs (``responder/loki.py``).

Loki (and VictoriaLogs) cannot run on these machines (no package, no download), so every test here
mocks the push endpoint with respx and checks the exact request format of INTEGRATION §7.1: the
JSON body, its headers, the path and the query parameters. The worker thread, the spool on disk,
the backoff and the metrics are the real ones.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from responder.loki import BASE_LABELS, INVALID_CLUSTER, LokiMirror, LokiSettings, entry_for
from responder.model import AuditRecord, new_id
from tests.conftest import Responder
from tests.services import wait_until
from trainguard.lab import payloads

LOKI = "http://loki.test:3100"
PUSH = f"{LOKI}/loki/api/v1/push"
FAST = {"batch_wait_s": 0.05, "backoff_initial_s": 0.02, "backoff_max_s": 0.1, "timeout_s": 1.0}


def record(cluster: str = "lab", workload: str = "4242", action: str = "requeue_excluding", **kw: Any) -> AuditRecord:
    now = time.time()
    values: dict[str, Any] = {
        "id": new_id("dec"), "kind": "decision", "time": now, "cluster": cluster, "workload": workload,
        "scheduler": "slurm", "attempt": "0", "incident_id": new_id("inc"), "patterns": ["xid_79_fallen_off_bus"],
        "evidence": [{"fingerprint": "abc", "labels": {"alertname": "TrainguardGpuXid", "host": "gpu-002"},
                      "startsAt": "2026-11-29T10:00:00.000Z", "summary": "XID 79 on gpu-002"}],
        "failure_class": "infra", "implicated_nodes": ["gpu-002"], "action": action, "excluded_nodes": ["gpu-002"],
        "mode": "monitor", "outcome": "planned", "reason": "gpu-002 fell off the bus", "detected_at": now - 5,
        "received_at": now - 4, "decided_at": now,
    }  # fmt: skip
    values.update(kw)
    return AuditRecord(**values)


def bodies(route: respx.Route) -> list[dict[str, Any]]:
    out = []
    for call in route.calls:
        raw = call.request.content
        if call.request.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        out.append(json.loads(raw))
    return out


def pushed_ids(route: respx.Route, only_ok: bool = True) -> list[str]:
    ids: list[str] = []
    for call, body in zip(route.calls, bodies(route), strict=True):
        if only_ok and (call.optional_response is None or call.optional_response.status_code != 204):
            continue
        for stream in body["streams"]:
            ids.extend(json.loads(value[1])["id"] for value in stream["values"])
    return ids


@pytest.fixture
def mirrors(tmp_path: Path) -> Iterator[Callable[..., tuple[LokiMirror, CollectorRegistry]]]:
    started: list[LokiMirror] = []

    def build(**settings: Any) -> tuple[LokiMirror, CollectorRegistry]:
        registry = CollectorRegistry()
        mirror = LokiMirror(LokiSettings(**{"url": LOKI, **FAST, **settings}), tmp_path / "spool", registry)
        mirror.start()
        started.append(mirror)
        return mirror, registry

    yield build
    for mirror in started:
        mirror.stop(timeout=5)


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@respx.mock(assert_all_mocked=True)
def test_push_matches_the_documented_json_format(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """One record -> one POST /loki/api/v1/push, gzip JSON, tenant header (Loki mocked: it cannot run here)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(204))
    mirror, registry = mirrors(tenant="tenant-a")
    rec = record(node=None)
    mirror.submit(rec)
    assert mirror.wait_idle(5)

    assert route.call_count == 1
    request = route.calls[0].request
    assert request.method == "POST"
    assert request.url.path == "/loki/api/v1/push"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["content-encoding"] == "gzip"
    assert request.headers["x-scope-orgid"] == "tenant-a"
    (body,) = bodies(route)
    assert list(body) == ["streams"]
    (stream,) = body["streams"]
    assert stream["stream"] == {
        "app": "trainguard", "kind": "audit", "cluster": "lab", "action": "requeue_excluding", "mode": "monitor",
        "failure_class": "infra",
    }  # fmt: skip
    (value,) = stream["values"]
    ts, line, metadata = value
    assert isinstance(ts, str)
    assert ts.isdigit()
    assert abs(int(ts) / 1e9 - rec.time) < 1e-3
    assert json.loads(line) == rec.to_json()
    assert metadata == {
        "record_id": rec.id, "record_kind": "decision", "incident_id": rec.incident_id, "workload": "4242",
        "attempt": "0", "outcome": "planned", "nodes": "gpu-002", "patterns": "xid_79_fallen_off_bus",
    }  # fmt: skip
    assert all(isinstance(v, str) for v in metadata.values())
    assert metric(registry, "trainguard_responder_loki_pushed_total") == 1


@respx.mock(assert_all_mocked=True)
def test_records_are_batched_one_stream_per_label_set(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """Records arriving together share a push; each label set is one stream (Loki mocked with respx)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(204))
    mirror, _ = mirrors(batch_wait_s=0.3, gzip=False)
    records = [record(cluster="lab"), record(cluster="lab"), record(cluster="prod", action="stop")]
    for rec in records:
        mirror.submit(rec)
    assert mirror.wait_idle(5)
    assert route.call_count == 1
    assert "content-encoding" not in route.calls[0].request.headers
    (body,) = bodies(route)
    streams = {(s["stream"]["cluster"], s["stream"]["action"]): len(s["values"]) for s in body["streams"]}
    assert streams == {("lab", "requeue_excluding"): 2, ("prod", "stop"): 1}
    assert set(body["streams"][0]["stream"]) == set(BASE_LABELS)


@respx.mock(assert_all_mocked=True)
def test_batch_size_is_bounded(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """batch_max_records splits a burst into several pushes (Loki mocked with respx: it cannot run here)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(204))
    mirror, registry = mirrors(batch_wait_s=0.3, batch_max_records=2)
    records = [record() for _ in range(5)]
    for rec in records:
        mirror.submit(rec)
    assert mirror.wait_idle(5)
    assert route.call_count == 3
    assert pushed_ids(route) == [r.id for r in records]
    assert metric(registry, "trainguard_responder_loki_pushed_total") == 5


@respx.mock(assert_all_mocked=True)
def test_outage_spools_then_replays_in_order(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]], tmp_path: Path
) -> None:
    """503, 429, connection refused: batches go to the spool and are replayed in order once Loki answers.

    Loki is mocked with respx because it cannot run on these machines.
    """
    outage: list[httpx.Response | Exception] = [
        httpx.Response(503, text="ingester not ready"),
        httpx.Response(429, headers={"Retry-After": "0"}, text="rate limited"),
        httpx.ConnectError("connection refused"),
    ]

    def loki(request: httpx.Request) -> httpx.Response:
        effect = outage.pop(0) if outage else httpx.Response(204)
        if isinstance(effect, Exception):
            raise effect
        return effect

    route = respx_mock.post(PUSH).mock(side_effect=loki)
    mirror, registry = mirrors(batch_max_records=1)
    records = [record() for _ in range(3)]
    for rec in records:
        mirror.submit(rec)
    assert mirror.wait_idle(10)

    assert pushed_ids(route) == [r.id for r in records]
    assert metric(registry, "trainguard_responder_loki_push_failures_total", reason="http_5xx") == 1
    assert metric(registry, "trainguard_responder_loki_push_failures_total", reason="http_429") == 1
    assert metric(registry, "trainguard_responder_loki_push_failures_total", reason="transport") == 1
    assert metric(registry, "trainguard_responder_loki_spooled_total") == 3
    assert metric(registry, "trainguard_responder_loki_pushed_total") == 3
    assert metric(registry, "trainguard_responder_loki_dropped_total", reason="spool_full") == 0
    assert metric(registry, "trainguard_responder_loki_spool_files") == 0
    assert list((tmp_path / "spool").iterdir()) == []


def test_spool_survives_a_restart_and_is_replayed_at_start(tmp_path: Path) -> None:
    """Loki down until the responder stops: the spool on disk is replayed by the next process's mirror.

    Loki is mocked with respx (connection refused, then 204) because it cannot run on these machines.
    """
    settings = LokiSettings(url=LOKI, **FAST)
    records = [record() for _ in range(3)]
    with respx.mock(assert_all_mocked=True) as down:
        refused = down.post(PUSH).mock(side_effect=httpx.ConnectError("connection refused"))
        first = LokiMirror(settings, tmp_path / "spool", CollectorRegistry())
        first.start()
        for rec in records:
            first.submit(rec)
        assert first.wait_handled(5)
        first.stop()
    assert refused.call_count >= 1
    spooled = sorted((tmp_path / "spool").glob("*.json"))
    assert spooled
    on_disk = [json.loads(p.read_bytes()) for p in spooled]
    assert [json.loads(v[1])["id"] for b in on_disk for s in b["streams"] for v in s["values"]] == [
        r.id for r in records
    ]

    with respx.mock(assert_all_mocked=True) as up:
        route = up.post(PUSH).mock(return_value=httpx.Response(204))
        registry = CollectorRegistry()
        second = LokiMirror(settings, tmp_path / "spool", registry)
        second.start()
        try:
            assert second.wait_idle(5)
        finally:
            second.stop()
    assert pushed_ids(route) == [r.id for r in records]
    assert metric(registry, "trainguard_responder_loki_pushed_total") == 3
    assert list((tmp_path / "spool").glob("*.json")) == []


@respx.mock(assert_all_mocked=True)
def test_spool_bound_drops_and_says_so(
    respx_mock: respx.MockRouter,
    mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past the spool bound a batch is dropped: an error log names the records and a counter counts them.

    Loki is mocked with respx (always 500) because it cannot run on these machines.
    """
    respx_mock.post(PUSH).mock(return_value=httpx.Response(500, text="boom"))
    mirror, registry = mirrors(batch_max_records=1, spool_max_files=2, backoff_initial_s=5, backoff_max_s=5)
    records = [record() for _ in range(4)]
    with caplog.at_level(logging.ERROR, logger="responder.loki"):
        for rec in records:
            mirror.submit(rec)
        assert mirror.wait_handled(5)
    assert metric(registry, "trainguard_responder_loki_spooled_total") == 2
    assert metric(registry, "trainguard_responder_loki_dropped_total", reason="spool_full") == 2
    assert metric(registry, "trainguard_responder_loki_spool_files") == 2
    dropped = [r for r in caplog.records if "spool" in r.getMessage() and "full" in r.getMessage()]
    assert len(dropped) == 2
    assert records[2].id in dropped[0].getMessage()
    assert "audit store" in dropped[0].getMessage()


@respx.mock(assert_all_mocked=True)
def test_spool_byte_bound(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """The spool is bounded in bytes too (Loki mocked with respx: connection refused)."""
    respx_mock.post(PUSH).mock(side_effect=httpx.ConnectError("refused"))
    mirror, registry = mirrors(batch_max_records=1, spool_max_bytes=2500, backoff_initial_s=5, backoff_max_s=5)
    for _ in range(5):
        mirror.submit(record())
    assert mirror.wait_handled(5)
    spooled = metric(registry, "trainguard_responder_loki_spooled_total")
    assert 1 <= spooled < 5
    assert metric(registry, "trainguard_responder_loki_dropped_total", reason="spool_full") == 5 - spooled
    assert metric(registry, "trainguard_responder_loki_spool_bytes") <= 2500


@respx.mock(assert_all_mocked=True)
def test_a_400_is_dropped_not_retried(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """Loki's 400 (entry too old, bad line) will never succeed: counted as rejected, not spooled (respx)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(400, text="entry too far behind"))
    mirror, registry = mirrors()
    mirror.submit(record())
    assert mirror.wait_idle(5)
    assert route.call_count == 1
    assert metric(registry, "trainguard_responder_loki_dropped_total", reason="rejected") == 1
    assert metric(registry, "trainguard_responder_loki_spooled_total") == 0


@respx.mock(assert_all_mocked=True)
def test_victorialogs_endpoint_stream_fields_and_tenancy(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """target=victorialogs: /insert/loki/api/v1/push with _stream_fields, AccountID/ProjectID headers.

    VictoriaLogs is mocked with respx because it cannot run on these machines.
    """
    vlogs = "http://vlogs.test:9428"
    route = respx_mock.post(f"{vlogs}/insert/loki/api/v1/push").mock(return_value=httpx.Response(204))
    mirror, _ = mirrors(url=vlogs, target="victorialogs", account_id=3, project_id=7, labels={"env": "prod"})
    mirror.submit(record())
    assert mirror.wait_idle(5)
    request = route.calls[0].request
    assert request.url.params["_stream_fields"] == "app,kind,cluster,action,mode,failure_class,env"
    assert request.headers["accountid"] == "3"
    assert request.headers["projectid"] == "7"
    assert "x-scope-orgid" not in request.headers
    (body,) = bodies(route)
    assert body["streams"][0]["stream"]["env"] == "prod"


@respx.mock(assert_all_mocked=True)
def test_submit_never_blocks_even_when_loki_hangs(
    respx_mock: respx.MockRouter, mirrors: Callable[..., tuple[LokiMirror, CollectorRegistry]]
) -> None:
    """A Loki that answers after seconds does not slow submit(); a full queue drops and counts (respx mock)."""

    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.2)
        return httpx.Response(204)

    route = respx_mock.post(PUSH).mock(side_effect=slow)
    mirror, registry = mirrors(queue_max_records=20, batch_max_records=10)
    started = time.perf_counter()
    for _ in range(500):
        mirror.submit(record())
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, f"500 submits took {elapsed:.3f}s"
    assert metric(registry, "trainguard_responder_loki_dropped_total", reason="queue_full") >= 450
    wait_until(lambda: route.called, 5, what="the first push")
    mirror.stop()  # inside the mock: nothing may reach the network


def test_hostile_cluster_stays_out_of_stream_labels() -> None:
    """A refusal of an alert with a junk cluster label gets cluster=_invalid; the value stays in the line."""
    junk = "x" * 300 + '"}'
    entry = entry_for(record(cluster=junk, kind="refusal", action="none", outcome="skipped"))
    assert dict(entry.labels)["cluster"] == INVALID_CLUSTER
    assert json.loads(entry.line)["cluster"] == junk


def test_oversized_evidence_is_truncated_and_said() -> None:
    """Lines stay under max_line_bytes by dropping evidence items, and the line says how many."""
    evidence = [{"fingerprint": f"f{i}", "labels": {"x": "y" * 200}} for i in range(200)]
    entry = entry_for(record(evidence=evidence), max_line=8192)
    assert len(entry.line.encode()) <= 8192
    line = json.loads(entry.line)
    assert line["evidence_truncated"] == 200 - len(line["evidence"])


def test_settings_name_the_bad_value() -> None:
    with pytest.raises(ValidationError, match="http"):
        LokiSettings(url="loki:3100")
    with pytest.raises(ValidationError, match="cluster"):
        LokiSettings(url=LOKI, labels={"cluster": "x"})


@respx.mock(assert_all_mocked=True)
def test_engine_sink_mirrors_decisions_of_a_real_incident(
    respx_mock: respx.MockRouter, make_responder: Callable[..., Responder], tmp_path: Path
) -> None:
    """Wired as an engine sink, the mirror ships what the responder decides (Loki mocked with respx)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(204))
    responder = make_responder()
    mirror = LokiMirror(LokiSettings(url=LOKI, **FAST), tmp_path / "spool", responder.registry)
    mirror.start()
    try:
        responder.client.app.state.services.engine.sinks.append(mirror.submit)  # type: ignore[attr-defined]
        assert responder.post(payloads.nccl_storm_with_xid()).status_code == 200
        decisions = responder.wait_decisions(1)
        assert mirror.wait_idle(5)
    finally:
        mirror.stop()
    lines = [json.loads(v[1]) for b in bodies(route) for s in b["streams"] for v in s["values"]]
    assert {d["id"] for d in decisions} <= {line["id"] for line in lines}
    mirrored = next(line for line in lines if line["id"] == decisions[0]["id"])
    assert mirrored["evidence"]
    assert "gpu-002" in mirrored["implicated_nodes"]


@respx.mock(assert_all_mocked=True)
def test_settings_loki_field_wires_the_mirror(
    respx_mock: respx.MockRouter, make_responder: Callable[..., Responder]
) -> None:
    """With ``loki:`` in the settings, create_app mirrors every decision (Loki is mocked with respx)."""
    route = respx_mock.post(PUSH).mock(return_value=httpx.Response(204))
    responder = make_responder(loki={"url": LOKI, **FAST})
    assert responder.post(payloads.nccl_storm_with_xid()).status_code == 200
    (decision,) = responder.wait_decisions(1)
    wait_until(lambda: decision["id"] in pushed_ids(route), 10, what="the decision in Loki")
    assert responder.metric("trainguard_responder_loki_pushed_total") >= 1
