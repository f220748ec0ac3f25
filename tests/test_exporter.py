"""The exporter wired together, driven poll by poll with a fresh registry (no HTTP here)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx
from prometheus_client import CollectorRegistry, generate_latest

from exporters.exporter import Exporter, ExporterConfig
from exporters.fastpath import FastPath
from exporters.metrics import SafeCollector
from exporters.nvml import NvmlCollector
from exporters.patterns import load_catalog
from exporters.scanner import KINDS
from exporters.state import DEFAULT_PROGRESS_PATTERNS, Identity
from tests.services import wait_until

CATALOG = load_catalog()
XID79 = "[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"
AM = "http://am.test:9093"


def _config(tmp_path: Path, **kw: Any) -> ExporterConfig:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "progress").mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "cluster": "lab",
        "host": "gpu-017",
        "log_globs": [str(tmp_path / "logs" / "*.log")],
        "progress_dir": tmp_path / "progress",
        "nvml": False,
    }
    base.update(kw)
    return ExporterConfig(**base)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def _labels(pattern: str, category: str, **ident: str) -> dict[str, str]:
    base = {"cluster": "lab", "workload": "", "scheduler": "", "attempt": "", "rank": "", "host": "gpu-017"}
    base.update(ident)
    return {**base, "pattern": pattern, "category": category}


def _state(tmp_path: Path, rank: str, log: Path | None, pid: int | None = None, **ident: str) -> None:
    identity = {"scheduler": "slurm", "workload": "4242", "attempt": "2", "rank": rank, "host": "gpu-017", **ident}
    streams = []
    if log is not None:
        st = log.stat()
        streams.append({"fd": 1, "path": str(log), "dev": st.st_dev, "ino": st.st_ino})
    state = {"version": 1, "pid": pid or os.getpid(), "identity": identity, "streams": streams, "step": 5}
    (tmp_path / "progress" / f"4242-a2-r{rank}.json").write_text(json.dumps(state))


def test_counts_matches_per_identity_and_precreates_zeros(tmp_path: Path, registry: CollectorRegistry) -> None:
    cfg = _config(tmp_path)
    log = tmp_path / "logs" / "worker.log"
    log.write_text("")
    _state(tmp_path, "3", log)
    exp = Exporter(cfg, registry)
    exp.poll_once()
    ident = {"workload": "4242", "scheduler": "slurm", "attempt": "2", "rank": "3"}
    # every pattern exists at 0 for the known identity before anything matched; a harmless row has no series
    for p in CATALOG:
        got = registry.get_sample_value("trainguard_log_pattern_matches_total", _labels(p.id, p.category, **ident))
        assert got == (None if p.harmless else 0), p.id
    with log.open("a") as f:
        f.write("step 1 ok\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
        f.write("CUDA error: driver shutting down\n")  # harmless: neither a match nor unclassified
        f.write("[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    exp.poll_once()
    value = registry.get_sample_value
    assert value("trainguard_log_pattern_matches_total", _labels("cuda_illegal_address", "app_error", **ident)) == 1
    # the line names its own rank: that wins over the file's rank
    assert (
        value("trainguard_log_pattern_matches_total", _labels("cuda_oom", "app_error", **{**ident, "rank": "6"})) == 1
    )
    assert value("trainguard_exporter_log_lines_total") == 4
    assert value("trainguard_exporter_log_matches_total") == 2
    base = {k: v for k, v in _labels("", "", **ident).items() if k not in ("pattern", "category")}
    assert [value("trainguard_log_unclassified_total", {**base, "kind": k}) for k in KINDS] == [0] * len(KINDS)
    assert value("trainguard_exporter_log_files_followed") == 1


def test_rank_from_file_name_and_configured_workload(tmp_path: Path, registry: CollectorRegistry) -> None:
    cfg = _config(tmp_path, workload="ml/llama", scheduler="jobset", attempt="1")
    exp = Exporter(cfg, registry)
    exp.poll_once()
    (tmp_path / "logs" / "train-rank12.log").write_text(
        "ncclRemoteError: A call failed possibly due to a network error\n"
    )
    exp.poll_once()
    labels = _labels(
        "nccl_remote_error", "infra_network", workload="ml/llama", scheduler="jobset", attempt="1", rank="12"
    )
    assert registry.get_sample_value("trainguard_log_pattern_matches_total", labels) == 1


def test_no_created_series(tmp_path: Path, registry: CollectorRegistry) -> None:
    exp = Exporter(_config(tmp_path, workload="4242", scheduler="slurm", attempt="0"), registry)
    exp.poll_once()
    (tmp_path / "logs" / "a.log").write_text(XID79)
    exp.poll_once()
    text = generate_latest(registry).decode()
    assert "trainguard_log_pattern_matches_total{" in text
    assert "_created" not in text


def test_flood_grows_no_series_and_no_buffers(tmp_path: Path, registry: CollectorRegistry) -> None:
    exp = Exporter(_config(tmp_path), registry)
    exp.poll_once()
    log = tmp_path / "logs" / "k.log"
    log.write_text(XID79)
    exp.poll_once()
    series_before = len(exp.counters.counts)
    with log.open("a") as f:
        f.write(XID79 * 60_000)
    exp.poll_once()
    assert len(exp.counters.counts) == series_before
    assert (
        registry.get_sample_value("trainguard_log_pattern_matches_total", _labels("xid_79_fallen_off_bus", "infra_gpu"))
        == 60_001
    )
    assert all(len(f.partial) == 0 for f in exp.source.files.values())


def test_identity_cap_folds_ranks(tmp_path: Path, registry: CollectorRegistry) -> None:
    exp = Exporter(_config(tmp_path, max_identities=3), registry)
    exp.poll_once()
    lines = "".join(f"[rank{i}]: RuntimeError: CUDA error: device-side assert triggered\n" for i in range(50))
    (tmp_path / "logs" / "all.log").write_text(lines)
    exp.poll_once()
    assert len(exp.counters.identities) <= 4
    assert (registry.get_sample_value("trainguard_exporter_identity_overflow_total") or 0) > 0
    total = sum(v for (_, pid), v in exp.counters.counts.items() if pid == "cuda_device_assert")
    assert total == 50


def test_log_progress_parser(tmp_path: Path, registry: CollectorRegistry) -> None:
    clock = {"t": 100.0}
    cfg = _config(tmp_path, progress_patterns=list(DEFAULT_PROGRESS_PATTERNS), workload="4242", scheduler="slurm")
    exp = Exporter(cfg, registry, clock=lambda: clock["t"])
    exp.poll_once()
    log = tmp_path / "logs" / "train.log"
    log.write_text("[rank0]: step 10 | loss 2.1\n[rank1]: step 10 | loss 2.1\n")
    exp.poll_once()
    clock["t"] = 104.0
    with log.open("a") as f:
        f.write("[rank0]: step 12 | loss 2.0\n iteration      7/  500000 | consumed samples: 1\n")
    exp.poll_once()
    base = {"cluster": "lab", "workload": "4242", "scheduler": "slurm", "attempt": "0", "host": "gpu-017"}
    assert registry.get_sample_value("trainguard_rank_step", {**base, "rank": "0"}) == 12
    assert registry.get_sample_value("trainguard_rank_step_duration_seconds", {**base, "rank": "0"}) == 2.0
    assert registry.get_sample_value("trainguard_rank_last_step_timestamp_seconds", {**base, "rank": "1"}) == 100.0
    assert registry.get_sample_value("trainguard_rank_step", {**base, "rank": ""}) == 7


def _posted(route: respx.Route) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = []
    for call in route.calls:
        alerts += json.loads(call.request.content)
    return alerts


def test_fast_path_posts_critical_infra_matches_once(tmp_path: Path, registry: CollectorRegistry) -> None:
    with respx.mock(assert_all_called=False) as mock:
        route = mock.post(f"{AM}/api/v2/alerts").mock(return_value=httpx.Response(200))
        fp = FastPath(AM, client=httpx.Client())
        exp = Exporter(_config(tmp_path, workload="4242", scheduler="slurm", attempt="0"), registry, fastpath=fp)
        fp.start()
        try:
            exp.poll_once()
            (tmp_path / "logs" / "a.log").write_text(
                "RuntimeError: CUDA error: an illegal memory access was encountered\n" + XID79 + XID79
            )
            exp.poll_once()
            wait_until(lambda: route.called, 10, what="the fast-path post")
        finally:
            fp.stop()
        alerts = _posted(route)
    assert len(alerts) == 1, "app errors are not fast-pathed; the repeat is deduplicated"
    assert alerts[0]["annotations"]["runbook_url"].endswith("runbook.md#trainguardloginfragpu")
    assert alerts[0]["labels"] == {
        "alertname": "TrainguardLogInfraGpu",
        "cluster": "lab",
        "workload": "4242",
        "scheduler": "slurm",
        "attempt": "0",
        "host": "gpu-017",
        "category": "infra_gpu",
        "pattern": "xid_79_fallen_off_bus",
        "severity": "critical",
    }
    assert alerts[0]["endsAt"] > alerts[0]["startsAt"]
    assert registry.get_sample_value("trainguard_exporter_fastpath_alerts_total", {"outcome": "sent"}) == 1
    assert registry.get_sample_value("trainguard_exporter_fastpath_alerts_total", {"outcome": "deduplicated"}) == 1


def test_fast_path_reports_a_dead_rank(tmp_path: Path, registry: CollectorRegistry) -> None:
    with respx.mock(assert_all_called=False) as mock:
        route = mock.post(f"{AM}/api/v2/alerts").mock(return_value=httpx.Response(200))
        fp = FastPath(AM, client=httpx.Client())
        exp = Exporter(_config(tmp_path), registry, fastpath=fp)
        alive = {"yes": True}
        exp.tracker.alive = lambda pid, start: alive["yes"]
        _state(tmp_path, "4", None)
        exp.poll_once()
        alive["yes"] = False
        exp.poll_once()
        fp.start()
        try:
            wait_until(lambda: route.called, 10, what="the fast-path post")
        finally:
            fp.stop()
        alerts = _posted(route)
    assert [a["labels"]["alertname"] for a in alerts] == ["TrainguardRankCrashed"]
    assert alerts[0]["labels"]["rank"] == "4"
    assert alerts[0]["labels"]["category"] == "crash"


def test_fast_path_never_blocks_and_counts_failures() -> None:
    with respx.mock(assert_all_called=False) as mock:
        mock.post(f"{AM}/api/v2/alerts").mock(return_value=httpx.Response(500))
        fp = FastPath(AM, client=httpx.Client(), queue_size=2)
        for i in range(5):  # the sender is not started: the queue fills, then drops
            fp.submit({"alertname": "X", "rank": str(i)}, {})
        assert fp.stats["dropped"] == 3
        assert fp.send([{"labels": {"alertname": "X"}}]) is False
        assert fp.stats["failed"] == 1
        fp.client.close()


class FakeNVMLError(Exception):
    pass


class FakeTimeout(FakeNVMLError):
    pass


def fake_nvml(events: list[int]) -> SimpleNamespace:
    """pynvml's surface as the collector uses it: two GPUs, GPU 1 with two NVLinks."""
    handles = ["h0", "h1"]
    pending = list(events)
    lock = threading.Lock()

    def wait(es: object, ms: int) -> SimpleNamespace:
        with lock:
            if pending:
                return SimpleNamespace(eventType=0x8, eventData=pending.pop(0), device="h1")
        raise FakeTimeout

    def nvlink_state(h: str, link: int) -> int:
        if h == "h1" and link < 2:
            return 1 if link == 0 else 0
        raise FakeNVMLError("not supported")

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVMLError_Timeout=FakeTimeout,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetIndex=handles.index,
        nvmlEventSetCreate=lambda: "es",
        nvmlEventSetFree=lambda es: None,
        nvmlDeviceGetSupportedEventTypes=lambda h: 0xF,
        nvmlDeviceRegisterEvents=lambda h, mask, es: None,
        nvmlEventSetWait=wait,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 3 if h == "h1" else 0,
        nvmlDeviceGetRemappedRows=lambda h: (0, 2, False, h == "h1"),
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link, counter: 7,
    )


