"""The responder's own Prometheus metrics, on a registry passed in (never the global one)."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120, 300)


class ResponderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        counter, gauge = partial(Counter, registry=registry), partial(Gauge, registry=registry)
        latency = partial(Histogram, buckets=LATENCY_BUCKETS, registry=registry)
        self.incidents = counter("trainguard_responder_incidents_total", "Incidents opened", ["cluster"])
        self.notifications = counter(
            "trainguard_responder_notifications_total",
            "Alertmanager notifications by result (stored, badrequest, unauthorized, payloadtoolarge, store_error)",
            ["result"],
        )
        self.alerts = counter(
            "trainguard_responder_alerts_received_total",
            "Alerts received, by outcome: new evidence, duplicate, rejected (bad labels), ignored, resolved",
            ["outcome"],
        )
        self.decisions = counter(
            "trainguard_responder_decisions_total",
            "Audit records written, by action, mode and outcome",
            ["cluster", "action", "mode", "outcome"],
        )
        # Its own counter, created at 0 for every cluster that may act (configured, or switched to act),
        # so the first failure is an increase Prometheus sees (TrainguardResponderActionsFailing).
        # Retries: actions kept pending because the scheduler could not be asked (docs/operations.md).
        self.actions_failed, self.action_retries = (
            counter(f"trainguard_responder_{name}_total", f"Scheduler actions {what}, by cluster and action",
                    ["cluster", "action"])
            for name, what in (
                ("actions_failed", "whose outcome is failed"),
                ("action_retries", "kept pending to be tried again: the scheduler could not be asked while acting"),
            )
        )  # fmt: skip
        # goodput and node suspicion: docs/decisions.md
        self.goodput_lost = counter(
            "trainguard_responder_goodput_lost_seconds",
            "Goodput lost per restart decision: fault to restart ordered plus work since the checkpoint, by cause",
            ["cluster", "cause"],
        )
        self.breaker_open = gauge(
            "trainguard_responder_breaker_open",
            "1 while a cluster's circuit breaker is open after correlated failures",
            ["cluster"],
        )
        self.mode = gauge(
            "trainguard_responder_mode_act", "1 if the cluster is in act mode, 0 in monitor mode", ["cluster"]
        )
        self.open_incidents = gauge(
            "trainguard_responder_open_incidents", "Incidents waiting for their correlation window"
        )
        self.review_precision = gauge(
            "trainguard_responder_review_precision",
            "Share of reviewed decisions judged correct, per detection pattern",
            ["pattern"],
        )
        self.reviewed = gauge("trainguard_responder_reviewed_decisions", "Reviewed decisions per pattern", ["pattern"])
        self.node_suspicion = gauge(
            "trainguard_node_suspicion",
            "Probability that the node is bad (prior, implications, clean runs, with decay): docs/decisions.md",
            ["cluster", "node"],
        )
        self.detection_latency = latency(
            "trainguard_responder_detection_latency_seconds", "Alert startsAt to notification received"
        )
        self.decision_latency = latency(
            "trainguard_responder_decision_latency_seconds",
            "First alert of an incident received to decision recorded (includes the correlation window)",
        )
        self.action_latency = latency(
            "trainguard_responder_action_latency_seconds", "Decision recorded to scheduler action verified"
        )
