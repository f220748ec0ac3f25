"""trainguard's Grafana dashboards, generated from Python into committed JSON.

    python -m dashboards.generate           # write dashboards/json/*.json
    python -m dashboards.generate --check   # exit 1 if a committed file differs from what this makes

Three dashboards (see docs/dashboards.md): Fleet (the responder and every workload at a glance),
Workload (one job's ranks, logs, checkpoints, GPUs and the decisions about it) and Decisions (the
audit stream from Loki with its evidence). Metric names follow docs/interfaces.md §2 (exporter), DCGM's
``DCGM_FI_DEV_*`` series, ``responder/metrics.py`` and ``responder/loki.py``; the Loki stream labels
and structured metadata keys come from ``responder/loki.py`` so the queries match what is pushed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards.grafana import (
    LOKI,
    LOKI_UID,
    PROMETHEUS_UID,
    Json,
    Row,
    bargauge,
    dashboard,
    datasource_variable,
    heatmap,
    logs,
    loki,
    prom,
    query_variable,
    stat,
    table,
    textbox_variable,
    timeseries,
)

OUT_DIR = Path(__file__).resolve().parent / "json"
CLUSTER = 'cluster=~"$cluster"'
WL = 'cluster=~"$cluster", workload=~"$workload"'
AUDIT = '{app="trainguard", kind="audit", cluster=~"$cluster"}'
AUDIT_FILTERED = '{app="trainguard", kind="audit", cluster=~"$cluster", action=~"$action", mode=~"$mode"}'
# hosts of the selected workloads, renamed to DCGM's Hostname label for joins
STEP_5M = f"avg_over_time(trainguard_rank_step_duration_seconds{{{WL}}}[5m])"
WORKLOAD_HOSTS = f'label_replace(max by (host) (trainguard_rank_step{{{WL}}}), "Hostname", "$1", "host", "(.+)")'

OK = [{"color": "green", "value": None}]
BREAKER_MAP = [{"type": "value", "options": {"0": {"text": "closed", "color": "green"},
                                             "1": {"text": "OPEN", "color": "red"}}}]  # fmt: skip
MODE_MAP = [{"type": "value", "options": {"0": {"text": "monitor", "color": "blue"},
                                          "1": {"text": "act", "color": "orange"}}}]  # fmt: skip


def _variables(*extra: Json) -> list[Json]:
    return [
        datasource_variable("datasource", "prometheus", PROMETHEUS_UID, "Prometheus"),
        datasource_variable("loki", "loki", LOKI_UID, "Loki"),
        *extra,
    ]


def _cluster_var() -> Json:
    return query_variable("cluster", "Cluster", "label_values(trainguard_rank_step, cluster)")


def _latency(name: str, title: str, what: str) -> Json:
    metric = f"trainguard_responder_{name}_latency_seconds_bucket"
    return timeseries(
        title,
        [
            prom(f"histogram_quantile({q}, sum by (le) (rate({metric}[$__rate_interval])))", f"p{int(q * 100)}")
            for q in (0.5, 0.95, 0.99)
        ],
        what,
        unit="s",
        w=8,
    )


def _in_range(title: str, metric: str, by: str, selector: str, legend: str, what: str, w: int) -> Json:
    """A bar gauge of ``metric``'s increase over the time range, summed ``by`` its labels."""
    query = f"sum by ({by}) (increase({metric}{{{selector}}}[$__range]))"
    return bargauge(title, [prom(query, legend, instant=True)], what, w=w)


