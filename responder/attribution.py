"""Attribution: from an incident's alerts to a verdict (infra, app or unknown) and the nodes to blame.

Evidence is scored and every step is written into the verdict's explanation, so an operator
reading the audit record sees *why* a node was blamed. The rules, strongest first:

1. Hard infrastructure signals that name a host (GPU: XID, ECC, row remap, GPU-side CUDA errors;
   node faults; a lost node) implicate that host.
2. Errors of the application (CUDA OOM, exceptions, NaN loss, application XIDs) mean ``app``:
   retrying elsewhere cannot help.
3. Soft infrastructure signals implicate a host too: network errors that name it (unless they come
   from most hosts at once: that is the fabric, not a node), the laggard rank of a hang, a
   persistent straggler.
4. Symptoms implicate nobody: collective timeouts appear on every surviving rank, and a crashed
   rank alone says nothing about why.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Protocol

from responder.model import FailureClass, Incident, StoredAlert

HARD_INFRA = frozenset({"infra_gpu", "infra_node", "node_lost"})
SOFT_INFRA = frozenset({"infra_network", "straggler", "hang"})
SYMPTOMS = frozenset({"collective_timeout", "crash"})
# Log patterns that a rank prints when a *peer* fails (the catalog's descriptions say "sympathetic"):
# a dead rank makes every survivor report a broken socket, a remote error or NCCL's "unhandled system error"
# (a failed socket call; the threads found the printing node at fault once in 14), a dead Ray head makes every
# worker lose its GCS. They are symptoms, like collective timeouts, and never implicate the host that printed
# them.
SYMPATHETIC_PATTERNS = frozenset(
    {"nccl_remote_error", "nccl_socket_error", "gloo_connection_lost", "rendezvous_error", "sigkill",
     "ray_gcs_unreachable", "nccl_system_error", "nccl_trace_system"}
)  # fmt: skip
# Catalog rows that say a rank failed but not why (the catch-all exception row, a launcher's failure
# summary, a task's exit code, an abort): every rank of a job prints them when one peer dies, so they are
# symptoms too; so are the kernel OOM report's lines that do not say whether the node or a cgroup ran out.
# They make detection broad without turning a node's fault into "the application's error".
GENERIC_PATTERNS = frozenset(
    {"python_exception", "cpp_exception_abort", "torch_elastic_child_failed", "srun_task_failed", "sigabrt",
     "k8s_crash_loop", "sigterm", "error_record", "kernel_oom_report"}
)  # fmt: skip
IMPLICATE_AT = 1.0  # score a host needs before it is blamed
CRASH_WEIGHT = 0.5  # a crash adds to other evidence on its host but never blames it alone
FABRIC_SHARE = 0.5  # network errors from at least this share of hosts (and >= 3) mean the fabric


@dataclass(frozen=True, slots=True)
class RankProgress:
    """Per-rank progress from Prometheus (enrichment), used to find a hang's laggard."""

    rank: str
    host: str
    step: float
    last_step_ts: float
    step_duration: float | None = None
    stuck: bool = False  # the process is stopped or in uninterruptible sleep (exporter's /proc view)


@dataclass(frozen=True, slots=True)
class AttemptProgress:
    """What one attempt of the workload achieved (enrichment): newest checkpoint and step range."""

    checkpoint_step: float | None
    first_step: float | None
    last_step: float | None


@dataclass(frozen=True, slots=True)
class Context:
    """What enrichment could add; ``available`` False when Prometheus was not asked or unreachable."""

    available: bool = False
    note: str = "no Prometheus configured: decided from the alerts alone"
    progress: tuple[RankProgress, ...] = ()
    xid_hosts: dict[str, list[str]] = field(default_factory=dict)  # host -> XID codes seen in the window
    attempts: dict[int, AttemptProgress] = field(default_factory=dict)  # the workload's attempts so far


@dataclass(frozen=True, slots=True)
class Verdict:
    failure_class: FailureClass
    scores: dict[str, float]
    implicated: tuple[str, ...]
    explanation: tuple[str, ...]
    patterns: tuple[str, ...]
    categories: frozenset[str]
    summary: str


@dataclass
class _Group:
    category: str
    name: str
    ranks: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    count: int = 0


