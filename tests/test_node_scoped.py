"""Node-scoped signals reach workloads (issue 14): a kernel-log XID read in the same poll that finds its
rank dead still counts for that rank's workload, so the alert carries cluster/workload labels and the
responder takes it as evidence, not `ignored: no cluster/workload labels`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from exporters.exporter import Exporter, ExporterConfig
from trainguard.lab.report import driving_signals

XID79 = "[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"
MATCHES = "trainguard_log_pattern_matches_total"


def _labels(**ident: str) -> dict[str, str]:
    base = {"cluster": "lab", "workload": "", "scheduler": "", "attempt": "", "rank": "", "host": "gpu-017"}
    return {**base, **ident, "pattern": "xid_79_fallen_off_bus", "category": "infra_gpu"}


def _setup(tmp_path: Path) -> tuple[Exporter, CollectorRegistry, Path]:
    (tmp_path / "progress").mkdir()
    kern = tmp_path / "kern.log"
    kern.write_text("")
    registry = CollectorRegistry()
    config = ExporterConfig(
        cluster="lab", host="gpu-017", kernel_log=str(kern), progress_dir=tmp_path / "progress", nvml=False
    )
    return Exporter(config, registry), registry, kern


def _rank_state(tmp_path: Path, pid: int, exited: bool = False) -> Path:
    identity = {"scheduler": "slurm", "workload": "4242", "attempt": "0", "rank": "1", "host": "gpu-017"}
    path = tmp_path / "progress" / "4242-a0-r1.json"
    path.write_text(json.dumps({"version": 1, "pid": pid, "identity": identity, "step": 20, "exited": exited}))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_an_xid_read_as_its_rank_dies_counts_for_the_workload(tmp_path: Path) -> None:
    exp, registry, kern = _setup(tmp_path)
    _rank_state(tmp_path, os.getpid())
    exp.poll_once()  # the rank trains
    workload = _labels(workload="4242", scheduler="slurm", attempt="0")
    assert registry.get_sample_value(MATCHES, workload) == 0
    # the GPU falls off the bus: the rank exits 1 (its atexit hook marks the state exited) and the
    # kernel logs the XID; the exporter sees both in one poll
    _rank_state(tmp_path, _dead_pid(), exited=True)
    with kern.open("a") as f:
        f.write(XID79)
    exp.poll_once()
    assert registry.get_sample_value(MATCHES, workload) == 1
    assert registry.get_sample_value(MATCHES, _labels()) is None, "never under the node alone"


def test_an_xid_long_after_the_rank_ended_counts_under_the_node_alone(tmp_path: Path) -> None:
    exp, registry, kern = _setup(tmp_path)
    state = _rank_state(tmp_path, _dead_pid(), exited=True)
    old = time.time() - 600  # ended ten minutes ago: well past kernel_linger_s (60 s)
    os.utime(state, (old, old))
    exp.poll_once()  # the kernel log is followed from its end, as `tail -F` does
    with kern.open("a") as f:
        f.write(XID79)
    exp.poll_once()
    assert registry.get_sample_value(MATCHES, _labels()) == 1
    assert registry.get_sample_value(MATCHES, _labels(workload="4242", scheduler="slurm", attempt="0")) is None


def test_the_demo_names_the_kernel_xid_first_among_the_signals_that_drove_it() -> None:
    def alert(name: str, host: str, category: str, pattern: str, rank: str) -> dict[str, object]:
        labels = {"alertname": name, "host": host, "category": category, "pattern": pattern, "rank": rank}
        return {"labels": labels}

    record = {
        "implicated_nodes": ["n2"],
        "evidence": [
            alert("TrainguardLogInfraGpu", "n2", "infra_gpu", "cuda_unspecified_launch_failure", "1"),
            alert("TrainguardLogInfraGpu", "n2", "infra_gpu", "xid_79_fallen_off_bus", ""),
            alert("TrainguardLogCollectiveTimeout", "n1", "collective_timeout", "nccl_watchdog_timeout", "0"),
        ],
    }
    assert driving_signals(record) == [
        "TrainguardLogInfraGpu xid_79_fallen_off_bus on n2 (kernel log, node level)",
        "TrainguardLogInfraGpu cuda_unspecified_launch_failure on n2 (rank 1's log)",
    ]