def fleet() -> Json:
    overview = Row("Overview", [
        stat("Workloads watched", [prom(
            f"count(count by (cluster, workload) (trainguard_rank_heartbeat_timestamp_seconds{{{CLUSTER}}}))")],
            "Workloads with at least one rank reporting to a trainguard exporter."),
        stat("Ranks reporting", [prom(f"count(trainguard_rank_step{{{CLUSTER}}})")],
             "Ranks whose step counter the exporters serve now."),
        stat("Incidents", [prom(f"sum(increase(trainguard_responder_incidents_total{{{CLUSTER}}}[$__range]))")],
             "Incidents the responder opened in the time range."),
        stat("Decisions", [prom(f"sum(increase(trainguard_responder_decisions_total{{{CLUSTER}}}[$__range]))")],
             "Audit records written in the time range (decisions, refusals, outcome updates)."),
        stat("Open incidents", [prom("trainguard_responder_open_incidents")],
             "Incidents waiting for their correlation window to close.",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 5}]),
        stat("Loki mirror dropped", [prom(
            "sum(increase(trainguard_responder_loki_dropped_total[$__range])) or vector(0)")],
            "Audit records the Loki mirror could not keep (spool full, queue full, rejected); "
            "they are still in the responder's audit store.",
            thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
    ])  # fmt: skip
    safety = Row("Mode and circuit breaker", [
        stat("Mode", [prom(f"max by (cluster) (trainguard_responder_mode_act{{{CLUSTER}}})", "{{cluster}}")],
             "Each cluster's mode: monitor (plans only) or act (calls the scheduler).", w=12, mappings=MODE_MAP),
        stat("Circuit breaker", [prom(f"max by (cluster) (trainguard_responder_breaker_open{{{CLUSTER}}})",
                                      "{{cluster}}")],
             "Open after correlated failures across workloads: every decision is refused until the cooldown ends.",
             w=12, mappings=BREAKER_MAP),
    ])  # fmt: skip
    decisions = Row("Decisions", [
        timeseries("Decisions by action and mode", [prom(
            f"sum by (action, mode) (increase(trainguard_responder_decisions_total{{{CLUSTER}}}[$__rate_interval]))",
            "{{action}} ({{mode}})")],
            "Audit records per action and mode. Monitor-mode records are recommendations; act-mode ones were "
            "carried out.", stacked=True, bars=True),
        _in_range("Decisions by outcome", "trainguard_responder_decisions_total", "outcome", CLUSTER, "{{outcome}}",
                  "planned (monitor), done, failed, skipped (breaker or no action), pending (in flight).", w=6),
        _in_range("Incidents by cluster", "trainguard_responder_incidents_total", "cluster", CLUSTER, "{{cluster}}",
                  "Incidents opened in the time range.", w=6),
        timeseries("Alerts received", [prom(
            "sum by (outcome) (rate(trainguard_responder_alerts_received_total[$__rate_interval]))", "{{outcome}}")],
            "Alertmanager alerts by outcome: new evidence, duplicate, rejected (bad labels), ignored, resolved.",
            unit="reqps"),
        timeseries("Webhook notifications", [prom(
            "sum by (result) (rate(trainguard_responder_notifications_total[$__rate_interval]))", "{{result}}")],
            "Notifications by result; store_error answers 5xx, so Alertmanager resends.", unit="reqps"),
    ])  # fmt: skip
    latency = Row("Latency", [
        _latency("detection", "Detection latency", "Alert startsAt to notification received (rule for: + "
                 "Alertmanager group_wait)."),
        _latency("decision", "Decision latency", "First alert of an incident received to decision recorded "
                 "(includes the correlation window)."),
        _latency("action", "Action latency", "Decision recorded to scheduler action verified (act mode)."),
    ])  # fmt: skip
    review = Row("Review and the Loki mirror", [
        bargauge("Review precision per pattern", [prom("trainguard_responder_review_precision", "{{pattern}}",
                                                       instant=True)],
                 "Share of reviewed decisions judged correct, per detection pattern.", unit="percentunit",
                 maximum=1, thresholds=[{"color": "red", "value": None}, {"color": "orange", "value": 0.8},
                                        {"color": "green", "value": 0.95}]),
        bargauge("Reviewed decisions per pattern", [prom("trainguard_responder_reviewed_decisions", "{{pattern}}",
                                                         instant=True)],
                 "How many decisions the precision rests on."),
        timeseries("Loki mirror", [
            prom("sum(rate(trainguard_responder_loki_pushed_total[$__rate_interval]))", "pushed"),
            prom("sum(rate(trainguard_responder_loki_spooled_total[$__rate_interval]))", "spooled"),
            prom("sum by (reason) (rate(trainguard_responder_loki_dropped_total[$__rate_interval]))",
                 "dropped {{reason}}"),
            prom("sum by (reason) (rate(trainguard_responder_loki_push_failures_total[$__rate_interval]))",
                 "failed {{reason}}"),
            prom("sum(trainguard_responder_loki_queue_depth)", "queue depth"),
            prom("sum(trainguard_responder_loki_spool_files)", "spooled batches"),
        ], "Audit records mirrored to Loki: pushed, spooled during an outage, dropped past the spool bound.", w=8),
    ])  # fmt: skip
    nodes = Row("Nodes and goodput", [
        bargauge("Node suspicion (top 10)", [prom(
            f"topk(10, max by (cluster, node) (trainguard_node_suspicion{{{CLUSTER}}}))", "{{node}} ({{cluster}})",
            instant=True)],
            "Probability that the node is bad: a prior, each implication's likelihood ratio, clean runs, fading "
            "with time (docs/decisions.md).", unit="percentunit", maximum=1, w=12,
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.2},
                        {"color": "red", "value": 0.5}]),
        bargauge("Goodput lost by cause", [prom(
            f"sum by (cause) (increase(trainguard_responder_goodput_lost_seconds_total{{{CLUSTER}}}[$__range]))",
            "{{cause}}", instant=True)],
            "Seconds lost per restart decision in the time range: fault to restart ordered plus the work since the "
            "last checkpoint; the console's Goodput page has ETTR per workload.", unit="s", w=12),
    ])  # fmt: skip
    return dashboard(
        "trainguard-fleet", "trainguard / Fleet",
        "Every workload trainguard watches, the incidents and decisions of the responder, their latency, the "
        "circuit breaker and review precision.",
        _variables(_cluster_var()), [overview, safety, decisions, latency, review, nodes],
    )  # fmt: skip