def attribute(alerts: Sequence[StoredAlert], context: Context | None = None) -> Verdict:
    """Score the evidence of one incident and explain the result."""
    context = context or Context()
    groups = _group(alerts)
    scores: dict[str, float] = defaultdict(float)
    explanation: list[str] = []
    all_hosts = {h for g in groups for h in g.hosts} | {p.host for p in context.progress}
    categories = frozenset(g.category for g in groups)

    hard_hosts: set[str] = set()
    for g in groups:
        if g.category in HARD_INFRA:
            for host in sorted(g.hosts):
                scores[host] += 1.0
                hard_hosts.add(host)
            explanation.append(_line(g, f"{_describe(g.category)}: implicates {_hosts(g.hosts)}" if g.hosts else
                                     f"{_describe(g.category)}, but no host named: implicates nobody"))  # fmt: skip
    for host, codes in sorted(context.xid_hosts.items()):
        scores[host] += 1.0
        hard_hosts.add(host)
        explanation.append(f"Prometheus: XID {', '.join(codes)} on {host} in the incident window: implicates {host}")

    app_groups = [g for g in groups if g.category == "app_error"]
    app_ranks = {r for g in app_groups for r in g.ranks}
    for g in app_groups:
        explanation.append(_line(g, "the application's own error: points to the job, not a node"))

    soft_hosts: set[str] = set()
    for g in groups:
        if g.category == "infra_network":
            if len(g.hosts) >= 3 and len(g.hosts) >= FABRIC_SHARE * max(len(all_hosts), 1):
                explanation.append(_line(g, f"network errors on {len(g.hosts)} of {len(all_hosts)} hosts: "
                                            "the fabric, not one node; implicates nobody"))  # fmt: skip
                continue
            for host in g.hosts:
                scores[host] += 1.0
                soft_hosts.add(host)
            explanation.append(_line(g, f"network errors naming {_hosts(g.hosts)}: implicates them"
                                     if g.hosts else "network errors without a host: implicates nobody"))  # fmt: skip
        elif g.category == "straggler":
            for host in g.hosts:
                scores[host] += 1.0
                soft_hosts.add(host)
            explanation.append(_line(g, f"persistent straggler: implicates {_hosts(g.hosts)}"))
    hang_groups = [g for g in groups if g.category == "hang"]
    if hang_groups:
        laggards, why = _laggards(hang_groups, context, all_hosts)
        for host in laggards:
            scores[host] += 1.0
            soft_hosts.add(host)
        explanation.append(why)

    for g in groups:
        if g.category == "collective_timeout":
            if g.name in GENERIC_PATTERNS:
                what = "a rank failed, the line does not say why"
            elif g.name in SYMPATHETIC_PATTERNS:
                what = "a peer failed (sympathetic)"
            else:
                what = "every surviving rank reports it"
            explanation.append(_line(g, f"a symptom ({what}): implicates nobody"))
        elif g.category == "crash":
            for host in g.hosts:
                scores[host] += CRASH_WEIGHT
            explanation.append(_line(g, f"rank process gone: +{CRASH_WEIGHT} on its host, not enough alone"))
        elif g.category == "no_progress":
            explanation.append(_line(g, "attempts without a new checkpoint: retrying is not productive"))
        elif g.category not in HARD_INFRA | SOFT_INFRA | {"app_error"}:
            explanation.append(_line(g, f"category {g.category or '(none)'}: not scored"))

    if not context.available:
        explanation.append(context.note)

    failure_class, implicated, summary = _conclude(scores, hard_hosts, soft_hosts, bool(app_ranks or app_groups),
                                                   len(app_ranks), categories)  # fmt: skip
    patterns = tuple(sorted({g.name for g in groups}))
    return Verdict(failure_class, dict(scores), implicated, tuple(explanation), patterns, categories, summary)


def _conclude(
    scores: dict[str, float],
    hard_hosts: set[str],
    soft_hosts: set[str],
    has_app: bool,
    app_rank_count: int,
    categories: frozenset[str],
) -> tuple[FailureClass, tuple[str, ...], str]:
    """Precedence: hard infrastructure > application error > soft infrastructure > unknown."""
    implicated = tuple(sorted(h for h, s in scores.items() if s >= IMPLICATE_AT))
    hard_implicated = tuple(h for h in implicated if h in hard_hosts)
    failure_class: FailureClass
    if hard_implicated:
        failure_class = FailureClass.INFRA
        implicated = tuple(sorted(set(hard_implicated) | {h for h in implicated if h in soft_hosts}))
        summary = f"infrastructure fault on {', '.join(implicated)}"
    elif has_app:
        failure_class, implicated = FailureClass.APP, ()
        summary = f"application error on {app_rank_count or 'some'} rank(s); no node to blame"
    elif implicated:
        failure_class = FailureClass.INFRA
        summary = f"infrastructure fault on {', '.join(implicated)}"
    elif categories & (HARD_INFRA | {"infra_network"}):
        failure_class = FailureClass.INFRA
        summary = "infrastructure fault, but no single node can be blamed"
    else:
        failure_class = FailureClass.UNKNOWN
        summary = "cause unknown: only symptoms, no node or application error identified"
    return failure_class, implicated, summary


