"""The responder: Alertmanager notifications in, one audited decision per workload incident out.

Stages, one module each: ``alerts`` (validate the webhook payload), ``incidents`` (group alerts per
workload attempt), ``attribution`` (which nodes, infra or app), ``policy`` (what to do),
``isolation`` (nodes across attempts and workloads), ``breaker`` (blast-radius limits),
``engine`` (run the stages and record the decision), ``schedulers`` (how to do it).
"""
