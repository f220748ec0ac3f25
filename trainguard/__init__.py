"""trainguard: workload-level recovery for distributed AI training.

The distribution ships three import packages whose names mirror the repository layout:
``responder`` (decide and act), ``exporters`` (emit signals) and this one, which holds what both
share: the identity-label rules and the command line.
"""

__version__ = "0.1.0"