def test_nvml_collector_with_a_fake_nvml(registry: CollectorRegistry) -> None:
    nv = fake_nvml([79, 79, 48, 5000])
    rank = Identity("lab", "4242", "slurm", "0", "9", "gpu-017")
    # GPU 1 is used by rank 9 (as the progress hook records it); GPU 0 by nobody
    col = NvmlCollector(
        "lab", "gpu-017", nv, known_xids=[79, 48], wait_ms=10, identity_for_gpu=lambda g, u: rank if g == "1" else None
    )
    registry.register(col)
    assert col.start()
    try:
        xid = {**rank._asdict(), "gpu": "1"}
        gpu1 = {"cluster": "lab", "host": "gpu-017", "gpu": "1"}
        nobody = {"cluster": "lab", "workload": "", "scheduler": "", "attempt": "", "rank": "", "host": "gpu-017"}
        wait_until(
            lambda: registry.get_sample_value("trainguard_gpu_xid_errors_total", {**xid, "xid": "other"}) == 1,
            10,
            what="fake XID events",
        )
        value = registry.get_sample_value
        assert value("trainguard_gpu_xid_errors_total", {**xid, "xid": "79"}) == 2
        assert value("trainguard_gpu_xid_errors_total", {**xid, "xid": "48"}) == 1
        assert value("trainguard_gpu_xid_errors_total", {**nobody, "gpu": "0", "xid": "79"}) == 0, "pre-created"
        assert value("trainguard_gpu_ecc_uncorrected_volatile_total", gpu1) == 3
        assert value("trainguard_gpu_row_remap_failure", gpu1) == 1
        assert value("trainguard_gpu_row_remap_failure", {**gpu1, "gpu": "0"}) == 0
        assert value("trainguard_gpu_remapped_rows_uncorrectable_total", gpu1) == 2
        assert value("trainguard_gpu_nvlink_up", {**gpu1, "link": "0"}) == 1
        assert value("trainguard_gpu_nvlink_up", {**gpu1, "link": "1"}) == 0
        assert value("trainguard_gpu_nvlink_up", {**gpu1, "gpu": "0", "link": "0"}) is None
        assert value("trainguard_gpu_nvlink_errors_total", {**gpu1, "link": "0", "counter": "replay"}) == 7
        assert value("trainguard_nvml_up", {"cluster": "lab", "host": "gpu-017"}) == 1
    finally:
        col.stop()


