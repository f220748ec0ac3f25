"""Real Prometheus and Alertmanager as subprocesses, plus the two ends of the pipeline around them.

Reusable by tests (``tests/test_pipeline*.py``) and benchmarks (``bench/detection.py``):

- :func:`start_prometheus` / :func:`start_alertmanager`: the Debian binaries on free loopback ports with
  temporary data directories, ``--web.external-url`` (no hostname leaks into alerts), Alertmanager
  without gossip (``--cluster.listen-address=``), Prometheus with a short ``--rules.alert.resend-delay``.
- :func:`prometheus_config` / :func:`alertmanager_config`: the profile examples of
  ``alert_rules/prometheus`` and ``alert_rules/alertmanager`` with targets, rule paths and the webhook
  rewritten for a local run, so a test runs what the docs ship.
- :class:`LabExporter`: a prometheus_client registry on a free port serving ``trainguard_*`` series
  (and DCGM's XID gauge) whose faults a test flips: log-pattern match, hang, crash, XID.
- :class:`WebhookReceiver`: a recording Starlette receiver for ``POST /v1/alerts`` that checks the
  bearer token and timestamps every notification on arrival.

Errors are :class:`StackError` with the failing process's log tail; nothing here imports pytest
behaviour.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from exporters.state import Identity
from trainguard.lab import common
from trainguard.lab.common import free_port, missing_message, stop_server, terminate

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "alert_rules"
PROFILES = ("fast", "production")
LOOPBACK = "127.0.0.1"
RESEND_DELAY = {"fast": "2s", "production": "30s"}
# The fast profile compacts Prometheus's head every few minutes so that finished jobs' series leave
# it; with the default (2 h blocks) they stay 2-3 h and every selector pays for them (docs/scale.md).
TSDB_FLAGS = {"fast": ("--storage.tsdb.min-block-duration=5m",), "production": ()}
IDENTITY = ("cluster", "workload", "scheduler", "attempt", "rank", "host")

T = TypeVar("T")


class StackError(RuntimeError):
    """A service of the stack failed to start, answer or stop in time."""


def find_binary(name: str) -> str:
    """The path of ``name``; ``StackError`` naming its package when it is not installed."""
    path = common.find_binary(name)
    if path is None:
        raise StackError(missing_message(name))
    return path


def poll(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``predicate`` until it returns something truthy; StackError naming ``what`` on timeout."""
    return common.poll(predicate, timeout, what, interval, error=StackError)


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url``; (status, body), or (0, b"") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def scraped_value(url: str, series: str) -> float:
    """The value of one series (its name and labels, as exposed) on ``url``'s /metrics; 0 when absent."""
    status, body = http_get(f"{url}/metrics")
    for line in body.decode().splitlines() if status == 200 else []:
        if line.startswith(f"{series} "):
            return float(line.split()[1])
    return 0.0


# --------------------------------------------------------------------------------------------------
# Processes


@dataclass
class Service:
    """One server subprocess: where it listens, where it logs, how to stop it."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path
    ready_path: str = "/-/ready"

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise StackError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            return http_get(f"{self.url}{self.ready_path}")[0] == 200

        try:
            poll(ready, timeout, f"{self.name} {self.ready_path} on {self.url}")
        except StackError as exc:
            raise StackError(f"{exc}\n{self.log_tail()}") from None

    def stop(self, timeout: float = 10.0) -> None:
        terminate(self.proc, timeout, timeout)


def _spawn(
    name: str,
    argv: list[str],
    workdir: Path,
    port: int,
    env: dict[str, str] | None = None,
    ready_path: str = "/-/ready",
) -> Service:
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env)
    return Service(name=name, proc=proc, port=port, workdir=workdir, log_path=log_path, ready_path=ready_path)


def trainguard_binary() -> str | None:
    """The ``trainguard`` CLI of this virtualenv (or on PATH), if installed."""
    candidate = Path(sys.executable).parent / "trainguard"
    return str(candidate) if os.access(candidate, os.X_OK) else shutil.which("trainguard")


def responder_available() -> bool:
    """Whether ``trainguard serve --host --port --db`` exists in this checkout's CLI."""
    binary = trainguard_binary()
    if binary is None:
        return False
    try:
        proc = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and all(flag in proc.stdout for flag in ("--host", "--port", "--db"))


def start_responder(workdir: Path, token: str, port: int | None = None) -> Service:
    """Start the real responder (``trainguard serve``, no config: monitor mode, SQLite audit store)."""
    binary = trainguard_binary()
    if binary is None:
        raise StackError("trainguard not installed: make install")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [binary, "serve", "--host", LOOPBACK, "--port", str(port), "--db", str(workdir / "trainguard.db")]
    env = {**os.environ, "TRAINGUARD_WEBHOOK_TOKEN": token}
    return _spawn("responder", argv, workdir, port, env=env, ready_path="/readyz")