def workload() -> Json:
    progress = Row("Progress", [
        stat("Ranks reporting", [prom(f"count(trainguard_rank_step{{{WL}}})")], "Ranks serving a step counter."),
        stat("Step", [prom(f"max(trainguard_rank_step{{{WL}}})")], "Newest global step of any rank."),
        stat("Samples/s", [prom(f"sum(trainguard_rank_samples_per_second{{{WL}}})")],
             "The job's throughput, summed over ranks."),
        stat("Last checkpoint step", [prom(f"max(trainguard_checkpoint_last_saved_step{{{WL}}})")],
             "Step of the newest complete checkpoint."),
        stat("Checkpoint age", [prom(f"time() - max(trainguard_checkpoint_last_saved_timestamp_seconds{{{WL}}})")],
             "Seconds since the newest complete checkpoint.", unit="s",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 3600},
                         {"color": "red", "value": 4 * 3600}]),
        stat("Slowest step gap", [prom(f"max(time() - trainguard_rank_last_step_timestamp_seconds{{{WL}}})")],
             "Seconds since the rank that finished a step longest ago did so: a hang grows this.", unit="s",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 120},
                         {"color": "red", "value": 300}]),
        timeseries("Step rate per rank", [prom(
            f"sum by (rank, host) (deriv(trainguard_rank_step{{{WL}}}[$__rate_interval]))", "rank {{rank}} {{host}}")],
            "Steps per second of each rank; a rank that stops while others go on is hung or dead.", unit="none"),
        heatmap("Step duration (all ranks)", [prom(f"trainguard_rank_step_duration_seconds{{{WL}}}")],
                "Distribution of the ranks' last step times; a band above the rest is a straggler."),
        table("Stragglers", [prom(
            f"sort_desc(max by (cluster, workload, attempt, rank, host) "
            f"({STEP_5M}) / on (cluster, workload, attempt) group_left "
            f"quantile by (cluster, workload, attempt) (0.5, max by (cluster, workload, attempt, rank) ({STEP_5M})))",
            instant=True, fmt="table")],
            "Each rank's 5 minute mean step time over the job's median rank: 1.0 is typical, above 1.2 drags the "
            "job.", rename={"Value": "x median"}),
        timeseries("Seconds since last step", [prom(
            f"time() - trainguard_rank_last_step_timestamp_seconds{{{WL}}}", "rank {{rank}} {{host}}")],
            "Per rank: grows without bound for a hung or crashed rank.", unit="s"),
    ])  # fmt: skip
    logs_row = Row("Log patterns, checkpoints, attempts", [
        _in_range("Log-pattern matches", "trainguard_log_pattern_matches_total", "pattern, category", WL,
                  "{{pattern}} ({{category}})", "Log lines that matched a catalog pattern in the time range.", w=8),
        timeseries("Log-pattern matches over time", [prom(
            f"sum by (pattern) (increase(trainguard_log_pattern_matches_total{{{WL}}}[$__rate_interval]))",
            "{{pattern}}")], "When the patterns matched.", w=8, bars=True, stacked=True),
        timeseries("Checkpoints", [
            prom(f"max by (attempt) (trainguard_checkpoint_last_saved_step{{{WL}}})",
                 "checkpoint (attempt {{attempt}})"),
            prom(f"max by (attempt) (trainguard_rank_step{{{WL}}})", "step (attempt {{attempt}})"),
        ], "Newest checkpoint step against the training step: the gap is the work a restart loses.", w=8),
        table("Attempts", [prom(
            f"count by (attempt, scheduler) "
            f"(max_over_time(trainguard_rank_heartbeat_timestamp_seconds{{{WL}}}[$__range]))",
            instant=True, fmt="table")],
            "Attempts (restarts) seen in the time range and their ranks.", w=8,
            rename={"Value": "ranks"}),
        timeseries("Ranks per attempt", [prom(
            f"count by (attempt) (trainguard_rank_heartbeat_timestamp_seconds{{{WL}}})", "attempt {{attempt}}")],
            "When each attempt ran.", w=16),
    ])  # fmt: skip
    gpus = Row("GPUs of its nodes", [
        table("XID (DCGM, last code per GPU)", [prom(
            f"max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS and on (Hostname) {WORKLOAD_HOSTS})",
            instant=True, fmt="table")],
            "DCGM's last XID per GPU of the hosts the workload runs on; 0 means none. 79, 48, 94, 95 call for "
            "isolation.", w=8, rename={"Value": "last XID"}),
        table("XID (NVML, in range)", [prom(
            f"sum by (host, gpu, xid) (increase(trainguard_gpu_xid_errors_total{{{WL}}}[$__range]))",
            instant=True, fmt="table")],
            "XID events the exporter saw through NVML (nodes without DCGM).", w=8, rename={"Value": "events"}),
        table("ECC double-bit (volatile)", [
            prom(f"max by (Hostname, gpu) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and on (Hostname) {WORKLOAD_HOSTS})",
                 instant=True, fmt="table"),
            prom(f"max by (host, gpu) (trainguard_gpu_ecc_uncorrected_volatile_total{{{CLUSTER}}} and on (host) "
                 f"max by (host) (trainguard_rank_step{{{WL}}}))", instant=True, fmt="table"),
        ], "Uncorrectable ECC errors since the driver loaded, from DCGM (A) and NVML (B).", w=8,
            rename={"Value #A": "DBE (DCGM)", "Value #B": "uncorrected (NVML)"}),
    ])  # fmt: skip
    audit = Row("Decisions about it", [
        logs("Decisions about this workload", [loki(
            f'{AUDIT} | workload=~"$workload" | json reason="reason", outcome="outcome", attempt_no="attempt" '
            '| line_format "{{.mode}} {{.action}} attempt {{.attempt_no}}: {{.outcome}}: {{.reason}}"')],
            "The responder's audit records for the selected workloads, from Loki (responder/loki.py). Open an "
            "entry for the nodes, incident id and the full record.", h=10),
    ])  # fmt: skip
    return dashboard(
        "trainguard-workload", "trainguard / Workload",
        "One training job: its ranks' progress and stragglers, log patterns, checkpoints, attempts, the GPUs "
        "of its nodes, and what trainguard decided about it.",
        _variables(_cluster_var(), query_variable(
            "workload", "Workload", 'label_values(trainguard_rank_step{cluster=~"$cluster"}, workload)')),
        [progress, logs_row, gpus, audit], time_from="now-3h",
    )  # fmt: skip