def test_no_nvml_is_one_log_line_not_a_crash(registry: CollectorRegistry, caplog: pytest.LogCaptureFixture) -> None:
    def broken_init() -> None:
        raise FakeNVMLError("NVML Shared Library Not Found")

    nv = SimpleNamespace(NVMLError=FakeNVMLError, nvmlInit=broken_init)
    col = NvmlCollector("lab", "gpu-017", nv)
    registry.register(col)
    with caplog.at_level(logging.INFO, logger="trainguard.exporter"):
        assert col.start() is False
    assert [r.getMessage() for r in caplog.records if "NVML" in r.getMessage()] == [
        "NVML collector off: NVML unavailable (NVML Shared Library Not Found)"
    ]
    assert registry.get_sample_value("trainguard_nvml_up", {"cluster": "lab", "host": "gpu-017"}) == 0
    col.stop()


def test_nvml_not_installed(registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError, as without nvidia-ml-py
    col = NvmlCollector("lab", "gpu-017")
    registry.register(col)
    assert col.start() is False  # off, no exception
    assert registry.get_sample_value("trainguard_nvml_up", {"cluster": "lab", "host": "gpu-017"}) == 0
    col.stop()


def test_a_failing_collector_costs_its_metrics_only(registry: CollectorRegistry) -> None:
    errors: list[BaseException] = []

    class Broken:
        def collect(self) -> Iterator[Any]:
            raise RuntimeError("boom")

    registry.register(SafeCollector(Broken(), errors.append))
    generate_latest(registry)
    assert len(errors) == 1


def test_kernel_log_counts_under_the_node_identity(tmp_path: Path, registry: CollectorRegistry) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    exp = Exporter(_config(tmp_path, kernel_log=str(kern)), registry)
    exp.poll_once()
    xid = _labels("xid_79_fallen_off_bus", "infra_gpu")
    assert registry.get_sample_value("trainguard_log_pattern_matches_total", xid) == 0, "pre-created"
    with kern.open("a") as f:
        f.write(XID79.replace("[", "[rank3] ", 1))  # a kernel line never names a rank
    exp.poll_once()
    assert registry.get_sample_value("trainguard_log_pattern_matches_total", xid) == 1


def test_kernel_xid_counts_for_each_workload_live_on_the_node(tmp_path: Path, registry: CollectorRegistry) -> None:
    """An XID on a node hurts the workloads running there: the alert must name them, not only the node."""
    kern = tmp_path / "kern.log"
    kern.write_text("")
    exp = Exporter(_config(tmp_path, kernel_log=str(kern)), registry)
    _state(tmp_path, "0", None)  # this process plays rank 0 of workload 4242, attempt 2
    exp.poll_once()
    with kern.open("a") as f:
        f.write(XID79)
    exp.poll_once()
    node_level = _labels("xid_79_fallen_off_bus", "infra_gpu", workload="4242", scheduler="slurm", attempt="2")
    assert registry.get_sample_value("trainguard_log_pattern_matches_total", node_level) == 1
    assert registry.get_sample_value("trainguard_log_pattern_matches_total", _labels("xid_79_fallen_off_bus",
                                                                                     "infra_gpu")) is None  # fmt: skip


def _get(
    app: Any, accept: str = "", encoding: str = "", method: str = "GET", query: str = ""
) -> tuple[str, Any, bytes]:
    got: list[Any] = []
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/metrics",
        "QUERY_STRING": query,
        "HTTP_ACCEPT": accept,
        "HTTP_ACCEPT_ENCODING": encoding,
    }
    body = b"".join(app(environ, lambda status, headers: got.append((status, dict(headers)))))
    return got[0][0], got[0][1], body


