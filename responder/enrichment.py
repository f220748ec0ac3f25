"""Optional enrichment from Prometheus: per-rank progress (to find a hang's laggard) and XIDs on the
workload's hosts in the incident window.

Enrichment only adds evidence. When Prometheus is slow or unreachable the decision is made from
the alerts alone, and the audit record says so; a decision never waits longer than the timeout.
Label values in queries are identities that already passed strict validation, so they cannot
break out of a PromQL string.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from responder.attribution import AttemptProgress, Context, RankProgress
from responder.model import Incident, StoredAlert

log = logging.getLogger(__name__)

_PROGRESS = (
    "trainguard_rank_step|trainguard_rank_last_step_timestamp_seconds|trainguard_rank_step_duration_seconds"
    "|trainguard_rank_process_stuck"
)


class PrometheusEnricher:
    def __init__(self, url: str, timeout_s: float, window_s: float = 300.0, history_s: float = 86400.0) -> None:
        self.url = url
        self.history_s = history_s
        self.timeout_s = timeout_s
        self.window_s = window_s
        # No retries: a decision must not wait through urllib3's backoff for a Prometheus that is down.
        self._session = requests.Session()
        self._prom = PrometheusConnect(
            url=url, disable_ssl=True, timeout=timeout_s, retry=Retry(total=0), session=self._session
        )

    def close(self) -> None:
        self._session.close()

    def _query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._prom.custom_query(
            promql, params={"timeout": f"{max(1, int(self.timeout_s * 1000))}ms"}
        )
        return result

    def context(self, incident: Incident, alerts: Sequence[StoredAlert]) -> Context:
        selector = f'cluster="{incident.cluster}",workload="{incident.workload}"'
        if incident.attempt:
            selector += f',attempt="{incident.attempt}"'
        try:
            rows = self._query(f'{{__name__=~"{_PROGRESS}",{selector}}}')
            progress = _progress(rows)
            hosts = {p.host for p in progress} | {a.labels["host"] for a in alerts if a.labels.get("host")}
            xids = self._xids(sorted(hosts)) if hosts else {}
            attempts = self._attempts(incident)
        except Exception as exc:  # noqa: BLE001 - any failure means "decide without Prometheus"
            log.warning("enrichment from %s failed: %s", self.url, exc)
            return Context(available=False, note=f"Prometheus unreachable ({type(exc).__name__}): decided from alerts")
        return Context(
            available=True,
            note="enriched from Prometheus",
            progress=tuple(progress),
            xid_hosts=xids,
            attempts=attempts,
        )

    def _attempts(self, incident: Incident) -> dict[int, AttemptProgress]:
        """Per attempt of the workload: newest checkpoint saved in it and the steps it ran."""
        selector = f'cluster="{incident.cluster}",workload="{incident.workload}"'
        lookback = f"{int(self.history_s)}s"
        series = {
            "checkpoint": f"max by (attempt) (max_over_time(trainguard_checkpoint_last_saved_step{{{selector}}}"
            f"[{lookback}]))",
            "first": f"min by (attempt) (min_over_time(trainguard_rank_step{{{selector}}}[{lookback}]))",
            "last": f"max by (attempt) (max_over_time(trainguard_rank_step{{{selector}}}[{lookback}]))",
        }
        values: dict[int, dict[str, float]] = {}
        for key, promql in series.items():
            for row in self._query(promql):
                attempt = row["metric"].get("attempt", "")
                if attempt.isdigit():
                    values.setdefault(int(attempt), {})[key] = float(row["value"][1])
        return {
            a: AttemptProgress(v.get("checkpoint"), v.get("first"), v.get("last")) for a, v in sorted(values.items())
        }

    def _xids(self, hosts: list[str]) -> dict[str, list[str]]:
        pattern = "|".join(re.escape(h) for h in hosts)
        window = f"{int(self.window_s)}s"
        found: dict[str, set[str]] = {}
        dcgm = self._query(f'changes(DCGM_FI_DEV_XID_ERRORS{{Hostname=~"{pattern}"}}[{window}]) > 0')
        for row in dcgm:
            host = row["metric"].get("Hostname", "")
            found.setdefault(host, set()).add("(DCGM)")
        nvml = self._query(f'increase(trainguard_gpu_xid_errors_total{{host=~"{pattern}"}}[{window}]) > 0')
        for row in nvml:
            found.setdefault(row["metric"].get("host", ""), set()).add(row["metric"].get("xid", "?"))
        return {h: sorted(codes) for h, codes in found.items() if h}


def _progress(rows: list[dict[str, Any]]) -> list[RankProgress]:
    by_rank: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        metric = row["metric"]
        key = (metric.get("rank", ""), metric.get("host", ""))
        by_rank.setdefault(key, {})[metric["__name__"]] = float(row["value"][1])
    out = []
    for (rank, host), values in by_rank.items():
        if not rank or not host or "trainguard_rank_step" not in values:
            continue
        out.append(
            RankProgress(
                rank=rank,
                host=host,
                step=values["trainguard_rank_step"],
                last_step_ts=values.get("trainguard_rank_last_step_timestamp_seconds", 0.0),
                step_duration=values.get("trainguard_rank_step_duration_seconds"),
                stuck=values.get("trainguard_rank_process_stuck") == 1.0,
            )
        )
    return out
