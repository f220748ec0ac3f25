"""`trainguard exporter` as a user runs it: a real process, real files, /metrics over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporters import progress
from exporters.cli import UsageError, build_config, resolve_options
from tests.services import free_port, wait_until
from trainguard.cli import build_parser, main
from trainguard.lab.common import terminate

ROOT = Path(__file__).resolve().parents[1]
XID79 = "[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


class Running:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}/metrics"

    def metrics(self) -> str:
        try:
            r = httpx.get(self.url, timeout=2)
        except httpx.TransportError:
            return ""
        return r.text if r.status_code == 200 else ""

    def value(self, name: str, **labels: str) -> float | None:
        return _samples(self.metrics()).get((name, frozenset(labels.items())))


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Running]:
    port = free_port()
    (tmp_path / "logs").mkdir()
    (tmp_path / "progress").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TRAINGUARD_", "JOBSET", "PYTORCHJOB"))}
    argv = [
        sys.executable, "-m", "trainguard.cli", "exporter",
        "--cluster", "lab", "--node", "gpu-017", "--port", str(port),
        "--log", str(tmp_path / "logs" / "*.log"),
        "--progress-dir", str(tmp_path / "progress"),
        "--poll-interval", "0.1",
        "--workload", "4242", "--scheduler", "slurm",
        "--no-nvml",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    running = Running(proc, port)
    try:
        wait_until(lambda: running.metrics() or proc.poll() is not None, 20, what="the exporter to serve /metrics")
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        yield running
    finally:
        terminate(proc)
        if proc.stdout:
            proc.stdout.close()


def test_exporter_follows_logs_across_rotation_and_serves_metrics(tmp_path: Path, exporter: Running) -> None:
    base = {"cluster": "lab", "workload": "4242", "scheduler": "slurm", "attempt": "0", "host": "gpu-017"}
    xid = {**base, "rank": "", "pattern": "xid_79_fallen_off_bus", "category": "infra_gpu"}
    log = tmp_path / "logs" / "train.log"
    # a file that appears after start is read from its beginning
    log.write_text("ok\nRuntimeError: CUDA error: unspecified launch failure\n")
    launch = {**base, "rank": "", "pattern": "cuda_launch_failure", "category": "infra_gpu"}
    wait_until(lambda: exporter.value("trainguard_log_pattern_matches_total", **launch) == 1, 20, what="first match")
    assert exporter.value("trainguard_log_pattern_matches_total", **xid) == 0, "pre-created at 0"
    # rotation: rename, the writer finishes the old file, a new file takes the name
    log.rename(tmp_path / "logs" / "train.log.1")
    with (tmp_path / "logs" / "train.log.1").open("a") as f:
        f.write(XID79)
    log.write_text(XID79 + XID79)
    wait_until(lambda: exporter.value("trainguard_log_pattern_matches_total", **xid) == 3, 20, what="rotated lines")
    assert exporter.value("trainguard_exporter_log_files_followed") is not None
    # the progress hook's state file shows up at the next scrape
    r = progress.Reporter(
        str(tmp_path / "progress"),
        identity={"scheduler": "slurm", "workload": "4242", "attempt": "0", "rank": "2", "host": "gpu-017"},
    )
    r.step(41, samples=8)
    r.checkpoint_saved(40)
    rank2 = {**base, "rank": "2"}
    wait_until(lambda: exporter.value("trainguard_rank_step", **rank2) == 41, 20, what="the rank's step")
    assert exporter.value("trainguard_checkpoint_last_saved_step", **rank2) == 40
    assert exporter.value("trainguard_rank_process_alive", **rank2) == 1
    text = exporter.metrics()
    assert "_created" not in text
    assert exporter.value("trainguard_exporter_log_lines_total") == 5
    assert exporter.value("trainguard_exporter_log_rotations_total") == 1


def test_help_is_written_for_a_newcomer(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["exporter", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--cluster", "--log", "--kernel-log", "--progress-dir", "--alertmanager-url", "--port", "--catalog"):
        assert option in out
    assert "Example" in out
    with pytest.raises(SystemExit):
        main(["patterns", "scan", "--help"])
    assert "FILE|-" in capsys.readouterr().out


def _opts(argv: list[str], environ: dict[str, str]) -> dict[str, object]:
    return resolve_options(build_parser().parse_args(["exporter", *argv]), environ)


def test_options_resolve_command_line_over_environment_over_file(tmp_path: Path) -> None:
    cfg = tmp_path / "exporter.yaml"
    cfg.write_text("exporter:\n  cluster: from-file\n  port: 9999\n  log: ['/a/*.log']\n  poll-interval: 2\n")
    opts = _opts(["--config", str(cfg), "--port", "9000"], {"TRAINGUARD_CLUSTER": "from-env"})
    assert (opts["cluster"], opts["port"], opts["log"], opts["poll_interval"]) == ("from-env", 9000, ["/a/*.log"], 2)
    config = build_config(opts, {"SLURMD_NODENAME": "gpu-9", "SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "3"})
    assert (config.host, config.workload, config.scheduler, config.attempt) == ("gpu-9", "77", "slurm", "3")
    assert config.listen == "127.0.0.1"


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "--cluster"),
        (["--cluster", "bad name"], {}, "cluster"),
        (["--cluster", "lab", "--workload", "42;x", "--scheduler", "slurm"], {}, "workload"),
        (["--cluster", "lab", "--progress-pattern", "step (\\d+)"], {}, "step"),
        (["--cluster", "lab"], {"TRAINGUARD_EXPORTER_PORT": "http"}, "TRAINGUARD_EXPORTER_PORT"),
    ],
)
def test_bad_configuration_names_the_key(argv: list[str], environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_config(_opts(argv, environ), environ)


def test_bad_configuration_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_CLUSTER", raising=False)
    assert main(["exporter"]) == 2
    assert "--cluster" in capsys.readouterr().err