def test_metrics_app_serves_what_prometheus_client_renders(tmp_path: Path, registry: CollectorRegistry) -> None:
    """The cached exposition is byte for byte prometheus_client's, in both formats, before and after a change."""
    import gzip  # noqa: PLC0415

    from prometheus_client.openmetrics.exposition import generate_latest as om_latest  # noqa: PLC0415

    from exporters.exposition import MetricsApp  # noqa: PLC0415

    exp = Exporter(_config(tmp_path, workload="7", scheduler="slurm"), registry)
    app = MetricsApp(exp.collectors, registry)
    log = tmp_path / "logs" / "a.log"
    log.write_text("")
    exp.poll_once()
    om = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"
    for _ in range(2):
        for accept, render in (("", generate_latest), (om, om_latest)):
            status, headers, body = _get(app, accept)
            assert status == "200 OK"
            assert body == render(registry), accept
            _, headers, zipped = _get(app, accept, "gzip")
            assert headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(zipped) == body
        with log.open("a") as f:
            f.write(XID79)  # the counters change: rendered again
        exp.poll_once()
    assert b'pattern="xid_79_fallen_off_bus",rank="",scheduler="slurm",workload="7"} 1.0\n' in body  # 0 in round one
    _, _, some = _get(app, query="name[]=trainguard_exporter_log_lines_total")  # as prometheus_client filters
    assert some == generate_latest(registry.restricted_registry(["trainguard_exporter_log_lines_total"]))
    assert _get(app, method="POST")[0].startswith("405")