def decisions(responder: Service, **params: str) -> list[dict[str, Any]]:
    """``GET /v1/decisions`` of the responder ([] on any error)."""
    status, body = http_get(f"{responder.url}/v1/decisions?{urllib.parse.urlencode(params)}")
    if status != 200:
        return []
    found: list[dict[str, Any]] = json.loads(body).get("decisions", [])
    return found


def _spawn_configured(
    name: str, binary: str, config: dict[str, Any], workdir: Path, port: int | None, flags: list[str]
) -> Service:
    """Write ``config`` as ``<name>.yml`` in ``workdir`` and start ``binary`` on it with ``flags``."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config_path = workdir / f"{name}.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [
        find_binary(binary),
        f"--config.file={config_path}",
        f"--web.listen-address={LOOPBACK}:{port}",
        f"--web.external-url=http://{LOOPBACK}:{port}/",
        *flags,
    ]
    return _spawn(name, argv, workdir, port)


def start_prometheus(
    config: dict[str, Any],
    workdir: Path,
    resend_delay: str = "2s",
    port: int | None = None,
    tsdb_flags: tuple[str, ...] = (),
) -> Service:
    """Start Prometheus with ``config`` (a parsed prometheus.yml) in ``workdir``; not yet waited for."""
    flags = [f"--storage.tsdb.path={workdir / 'data'}", f"--rules.alert.resend-delay={resend_delay}", *tsdb_flags]
    return _spawn_configured("prometheus", "prometheus", config, workdir, port, flags)


def start_alertmanager(config: dict[str, Any], workdir: Path, port: int | None = None) -> Service:
    """Start Alertmanager (no gossip) with ``config`` (a parsed alertmanager.yml); not yet waited for."""
    flags = [f"--storage.path={workdir / 'amdata'}", "--cluster.listen-address="]
    return _spawn_configured("alertmanager", "prometheus-alertmanager", config, workdir, port, flags)


def query(prometheus: Service, promql: str) -> list[dict[str, Any]]:
    """Instant query; the result vector ([] on any error)."""
    status, body = http_get(f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if status != 200:
        return []
    result: list[dict[str, Any]] = json.loads(body).get("data", {}).get("result", [])
    return result


def wait_first_scrape(prometheus: Service, job: str, timeout: float = 30.0) -> None:
    """Wait until ``job`` was scraped successfully and the notifier knows its Alertmanager.

    Alerts that fire before the notifier has discovered Alertmanager (about 5 s after start) are
    dropped until the next resend; inject faults only after this returns.
    """
    poll(lambda: query(prometheus, f'up{{job="{job}"}} == 1'), timeout, f"first scrape of job {job}")
    poll(lambda: _active_alertmanagers(prometheus), timeout, "Prometheus to discover its Alertmanager")


def _active_alertmanagers(prometheus: Service) -> list[Any]:
    status, body = http_get(f"{prometheus.url}/api/v1/alertmanagers")
    if status != 200:
        return []
    active: list[Any] = json.loads(body).get("data", {}).get("activeAlertmanagers", [])
    return active


# --------------------------------------------------------------------------------------------------
# Profile configs


def rule_files(profile: str) -> list[str]:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, not {profile!r}")
    return [*sorted(glob.glob(str(RULES_DIR / "*.yml"))), str(RULES_DIR / "profiles" / f"{profile}.yml")]


def prometheus_config(profile: str, scrape_configs: list[dict[str, Any]], alertmanager_port: int) -> dict[str, Any]:
    """The profile's example prometheus.yml, pointed at local targets, rules and Alertmanager."""
    config: dict[str, Any] = yaml.safe_load((RULES_DIR / "prometheus" / f"{profile}.yml").read_text())
    config["rule_files"] = rule_files(profile)
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"{LOOPBACK}:{alertmanager_port}"]}]}]}
    config["scrape_configs"] = scrape_configs
    return config


def scrape_interval_s(profile: str) -> float:
    """The profile's scrape interval in seconds (the examples write it as ``<n>s``)."""
    config = yaml.safe_load((RULES_DIR / "prometheus" / f"{profile}.yml").read_text())
    return float(str(config["global"]["scrape_interval"]).removesuffix("s"))


def exporter_scrape_config(port: int, host: str = "lab-node") -> dict[str, Any]:
    return {
        "job_name": "trainguard-exporter",
        "honor_labels": True,
        "static_configs": [{"targets": [f"{LOOPBACK}:{port}"], "labels": {"host": host}}],
    }


def alertmanager_config(profile: str, webhook_url: str, token_file: Path) -> dict[str, Any]:
    """The profile's example alertmanager.yml with every webhook sent to ``webhook_url``."""
    config: dict[str, Any] = yaml.safe_load((RULES_DIR / "alertmanager" / f"{profile}.yml").read_text())
    for receiver in config.get("receivers", []):
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
            hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    return config


