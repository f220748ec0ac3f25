"""The engines a fleet is measured through: real Prometheus, or VictoriaMetrics with vmalert.

Both load the same rule files (``trainguard.lab.stack.rule_files``) and the profile's scrape and
evaluation interval, scrape the simulator's ``file_sd`` list, and notify the same real Alertmanager.
:class:`Engine` hides which one runs: a query URL, the processes to meter (CPU, RSS), and the
engine's own counters read from its ``/metrics`` text (samples ingested, rule evaluation time,
scrape time), so the report compares like with like.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainguard.lab.common import free_port
from trainguard.lab.stack import (
    RESEND_DELAY,
    TSDB_FLAGS,
    Service,
    _spawn,
    find_binary,
    http_get,
    prometheus_config,
    rule_files,
    scrape_interval_s,
    start_prometheus,
)

ENGINES = ("prometheus", "victoriametrics")
# Engine.counters: each figure, and the counter it sums on each engine (in the order of ENGINES).
COUNTERS = {
    "samples": ("prometheus_tsdb_head_samples_appended_total", "vm_rows_added_to_storage_total"),
    "rule_s": ("prometheus_rule_group_duration_seconds_sum", "vmalert_iteration_duration_seconds_sum"),
    "rule_n": ("prometheus_rule_group_duration_seconds_count", "vmalert_iteration_duration_seconds_count"),
    "scrape_s": ("prometheus_target_interval_length_seconds_sum", "vm_promscrape_scrape_duration_seconds_sum"),
    "scrape_n": ("prometheus_target_interval_length_seconds_count", "vm_promscrape_scrape_duration_seconds_count"),
}
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape_configs(sd_file: Path, refresh: bool = True) -> list[dict[str, Any]]:
    """The fleet's scrape job; VictoriaMetrics has no per-file refresh_interval (a flag instead)."""
    sd: dict[str, Any] = {"files": [str(sd_file)]}
    if refresh:
        sd["refresh_interval"] = "5s"
    return [{"job_name": "trainguard-exporter", "honor_labels": True, "file_sd_configs": [sd]}]


def metric_sum(text: str, name: str, contains: str = "") -> float:
    """The sum of every sample of ``name`` (label set containing ``contains``) in an exposition."""
    total = 0.0
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match.group(1) == name and contains in (match.group(2) or ""):
            total += float(match.group(3))
    return total


@dataclass
class Engine:
    """One running engine: ``query`` answers PromQL/MetricsQL, ``processes`` are metered."""

    name: str
    profile: str
    query: Service
    processes: list[Service]

    def counters(self) -> dict[str, float]:
        """Cumulative figures: samples ingested, rule evaluation seconds and count, scrape seconds and count."""
        texts = [http_get(f"{p.url}/metrics", timeout=10)[1].decode() for p in self.processes]
        column = ENGINES.index(self.name)
        # each metric is exposed by one of the engine's processes (vmalert's by vmalert): sum over them all
        return {figure: sum(metric_sum(t, names[column]) for t in texts) for figure, names in COUNTERS.items()}

    def groups(self) -> int:
        """Rule groups evaluated per interval (rule time is summed over them)."""
        return sum(len(yaml.safe_load(Path(f).read_text())["groups"]) for f in rule_files(self.profile))

    def meter(self) -> tuple[float, int]:
        """(CPU seconds so far, RSS KiB now), summed over the engine's processes."""
        cpu, rss = 0.0, 0
        for service in self.processes:
            stat = Path(f"/proc/{service.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
            for line in Path(f"/proc/{service.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
        return cpu, rss


def start_engine(name: str, profile: str, sd_file: Path, am_port: int, work: Path) -> Engine:
    """Start ``name`` on the fleet's targets; not yet waited for."""
    if name == "prometheus":
        config = prometheus_config(profile, scrape_configs(sd_file), am_port)
        prom = start_prometheus(config, work / "prom", RESEND_DELAY[profile], tsdb_flags=TSDB_FLAGS[profile])
        return Engine(name, profile, prom, [prom])
    if name != "victoriametrics":
        raise ValueError(f"engine must be one of {ENGINES}, not {name!r}")
    return _start_victoriametrics(profile, sd_file, am_port, work)


def _start_victoriametrics(profile: str, sd_file: Path, am_port: int, work: Path) -> Engine:
    """victoria-metrics scrapes (its promscrape, the same file_sd) and stores; vmalert evaluates.

    ``-search.latencyOffset=1s``: VictoriaMetrics hides the newest 30 s of samples from queries by
    default, which would add 30 s to every detection in both profiles.
    """
    interval = f"{scrape_interval_s(profile):g}s"
    vm_dir, alert_dir = work / "vm", work / "vmalert"
    vm_dir.mkdir(parents=True, exist_ok=True)
    alert_dir.mkdir(parents=True, exist_ok=True)
    scrape = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": scrape_configs(sd_file, refresh=False),
    }
    (vm_dir / "scrape.yml").write_text(yaml.safe_dump(scrape, sort_keys=False))
    vm_port, alert_port = free_port(), free_port()
    vm = _spawn(
        "victoria-metrics",
        [
            find_binary("victoria-metrics"),
            f"-storageDataPath={vm_dir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{vm_port}",
            f"-promscrape.config={vm_dir / 'scrape.yml'}",
            "-search.latencyOffset=1s",
            "-promscrape.fileSDCheckInterval=5s",
        ],
        vm_dir,
        vm_port,
        ready_path="/health",
    )
    argv = [
        find_binary("vmalert"),
        *(f"-rule={f}" for f in rule_files(profile)),
        f"-datasource.url=http://127.0.0.1:{vm_port}",
        f"-remoteWrite.url=http://127.0.0.1:{vm_port}",
        f"-notifier.url=http://127.0.0.1:{am_port}",
        f"-evaluationInterval={interval}",
        f"-rule.resendDelay={RESEND_DELAY[profile]}",
        f"-httpListenAddr=127.0.0.1:{alert_port}",
        f"-external.url=http://127.0.0.1:{alert_port}",
    ]
    vmalert = _spawn("vmalert", argv, alert_dir, alert_port, ready_path="/health")
    return Engine("victoriametrics", profile, vm, [vm, vmalert])
