"""A fleet simulator: N synthetic GPU nodes (8 ranks, 8 GPUs each) as N scrape targets of one process.

A benchmark harness, not product code. Every node is served at ``/node/<i>/metrics`` on one port;
:meth:`Fleet.file_sd` writes the Prometheus ``file_sd`` target list (``__metrics_path__`` per node,
``instance`` and ``host`` set to the node's name). Each node's exposition is precomputed text with
``@T@`` (now) and ``@S@`` (the current step) placeholders, rebuilt only when the node's state
changes (a job starts or ends, a fault is injected), so a scrape costs one ``str.replace``.

Series are the exporter's real names and labels (``trainguard_rank_*``, the pre-created log
pattern counters, ``DCGM_FI_DEV_XID_ERRORS`` with Hostname/gpu/UUID). Jobs span whole nodes and
every new job has a new workload id, so starting and ending jobs churns series as a real fleet does.
Faults: XID, log pattern, hang, crash, straggler, node loss (the target answers 503: ``up`` = 0).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from trainguard.lab.common import stop_server

RANKS_PER_NODE = 8
PATTERN = ("nccl_watchdog_timeout", "collective_timeout")
STEP_S = 0.5
_PATH = re.compile(r"^/node/(\d+)/metrics$")


def host_name(i: int) -> str:
    return f"node-{i:05d}"


@dataclass
class Job:
    """One training job on whole nodes; rank r runs on node ``nodes[r // 8]``."""

    workload: str
    nodes: list[int]
    started_at: float
    attempt: str = "0"
    hung: dict[int, float] = field(default_factory=dict)  # rank -> frozen last-step time
    crashed: dict[int, float] = field(default_factory=dict)  # rank -> frozen heartbeat
    straggler: dict[int, float] = field(default_factory=dict)  # rank -> step duration
    log_matches: dict[int, int] = field(default_factory=dict)  # rank -> pattern count


@dataclass
class Node:
    index: int
    job: Job | None = None
    xid: dict[int, int] = field(default_factory=dict)  # gpu -> last XID code
    lost: bool = False
    text: str = ""


class _QuietServer(ThreadingHTTPServer):
    """A scraper that gives up (scrape timeout) resets its connection: counted, not printed."""

    daemon_threads = True
    aborted = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        type(self).aborted += 1


class Fleet:
    """The fleet's state and its HTTP server; every mutator returns the Unix time of the change."""

    def __init__(self, nodes: int, cluster: str = "sim") -> None:
        self.cluster = cluster
        self.nodes = [Node(i) for i in range(nodes)]
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self.scrapes = 0
        for node in self.nodes:
            self._render(node)

    # ---------------------------------------------------------------------------------------------
    # Jobs and faults

    def start_job(self, workload: str, nodes: list[int]) -> float:
        with self._lock:
            now = time.time()
            job = Job(workload, nodes, now)
            self.jobs[workload] = job
            for i in nodes:
                self.nodes[i].job = job
                self.nodes[i].xid.clear()
                self._render(self.nodes[i])
            return now

    def end_job(self, workload: str) -> float:
        """The job's series vanish from its nodes' expositions (Prometheus marks them stale)."""
        with self._lock:
            job = self.jobs.pop(workload)
            for i in job.nodes:
                if self.nodes[i].job is job:
                    self.nodes[i].job = None
                    self._render(self.nodes[i])
            return time.time()

    def _mutate_rank(self, workload: str, rank: int, kind: str) -> float:
        with self._lock:
            job = self.jobs[workload]
            now = time.time()
            if kind == "hang":
                job.hung[rank] = now
            elif kind == "crash":
                job.crashed[rank] = now
            elif kind == "straggler":
                job.straggler[rank] = STEP_S * 4
            elif kind == "log":
                job.log_matches[rank] = job.log_matches.get(rank, 0) + 1
            self._render(self.nodes[job.nodes[rank // RANKS_PER_NODE]])
            return now

    def hang(self, workload: str, rank: int) -> float:
        return self._mutate_rank(workload, rank, "hang")

    def crash(self, workload: str, rank: int) -> float:
        return self._mutate_rank(workload, rank, "crash")

    def straggle(self, workload: str, rank: int) -> float:
        return self._mutate_rank(workload, rank, "straggler")

    def log_pattern(self, workload: str, rank: int) -> float:
        return self._mutate_rank(workload, rank, "log")

    def xid(self, node: int, gpu: int, code: int = 79) -> float:
        with self._lock:
            self.nodes[node].xid[gpu] = code
            self._render(self.nodes[node])
            return time.time()

    def lose_node(self, node: int, lost: bool = True) -> float:
        with self._lock:
            self.nodes[node].lost = lost
            return time.time()

    # ---------------------------------------------------------------------------------------------
    # Exposition

    def _render(self, node: Node) -> None:
        """Precompute ``node``'s exposition; ``@T@`` and ``@S@`` are filled in per scrape."""
        host = host_name(node.index)
        lines: list[str] = []
        job = node.job
        if job is not None:
            first = job.nodes.index(node.index) * RANKS_PER_NODE
            for rank in range(first, first + RANKS_PER_NODE):
                lines.extend(self._rank_lines(job, rank, host))
        lines.append("# TYPE DCGM_FI_DEV_XID_ERRORS gauge")
        for gpu in range(RANKS_PER_NODE):
            labels = f'Hostname="{host}",gpu="{gpu}",UUID="GPU-{host}-{gpu}"'
            lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {node.xid.get(gpu, 0)}")
        node.text = "\n".join(lines) + "\n"

    def _rank_lines(self, job: Job, rank: int, host: str) -> list[str]:
        ident = (
            f'cluster="{self.cluster}",workload="{job.workload}",scheduler="slurm",'
            f'attempt="{job.attempt}",rank="{rank}",host="{host}"'
        )
        step_s = job.straggler.get(rank, STEP_S)
        frozen = job.hung.get(rank, job.crashed.get(rank))
        last = "@T@" if frozen is None else f"{frozen:.3f}"
        step = "@S@" if frozen is None else str(int((frozen - job.started_at) / STEP_S))
        beat = f"{job.crashed[rank]:.3f}" if rank in job.crashed else "@T@"
        sps = 0.0 if frozen is not None else 32 / step_s
        return [
            f"trainguard_rank_step{{{ident}}} {step}",
            f"trainguard_rank_last_step_timestamp_seconds{{{ident}}} {last}",
            f"trainguard_rank_step_duration_seconds{{{ident}}} {step_s}",
            f"trainguard_rank_samples_per_second{{{ident}}} {sps}",
            f"trainguard_rank_heartbeat_timestamp_seconds{{{ident}}} {beat}",
            f"trainguard_rank_process_alive{{{ident}}} {0 if rank in job.crashed else 1}",
            f'trainguard_log_pattern_matches_total{{{ident},pattern="{PATTERN[0]}",category="{PATTERN[1]}"}} '
            f"{job.log_matches.get(rank, 0)}",
        ]

    def exposition(self, index: int) -> bytes | None:
        """The node's scrape body, or None while the node is lost."""
        node = self.nodes[index]
        if node.lost:
            return None
        now = time.time()
        text = node.text
        if node.job is not None:
            text = text.replace("@S@", str(int((now - node.job.started_at) / STEP_S)))
        self.scrapes += 1
        return text.replace("@T@", f"{now:.3f}").encode()

    def series(self) -> int:
        """Series the fleet serves now (rank series, log counters and XID gauges)."""
        per_rank = 7
        busy = sum(1 for n in self.nodes if n.job is not None)
        return busy * RANKS_PER_NODE * per_rank + len(self.nodes) * RANKS_PER_NODE

    # ---------------------------------------------------------------------------------------------
    # Serving

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                match = _PATH.match(self.path.split("?", 1)[0])
                body = (
                    fleet.exposition(int(match.group(1))) if match and int(match.group(1)) < len(fleet.nodes) else None
                )
                if body is None:
                    self.send_response(503 if match else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = _QuietServer((host, port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.port

    def stop(self) -> None:
        stop_server(self._server)
        self._server = None

    def file_sd(self, path: Path, host: str = "127.0.0.1") -> Path:
        """Write the Prometheus file_sd list: one target per node, ``instance`` and ``host`` its name."""
        groups = [
            {
                "targets": [f"{host}:{self.port}"],
                "labels": {
                    "__metrics_path__": f"/node/{n.index}/metrics",
                    "instance": host_name(n.index),
                    "host": host_name(n.index),
                    "cluster": self.cluster,
                },
            }
            for n in self.nodes
        ]
        path.write_text(yaml.safe_dump(groups, sort_keys=False))
        return path
