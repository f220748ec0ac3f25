"""The label values every part shares (docs/interfaces.md §2 and §3): alert categories, severities, runbook links.

Defined once here: the alert rules' lint (``scripts/lint_monitoring.py``) and their tests read them; the
exporter's catalog and fast path (``exporters/``) are to read them too.
"""

from __future__ import annotations

import os
from typing import Final

# Categories of log-pattern matches (the exporter's catalog), interfaces.md §2.
LOG_CATEGORIES: Final = ("infra_gpu", "infra_network", "infra_node", "collective_timeout", "app_error")
# Categories an alert the responder acts on may carry, interfaces.md §3.
CATEGORIES: Final = frozenset({*LOG_CATEGORIES, "hang", "straggler", "crash", "node_lost", "no_progress"})
SEVERITIES: Final = ("critical", "warning", "info")  # critical pages, warning queues, info informs

RUNBOOK: Final = "https://github.com/trainguard/trainguard/blob/main/docs/runbook.md"


def runbook_anchor(alertname: str) -> str:
    """The runbook anchor of an alert: its lower-cased name (a Markdown heading ``## <alertname>``)."""
    return alertname.lower()


def runbook_url(alertname: str) -> str:
    """Every alert's ``runbook_url``, stamped from this one pattern. ``TRAINGUARD_RUNBOOK_URL`` points the
    exporter's fast-path alerts at your own copy of the runbook (``rules export --runbook-url`` the rules)."""
    return f"{os.environ.get('TRAINGUARD_RUNBOOK_URL') or RUNBOOK}#{runbook_anchor(alertname)}"
