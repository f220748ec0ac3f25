"""Exclusion planning: the whole ``ExcNodeList`` for a Slurm job's next attempt.

Pure policy over parsed state (``SlurmJob``, ``SlurmNode``): which of the nodes trainguard wants
excluded are applied, which the user excluded themselves (kept), and which are dropped so the job
still fits its partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from responder.schedulers.slurm.parse import SlurmJob, SlurmNode


@dataclass(frozen=True, slots=True)
class ExclusionPlan:
    applied: tuple[str, ...]  # trainguard's exclusions, after pruning
    exc_node_list: tuple[str, ...]  # what ExcNodeList becomes: the user's own + applied
    dropped: tuple[str, ...]  # asked for but not applied (to keep enough nodes, or unknown to Slurm)
    notes: tuple[str, ...] = ()


def plan_exclusions(
    desired: Sequence[str],
    job: SlurmJob,
    nodes: Mapping[str, SlurmNode],
    min_spare_nodes: int = 0,
) -> ExclusionPlan:
    """The whole ExcNodeList for the job's next attempt.

    ``desired`` is the whole set trainguard wants excluded, oldest first. Exclusions trainguard set
    earlier but no longer wants are cleared (ExcNodeList sticks across requeues); exclusions the
    user gave at submission are kept. Exclusions are then pruned, oldest first, until at least
    ``node_count + min_spare_nodes`` usable nodes remain in the job's partitions; excluding a node
    that is down or drained anyway costs nothing and is kept.
    """
    user_own = tuple(n for n in job.excluded_nodes if n not in job.marker.excluded)
    wanted = list(dict.fromkeys(n for n in desired if n not in user_own))
    notes: list[str] = []
    unknown = [n for n in wanted if n not in nodes]
    if unknown:
        notes.append(f"not Slurm nodes, ignored: {','.join(unknown)}")
    wanted = [n for n in wanted if n in nodes]
    parts = set(job.partitions)
    in_scope = [n for n in nodes.values() if not parts or parts & set(n.partitions)]
    usable = {n.name for n in in_scope if n.usable and n.name not in user_own}
    need = max(job.node_count, 1) + max(min_spare_nodes, 0)
    pruned: list[str] = []
    while len(usable - set(wanted)) < need:
        victim = next((n for n in wanted if n in usable), None)
        if victim is None:
            break
        wanted.remove(victim)
        pruned.append(victim)
    if pruned:
        notes.append(
            f"kept {','.join(pruned)} eligible: the job needs {need} usable node(s) and only {len(usable)} are usable"
        )
    applied = tuple(wanted)
    return ExclusionPlan(applied, user_own + applied, tuple(unknown) + tuple(pruned), tuple(notes))


def join_nodes(names: Iterable[str]) -> str:
    """ExcNodeList value: plain comma list (Slurm accepts it; no hostlist compression needed)."""
    return ",".join(names)
