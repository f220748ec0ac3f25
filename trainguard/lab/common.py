"""What every harness part needs: a free loopback port, polling with a deadline, a service's binary."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from responder.schedulers.base import poll as verify_poll

T = TypeVar("T")

# The Debian package that brings each binary the harness runs.
PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "munged": "munge",
    "chromium": "chromium",
    "victoria-metrics": "victoria-metrics",
    "vmalert": "victoria-metrics",
    "pg_ctl": "postgresql",
    "initdb": "postgresql",
    "rg": "ripgrep",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_port_block(count: int) -> int:
    """A base port B such that B+1..B+count are free now on every address (slurmd n<i> listens on B+i)."""
    for base in range(23400, 40000, 97):
        try:
            for port in range(base + 1, base + count + 1):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("0.0.0.0", port))  # noqa: S104 - slurmd binds 0.0.0.0; test that
        except OSError:
            continue
        return base
    raise RuntimeError("no block of free ports")


# A job of the Slurm lab that beats a heartbeat file per node and attempt every ``{interval}`` seconds
# under ``{hb}/<job id>/<node>``: "<SLURM_RESTART_COUNT> <unix time>". Fill in with ``.format``.
HEARTBEAT_JOB = """#!/bin/bash
srun bash -c 'd={hb}/$SLURM_JOB_ID; mkdir -p $d
while :; do echo "${{SLURM_RESTART_COUNT:-0}} $(date +%s.%N)" > $d/$SLURMD_NODENAME.tmp
  mv $d/$SLURMD_NODENAME.tmp $d/$SLURMD_NODENAME; sleep {interval}; done'
"""


def heartbeats(hb: Path, job: str, attempt: int, since: float) -> set[str]:
    """Nodes whose ``HEARTBEAT_JOB`` task of ``attempt`` wrote a heartbeat under ``hb`` after ``since``."""
    found = set()
    for f in (hb / job).glob("n*"):
        if f.suffix:
            continue
        try:
            count, ts = f.read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            continue
        if int(count) == attempt and float(ts) > since:
            found.add(f.name)
    return found


def poll(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    error: type[Exception] = TimeoutError,
) -> T:
    """Call ``predicate`` until it returns something truthy; ``error`` naming ``what`` on timeout.

    The same loop as the adapters' verification (``responder.schedulers.base.poll``), raising instead.
    """
    confirmed, value = verify_poll(predicate, bool, timeout, interval, time.sleep)
    if not confirmed or value is None:
        raise error(f"timed out after {timeout}s waiting for {what}")
    return value


def find_binary(name: str) -> str | None:
    """The path of ``name`` on PATH or in /usr/bin, /usr/sbin; None when it is not installed."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.access(p, os.X_OK)), None
    )


def missing_message(name: str) -> str:
    """What to say when ``name`` is not installed: which package brings it."""
    return f"{name} not found: apt-get install {PACKAGES.get(name, name)}"


def terminate(proc: subprocess.Popen[bytes], timeout: float = 15.0, kill_timeout: float = 5.0) -> None:
    """SIGTERM ``proc`` if it still runs and wait ``timeout`` seconds; past that, SIGKILL and wait again."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=kill_timeout)


def stop_server(server: socketserver.BaseServer | None) -> None:
    """Stop a server whose ``serve_forever`` runs in a thread, and close its socket (None: not started)."""
    if server is not None:
        server.shutdown()
        server.server_close()


def bench_arguments(doc: str | None, quick: str, out: Path) -> argparse.ArgumentParser:
    """The arguments every benchmark takes: ``--quick`` (``quick`` says what it shortens) and ``--out``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--out", type=Path, default=out, help=f"the JSON results (default {out.name})")
    return parser