# --------------------------------------------------------------------------------------------------
# The exporter end: trainguard_* series with faults to flip


@dataclass
class LabRank:
    identity: Identity
    step_duration: float = 0.5
    liveness: bool = False  # also export trainguard_rank_process_alive
    hung_at: float | None = None
    crashed_at: float | None = None
    started_at: float = field(default_factory=time.time)
    pattern_counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def labels(self) -> list[str]:
        return list(self.identity)


def xid_alert_labels(ident: dict[str, str], host: str) -> dict[str, str]:
    """The labels of ``TrainguardGpuXid`` for the lab exporter's XID 79 on GPU 0 of ``host``."""
    return {
        "alertname": "TrainguardGpuXid",
        **ident,
        "host": host,
        "Hostname": host,
        "gpu": "0",
        "UUID": f"GPU-{host}-0",
        "xid": "79",
        "pattern": "xid_79",
        "category": "infra_gpu",
        "severity": "critical",
    }


class LabExporter(Collector):
    """A stand-in for the node exporter: serves trainguard_* series from state a test flips.

    Counters of every pattern given to :meth:`add_rank` exist at 0 from the first scrape (as the
    real exporter pre-creates them). Fault methods return the Unix time of the flip.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks: dict[tuple[str, str, str], LabRank] = {}
        self._xid: dict[tuple[str, str], int] = {}
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.port = 0
        self._server: Any = None

    def add_rank(
        self,
        workload: str,
        rank: int | str,
        host: str,
        *,
        patterns: Iterable[tuple[str, str]] = (),
        cluster: str = "lab",
        scheduler: str = "slurm",
        attempt: str = "0",
        step_duration: float = 0.5,
        liveness: bool = False,
    ) -> tuple[str, str, str]:
        key = (workload, attempt, str(rank))
        with self._lock:
            self._ranks[key] = LabRank(
                Identity(cluster, workload, scheduler, attempt, str(rank), host), step_duration, liveness
            )
            self._ranks[key].pattern_counts = dict.fromkeys(patterns, 0)
        return key

    def add_gpu(self, host: str, gpu: int | str) -> None:
        with self._lock:
            self._xid[(host, str(gpu))] = 0

    def match_pattern(self, key: tuple[str, str, str], pattern: str, category: str) -> float:
        with self._lock:
            counts = self._ranks[key].pattern_counts
            counts[(pattern, category)] = counts.get((pattern, category), 0) + 1
            return time.time()

    def hang(self, key: tuple[str, str, str]) -> float:
        with self._lock:
            t = self._ranks[key].hung_at = time.time()
            return t

    def crash(self, key: tuple[str, str, str]) -> float:
        with self._lock:
            t = self._ranks[key].crashed_at = time.time()
            return t

    def xid(self, host: str, gpu: int | str, code: int) -> float:
        with self._lock:
            self._xid[(host, str(gpu))] = code
            return time.time()

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        names = list(IDENTITY)
        step = GaugeMetricFamily("trainguard_rank_step", "last completed step", labels=names)
        last = GaugeMetricFamily("trainguard_rank_last_step_timestamp_seconds", "last step time", labels=names)
        dur = GaugeMetricFamily("trainguard_rank_step_duration_seconds", "last step wall time", labels=names)
        sps = GaugeMetricFamily("trainguard_rank_samples_per_second", "throughput", labels=names)
        beat = GaugeMetricFamily("trainguard_rank_heartbeat_timestamp_seconds", "process seen", labels=names)
        alive = GaugeMetricFamily("trainguard_rank_process_alive", "process alive", labels=names)
        logs = CounterMetricFamily(
            "trainguard_log_pattern_matches_total", "pattern matches", labels=[*names, "pattern", "category"]
        )
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "last XID", labels=["Hostname", "gpu", "UUID"])
        with self._lock:
            for r in self._ranks.values():
                labels = r.labels()
                stopped = min(t for t in (r.hung_at, r.crashed_at, now) if t is not None)
                last.add_metric(labels, stopped)
                step.add_metric(labels, int((stopped - r.started_at) / r.step_duration))
                dur.add_metric(labels, r.step_duration)
                sps.add_metric(labels, 0.0 if stopped < now else 32 / r.step_duration)
                beat.add_metric(labels, r.crashed_at if r.crashed_at is not None else now)
                if r.liveness:
                    alive.add_metric(labels, 0.0 if r.crashed_at is not None else 1.0)
                for (pattern, category), n in r.pattern_counts.items():
                    logs.add_metric([*labels, pattern, category], n)
            for (host, gpu), code in self._xid.items():
                xid.add_metric([host, gpu, f"GPU-{host}-{gpu}"], code)
        yield from (step, last, dur, sps, beat, alive, logs, xid)

    def start(self, port: int | None = None) -> int:
        self.port = port or free_port()
        self._server, _ = start_http_server(self.port, addr=LOOPBACK, registry=self.registry)
        return self.port

    def stop(self) -> None:
        stop_server(self._server)
        self._server = None


# --------------------------------------------------------------------------------------------------
# The receiving end: a recording webhook


@dataclass(frozen=True)
class Received:
    """One alert of one webhook notification, as it arrived."""

    t_recv: float
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    fingerprint: str
    starts_at: str


class WebhookReceiver:
    """Alertmanager's webhook target (``POST /v1/alerts``, bearer token) that records every alert."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.port = 0
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self.rejected = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    async def _alerts(self, request: Request) -> JSONResponse:
        t_recv = time.time()
        if request.headers.get("authorization") != f"Bearer {self.token}":
            with self._lock:
                self.rejected += 1
            return JSONResponse({"error": "unauthorized", "detail": None}, status_code=401)
        payload = await request.json()
        batch = [
            Received(
                t_recv=t_recv,
                status=str(a["status"]),
                labels=dict(a["labels"]),
                annotations=dict(a.get("annotations", {})),
                fingerprint=str(a["fingerprint"]),
                starts_at=str(a["startsAt"]),
            )
            for a in payload.get("alerts", [])
        ]
        with self._lock:
            self._received.extend(batch)
        return JSONResponse({"stored": len(batch)})

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1/alerts"

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def first(self, status: str = "firing", **labels: str) -> Received | None:
        """The earliest received alert with ``status`` whose labels include ``labels``."""
        for alert in self.received():
            if alert.status == status and all(alert.labels.get(k) == v for k, v in labels.items()):
                return alert
        return None

    def start(self, port: int | None = None) -> None:
        self.port = port or free_port()
        app = Starlette(routes=[Route("/v1/alerts", self._alerts, methods=["POST"])])
        config = uvicorn.Config(app, host=LOOPBACK, port=self.port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="webhook-receiver", daemon=True)
        self._thread.start()
        server = self._server
        poll(lambda: server.started, 10.0, "webhook receiver to start")

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None


