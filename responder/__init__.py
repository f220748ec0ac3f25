"""The responder: Alertmanager notifications in, one audited decision per workload incident out.

Stages, one module each: ``alerts`` (validate the webhook payload), ``store`` (group alerts into one
incident per workload attempt, durably), ``attribution`` (which nodes, infra or app), ``policy`` (what
to do), ``isolation`` (nodes across attempts and workloads), ``breaker`` (blast-radius limits),
``engine`` (run the stages and record the decision), ``schedulers`` (how to do it). ``model`` holds
the nouns they share; ``app``, ``api``, ``auth`` and ``console`` are the HTTP edge. docs/architecture.md
has the map.
"""