def test_metrics_app_formats_a_collector_without_generation_again_only_when_its_samples_change() -> None:
    """A collector that does not count its changes is collected at every scrape; its text is reused while its
    samples are equal and formatted again (never stale) as soon as one differs; an equal body is not
    compressed again."""
    import gzip  # noqa: PLC0415

    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415
    from prometheus_client.exposition import CONTENT_TYPE_LATEST  # noqa: PLC0415

    from exporters.exposition import MetricsApp  # noqa: PLC0415

    class Gauge:
        value = 1.0

        def collect(self) -> Any:
            g = GaugeMetricFamily("demo_value", "A value.", labels=["k"])
            g.add_metric(["a"], self.value)
            yield g

    source = Gauge()
    registry = CollectorRegistry()
    registry.register(source)
    app = MetricsApp([source], registry)
    formatted: list[int] = []

    def encoder(reg: Any) -> bytes:
        formatted.append(1)
        return generate_latest(reg)

    first = app.render(encoder, CONTENT_TYPE_LATEST)
    assert app.render(encoder, CONTENT_TYPE_LATEST) == first == generate_latest(registry)
    assert len(formatted) == 1  # the second scrape reused the text
    source.value = 2.0
    second = app.render(encoder, CONTENT_TYPE_LATEST)
    assert b'demo_value{k="a"} 2.0' in second
    assert second == generate_latest(registry)
    assert len(formatted) == 2
    _, _, zipped = _get(app, "", "gzip")
    _, _, again = _get(app, "", "gzip")
    assert zipped == again
    assert gzip.decompress(again) == second
    source.value = 3.0
    _, _, changed = _get(app, "", "gzip")
    assert b'demo_value{k="a"} 3.0' in gzip.decompress(changed)

    class InPlace:
        """Keeps one metric and replaces its sample in place between scrapes."""

        def __init__(self) -> None:
            self.metric = GaugeMetricFamily("demo_kept", "A kept metric.", value=1.0)

        def collect(self) -> Any:
            yield self.metric

    kept = InPlace()
    app = MetricsApp([kept], CollectorRegistry())
    assert b"demo_kept 1.0" in app.render(generate_latest, CONTENT_TYPE_LATEST)
    kept.metric.samples[0] = kept.metric.samples[0]._replace(value=5.0)
    assert b"demo_kept 5.0" in app.render(generate_latest, CONTENT_TYPE_LATEST)