# --------------------------------------------------------------------------------------------------
# The whole path


@dataclass
class Stack:
    profile: str
    exporter: LabExporter
    receiver: WebhookReceiver
    prometheus: Service
    alertmanager: Service
    responder: Service | None = None

    def logs(self) -> str:
        services = [self.prometheus, self.alertmanager, *([self.responder] if self.responder else [])]
        return "\n".join(f"--- {s.name}\n{s.log_tail()}" for s in services)


@contextmanager
def pipeline(
    profile: str, workdir: Path, exporter: LabExporter, token: str | None = None, responder: bool = False
) -> Iterator[Stack]:
    """LabExporter -> real Prometheus (profile rules) -> real Alertmanager -> webhook.

    The webhook is the recording :class:`WebhookReceiver`, or with ``responder=True`` the real
    responder (``trainguard serve``; the recorder then stays idle). Ranks and GPUs must be added to
    ``exporter`` before entering, so that every counter has its 0 sample. Returns once the first
    scrape happened and Prometheus knows Alertmanager.
    """
    token = token or secrets.token_urlsafe(16)
    token_file = workdir / "webhook.token"
    workdir.mkdir(parents=True, exist_ok=True)
    token_file.write_text(token + "\n")
    receiver = WebhookReceiver(token)
    services: list[Service] = []
    exporter.start()
    try:
        receiver.start()
        webhook_url = receiver.url
        responder_service = None
        if responder:
            responder_service = start_responder(workdir / "responder", token)
            services.append(responder_service)
            responder_service.wait_ready()
            webhook_url = f"{responder_service.url}/v1/alerts"
        am = start_alertmanager(alertmanager_config(profile, webhook_url, token_file), workdir / "am")
        services.append(am)
        prom = start_prometheus(
            prometheus_config(profile, [exporter_scrape_config(exporter.port)], am.port),
            workdir / "prom",
            resend_delay=RESEND_DELAY[profile],
            tsdb_flags=TSDB_FLAGS[profile],
        )
        services.append(prom)
        am.wait_ready()
        prom.wait_ready()
        scrape_s = scrape_interval_s(profile)
        wait_first_scrape(prom, "trainguard-exporter", timeout=30 + 3 * scrape_s)
        time.sleep(scrape_s)  # one more scrape: every counter has a 0 sample before any fault
        yield Stack(profile, exporter, receiver, prom, am, responder_service)
    finally:
        for service in reversed(services):
            with suppress(Exception):
                service.stop()
        receiver.stop()
        exporter.stop()