def decisions() -> Json:
    selected = f'{AUDIT_FILTERED} | workload=~"$workload"'
    rates = Row("Decisions over time", [
        timeseries("Audit records by action", [loki(
            f"sum by (action, mode) (count_over_time({selected} [$__auto]))", "{{action}} ({{mode}})")],
            "Audit records in Loki per action and mode.", w=12, bars=True, stacked=True),
        bargauge("By failure class", [loki(
            f"sum by (failure_class) (count_over_time({selected} [$__range]))", "{{failure_class}}",
            query_type="instant")], "infra (a node or the fabric), app (the job's own error), unknown.", w=6),
        bargauge("Refusals and skips", [loki(
            f'sum by (outcome) (count_over_time({selected} | outcome=~"skipped|failed" [$__range]))',
            "{{outcome}}", query_type="instant")],
            "Records that did not act: skipped (breaker, no action, not opted in) and failed scheduler calls.",
            w=6),
    ])  # fmt: skip
    stream = Row("The audit stream", [
        logs("Decisions", [loki(
            f'{selected} | json reason="reason", outcome="outcome", attempt_no="attempt", '
            'summary="attribution.summary" | line_format "{{.mode}} {{.action}} {{.cluster}}/{{.workload}} '
            'attempt {{.attempt_no}} -> {{.outcome}}: {{.reason}} [{{.summary}}]"')],
            "Newest first. Open an entry: record_id, incident_id, nodes and patterns are structured metadata; "
            "the line is the full audit record (docs/interfaces.md §5).", h=12),
        logs("Evidence", [loki(
            f'{selected} | json evidence="evidence", scores="attribution.scores", safety="safety" '
            '| line_format "{{.record_id}} {{.action}} {{.workload}}: nodes {{.nodes}}\\n'
            'scores {{.scores}}\\nsafety {{.safety}}\\nevidence {{.evidence}}"')],
            "The alerts (fingerprint, labels, startsAt, summary), attribution scores and breaker check behind "
            "each record.", h=14),
        logs("Raw records", [loki(selected)], "The JSON lines as pushed, for copying into a ticket.", h=10),
    ])  # fmt: skip
    loki_var = {**LOKI}
    return dashboard(
        "trainguard-decisions", "trainguard / Decisions",
        "The audit stream the responder mirrors to Loki: every decision and refusal with its evidence.",
        _variables(
            query_variable("cluster", "Cluster", 'label_values({app="trainguard", kind="audit"}, cluster)', loki_var),
            query_variable("action", "Action", 'label_values({app="trainguard", kind="audit"}, action)', loki_var),
            query_variable("mode", "Mode", 'label_values({app="trainguard", kind="audit"}, mode)', loki_var),
            textbox_variable("workload", "Workload (regex)", ".*"),
        ),
        [rates, stream], time_from="now-24h",
    )  # fmt: skip


DASHBOARDS = {"fleet": fleet, "workload": workload, "decisions": decisions}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard (sorted keys, two-space indent, newline at the end)."""
    return {f"{name}.json": json.dumps(build(), indent=2, sort_keys=True) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON is not up to date")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output directory (default dashboards/json)")
    args = parser.parse_args(argv)
    rendered = render()
    if args.check:
        stale = [name for name, text in rendered.items()
                 if not (args.out / name).exists() or (args.out / name).read_text() != text]  # fmt: skip
        extra = sorted(p.name for p in args.out.glob("*.json") if p.name not in rendered)
        for name in stale:
            print(f"{args.out / name} is out of date: run python -m dashboards.generate", file=sys.stderr)
        for name in extra:
            print(f"{args.out / name} is not generated by dashboards/generate.py: remove it", file=sys.stderr)
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (args.out / name).write_text(text)
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