def _group(alerts: Iterable[StoredAlert]) -> list[_Group]:
    groups: dict[tuple[str, str], _Group] = {}
    for alert in alerts:
        labels = alert.labels
        category = labels.get("category", "")
        name = labels.get("pattern") or labels.get("alertname", "")
        if name in SYMPATHETIC_PATTERNS | GENERIC_PATTERNS:
            category = "collective_timeout"  # scored as the symptom it is; the explanation names it
        group = groups.setdefault((category, name), _Group(category, name))
        group.count += 1
        if labels.get("rank"):
            group.ranks.add(labels["rank"])
        if labels.get("host"):
            group.hosts.add(labels["host"])
    return sorted(groups.values(), key=lambda g: (g.category, g.name))


def _laggards(hangs: list[_Group], context: Context, all_hosts: set[str]) -> tuple[set[str], str]:
    hung_hosts = {h for g in hangs for h in g.hosts}
    hung_ranks = {r for g in hangs for r in g.ranks}
    progress = context.progress
    if progress:
        stuck = [p for p in progress if p.stuck]
        if stuck and len(stuck) < len(progress):
            hosts = {p.host for p in stuck}
            ranks = sorted((p.rank for p in stuck), key=int)
            return hosts, (
                f"hang: rank(s) {', '.join(ranks)} cannot progress (process stopped or stuck in the kernel) "
                f"while the others wait for them: laggard on {_hosts(hosts)}"
            )
        top = max(p.step for p in progress)
        behind = [p for p in progress if p.step < top]
        if behind:
            low = min(p.step for p in behind)
            hosts = {p.host for p in behind if p.step == low}
            ranks = sorted((p.rank for p in behind if p.step == low), key=int)
            return hosts, (
                f"hang: rank(s) {', '.join(ranks)} stopped at step {low:g} while others reached {top:g}: "
                f"laggard on {_hosts(hosts)}"
            )
        durations = [p.step_duration for p in progress if p.step_duration]
        margin = max(1.0, median(durations)) if durations else 1.0
        newest = max(p.last_step_ts for p in progress)
        stale = [p for p in progress if newest - p.last_step_ts > margin]
        if stale and len(stale) < len(progress):
            hosts = {p.host for p in stale}
            return hosts, f"hang: rank(s) on {_hosts(hosts)} stopped stepping {margin:.1f}s+ before the others"
        return set(), f"hang on {len(hung_ranks)} rank(s): all ranks stalled together, no laggard; implicates nobody"
    if len(hung_hosts) == 1 and len(all_hosts) > 1:
        return hung_hosts, f"hang reported only on {_hosts(hung_hosts)} while other hosts progress: laggard"
    return set(), (
        f"hang on {len(hung_ranks)} rank(s) across {len(hung_hosts)} host(s); "
        "without per-rank progress from Prometheus the laggard cannot be told: implicates nobody"
    )


_DESCRIPTIONS = {
    "infra_gpu": "GPU fault",
    "infra_node": "node fault",
    "node_lost": "node lost",
}


def _describe(category: str) -> str:
    return _DESCRIPTIONS.get(category, category)


def _hosts(hosts: Iterable[str]) -> str:
    return ", ".join(sorted(hosts)) or "no host"


def _line(g: _Group, verdict: str) -> str:
    where = f"{g.count} alert(s)"
    if g.ranks:
        where += f", {len(g.ranks)} rank(s)"
    if g.hosts:
        where += f" on {len(g.hosts)} host(s)"
    return f"{g.name or '(unnamed)'} [{g.category or 'no category'}] ({where}): {verdict}"


class Enricher(Protocol):
    """Context beyond the alerts (Prometheus: laggards, checkpoints per attempt); ``responder.enrichment``."""

    def context(self, incident: Incident, alerts: Sequence[StoredAlert]) -> Context: ...
    def close(self) -> None: ...


class NoEnrichment:
    def context(self, incident: Incident, alerts: Sequence[StoredAlert]) -> Context:
        return Context()

    def close(self) -> None:
        pass


def checkpoint_step(context: Context, attempt: str) -> float | None:
    """The newest checkpoint step of ``attempt`` that enrichment found (None: unknown)."""
    progress = context.attempts.get(int(attempt)) if attempt.isdigit() else None
    return progress.checkpoint_step if progress is not None else None