def test_metrics_server_keeps_the_connection_between_scrapes(tmp_path: Path, registry: CollectorRegistry) -> None:
    """Scrapes on one HTTP/1.1 connection are answered on it (as Prometheus scrapes); a request with a body,
    which the server does not read, ends the connection instead of being taken for the next request; an
    over-long request line gets 414."""
    import http.client  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from exporters.exposition import MetricsApp, serve_metrics  # noqa: PLC0415

    exp = Exporter(_config(tmp_path), registry)
    server, _thread = serve_metrics(MetricsApp(exp.collectors, registry), 0, "127.0.0.1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        bodies, sockets = [], []
        for _ in range(3):
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.version == 11
            bodies.append(resp.read())
            sockets.append(conn.sock)
        assert sockets[0] is not None
        assert sockets.count(sockets[0]) == 3  # never reconnected
        assert b"trainguard_exporter_log_lines_total" in bodies[-1]
        conn.request("POST", "/metrics", body=b"GET /metrics HTTP/1.1\r\n\r\n")
        resp = conn.getresponse()
        assert resp.status == 405
        resp.read()
        assert conn.sock is None or conn.sock.recv(1) == b""  # closed by the server: the body was not replayed
        conn.close()
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as raw:
            raw.sendall(b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
            assert raw.recv(64).startswith(b"HTTP/1.1 414")  # an over-long request line, answered as wsgiref does
    finally:
        server.shutdown()
        server.server_close()


def test_lines_in_open_files_are_read_between_polls(tmp_path: Path, registry: CollectorRegistry) -> None:
    """With a long poll interval, a line appended to a followed file is still counted within a second."""
    import time  # noqa: PLC0415

    log = tmp_path / "logs" / "a.log"
    exp = Exporter(_config(tmp_path, poll_interval=60.0), registry)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    exp.start(serve=False)
    try:
        wait_until(lambda: exp.source.files, 5, what="the first poll opened the file")
        time.sleep(0.3)
        with log.open("a") as f:
            f.write(XID79)
        labels = _labels("xid_79_fallen_off_bus", "infra_gpu")
        t0 = time.monotonic()
        wait_until(lambda: registry.get_sample_value("trainguard_log_pattern_matches_total", labels) == 1, 5)
        assert time.monotonic() - t0 < 2, "read by the quick check, not the next poll a minute later"
    finally:
        exp.stop()
