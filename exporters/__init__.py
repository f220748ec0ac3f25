"""The node-side exporter: per-rank progress, log-pattern counters, checkpoints and GPU faults."""
