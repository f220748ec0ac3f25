"""Whose drain is it? A node drained or set down by someone else is evidence against it.

NHC, Slurm's ``HealthCheckProgram`` and admins drain nodes with a reason; trainguard drains with
``trainguard: <incident>`` and reads its own back (never evidence, never overwritten). The reason is
free text, so it is parsed into a bounded ``source`` for a metric label; the text itself stays in Slurm.
"""

from __future__ import annotations

import re

from responder.schedulers.slurm.parse import SlurmNode

SOURCES = ("trainguard", "nhc", "health_check", "slurm", "admin")
_NHC = re.compile(r"^\s*NHC\b", re.IGNORECASE)  # LBNL NHC: "NHC: check_fs_mount: ..."
_HEALTH = re.compile(r"health.?check|healthcheck", re.IGNORECASE)
_SLURM = re.compile(
    r"^(Not responding|Kill task failed|Prolog error|Epilog error|batch job complete failure|"
    r"Low (RealMemory|socket\*core\*thread count)|NO NETWORK ADDRESS FOUND)",
    re.IGNORECASE,
)


def source(reason: str) -> str:
    """The owner of a drain or down reason: one of ``SOURCES`` (``admin`` for anything unrecognised)."""
    if reason.startswith("trainguard:"):
        return "trainguard"
    if _NHC.search(reason):
        return "nhc"
    if _HEALTH.search(reason):
        return "health_check"
    if _SLURM.search(reason):
        return "slurm"
    return "admin"


def drained_by_other(node: SlurmNode) -> str | None:
    """The source of a drain or down set by someone other than trainguard, or None."""
    if not (node.drain or node.down):
        return None
    owner = source(node.reason)
    return None if owner == "trainguard" else owner
