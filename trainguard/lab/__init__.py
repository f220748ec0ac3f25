"""The harness the tests, the benchmarks (``bench/``) and the scripts (``scripts/``) share.

``common`` (a free port, polling, finding a service's binary), ``payloads`` (Alertmanager webhook
payloads), ``server`` (a real ``trainguard serve``), ``stack`` (real Prometheus and Alertmanager, a lab
exporter, a webhook receiver), ``slurm`` (the 4-node Slurm lab with the whole stack on it), ``faults``
(faults injected into the lab's training job) and ``report`` (a trial's report). It runs from a checkout
(``make install`` installs it with the project): the lab's shell scripts and training job are read
from the repository. Nothing here depends on pytest; ``tests/services.py`` turns a missing service
into a skip.
"""
