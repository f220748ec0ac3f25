"""Fault injection for the lab, and one trial: inject a fault into a running job and follow it through
detection -> attribution -> decision -> action -> training productive again.

Faults act the way real ones do, from outside the job: signals to a rank's process, lines in a rank's
log or in a node's kernel log, a node's daemons killed, a rank made slow. Each fault states what a
correct responder does (action and implicated nodes); a trial measures how close it came and how fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporters.patterns import line_host, line_rank
from responder.clock import parse_rfc3339
from responder.schedulers.slurm.parse import expand_hostlist
from trainguard.lab.slurm import NODES, ROOT, TRAINGUARD, Lab, LabError, wait

NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
    "ncclUnhandledCudaError: Call to CUDA function failed."
)
CUDA_ERROR = "RuntimeError: CUDA error: unspecified launch failure\nCUDA kernel errors might be asynchronously reported"
ECC_ERROR = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
XID_79 = "[{t:.6f}] NVRM: Xid (PCI:0000:10:1c): 79, pid={pid}, name=python3, GPU has fallen off the bus.\n"


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    inject: Callable[[Lab, str, str], None]
    action: str | None  # what a correct responder does in act mode; None: nothing (healthy)
    implicates_target: bool
    nodes: int = 3
    timeout_s: float = 60.0


def _pid(lab: Lab, job: str, node: str) -> int:
    return int(lab.rank_on(job, 0, node)["pid"])


def _rank(lab: Lab, job: str, node: str) -> str:
    return str(lab.rank_on(job, 0, node)["identity"]["rank"])


def _die_with(text: str) -> Callable[[Lab, str, str], None]:
    """The rank on the node prints ``text`` to its log and exits 1, as a process hit by that error does."""

    def inject(lab: Lab, job: str, node: str) -> None:
        control = lab.root / "control" / job
        (control / f"line-r{_rank(lab, job, node)}").write_text(text)
        (control / f"die-r{_rank(lab, job, node)}").write_text("1")

    return inject


def crash(lab: Lab, job: str, node: str) -> None:
    os.kill(_pid(lab, job, node), signal.SIGKILL)


def hang(lab: Lab, job: str, node: str) -> None:
    os.kill(_pid(lab, job, node), signal.SIGSTOP)


def straggler(lab: Lab, job: str, node: str) -> None:
    (lab.root / "control" / job / f"slow-r{_rank(lab, job, node)}").write_text("1.0")


def xid(lab: Lab, job: str, node: str) -> None:
    with lab.kmsg(node).open("a") as kmsg:
        kmsg.write(XID_79.format(t=time.monotonic(), pid=_pid(lab, job, node)))
    _die_with(CUDA_ERROR)(lab, job, node)


def node_loss(lab: Lab, job: str, node: str) -> None:
    """The whole node goes: its exporter, its slurmd and every process of the job on it."""
    lab.stop_exporter(node)
    lab._run([str(ROOT / "slurm" / "lab.sh"), "kill-node", node, str(lab.slurm_dir)])


def app_error(lab: Lab, job: str, node: str) -> None:
    (lab.root / "control" / job / "apperror").write_text("1")


def healthy(lab: Lab, job: str, node: str) -> None:
    pass


FAULTS = {
    f.name: f
    for f in (
        Fault("xid", "XID 79 in the node's kernel log; the rank there dies with a CUDA error", xid,
              "requeue_excluding", True),
        Fault("nccl_error", "NCCL unhandled CUDA error on one rank, which exits", _die_with(NCCL_ERROR),
              "requeue_excluding", True),
        Fault("cuda_error", "CUDA unspecified launch failure on one rank, which exits", _die_with(CUDA_ERROR),
              "requeue_excluding", True),
        Fault("ecc", "uncorrectable ECC error on one rank, which exits", _die_with(ECC_ERROR),
              "requeue_excluding", True),
        Fault("hang", "one rank stopped with SIGSTOP (the others block in all_reduce)", hang,
              "requeue_excluding", True, timeout_s=60),
        Fault("crash", "one rank killed with SIGKILL, no error printed", crash, "requeue", False),
        Fault("node_loss", "a node's slurmd, exporter and job processes killed", node_loss,
              "requeue_excluding", True, timeout_s=90),
        Fault("app_error", "CUDA out of memory on every rank (the job's own bug)", app_error, "stop", False),
        Fault("straggler", "one rank 1 s slower per step than its peers", straggler, "requeue_excluding", True,
              timeout_s=420),
        Fault("healthy", "no fault: the job trains for the observation window", healthy, None, False,
              timeout_s=25),
    )
}  # fmt: skip
CORPUS_DIR = ROOT / "tests" / "data" / "corpus"
CORPUS_PREFIX = "corpus:"
# What a correct responder does with each corpus class (action, whether the target node is implicated), as
# docs/decisions.md ("Attribution", "Policy") and responder/policy.py document it for a first attempt of a
# job with no earlier exclusions: infra_gpu / infra_node evidence on a host is hard evidence (+1.0) and an
# infra_network line naming one host (fewer than half of the hosts: not the fabric) scores +1.0 on it, so
# the verdict is infra with that node implicated -> `requeue_excluding` it; an application error without
# hard infrastructure evidence -> class app -> `stop`; a collective timeout is a symptom on every surviving
# rank, nobody is implicated, and infra or unknown without nodes -> plain `requeue`. A replayed rank exits
# after its excerpt; that exit alone (`crash`, +0.5) never blames its node. A benign excerpt is printed
# while the rank trains on: no decision at all. `unknown` cases have no expected decision: not replayable.
CORPUS_EXPECTED: dict[str, tuple[str | None, bool]] = {
    "infra_gpu": ("requeue_excluding", True),
    "infra_network": ("requeue_excluding", True),
    "infra_node": ("requeue_excluding", True),
    "app_error": ("stop", False),
    "collective_timeout": ("requeue", False),
    "benign": (None, False),
}
# An excerpt of a node's kernel log rather than of a rank's output: it has NVRM/Xid, PCIe AER, syslog
# `kernel:`, machine-check/EDAC, soft-lockup or OOM-killer lines. Such an excerpt goes whole (its
# continuation lines too) into the node's kernel log.
_KERNEL_LINE = re.compile(
    r"NVRM: |\bXid\b|\bAER: |\skernel: |\bEDAC\b|\bmce: |soft lockup|Out of memory: Killed process|oom-kill:"
)
KERNEL_LEAD_S = 1.0  # kernel-log excerpt -> the rank's CUDA error: five exporter polls in the lab
_SYSLOG_HOST = re.compile(r"^[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} ([A-Za-z0-9][A-Za-z0-9.-]*) kernel: ")
_RANK_TOKEN = re.compile(r"^\[?[Rr]ank\s?(\d+)\]?:?$|^rank\s*:\s*(\d+) \(local_rank")


@dataclass(frozen=True)
class CorpusCase:
    """One excerpt of tests/data/corpus/*.jsonl (the fields a replay needs)."""

    id: str
    cls: str
    family: str
    text: str
    tokens: tuple[str, ...]
    source: str = ""

    def host_tokens(self) -> list[str]:
        """The tokens that name the host that printed the excerpt: a line's own host as the exporter reads
        it (NCCL's ``host:pid:tid [gpu]`` prefix, torchelastic's ``host : NAME``) or a syslog line's host.
        Peers named inside a line (``10.0.0.2<45763>``) are other hosts and stay as they are."""
        own = {h for line in self.text.splitlines() for h in (line_host(line), _syslog_host(line)) if h}
        return [t for t in self.tokens if t in own]

    def rank_tokens(self) -> list[str]:
        """The tokens that name the rank that printed the excerpt (``[Rank 1]``, ``[rank1]``, ``rank : 0
        (local_rank: 0)``), when every line that names its own rank names the same one; other ranks a
        line mentions (a peer, the rank a collective waited for) stay as they are, and so does the GPU
        index of NCCL's ``host:pid:tid [gpu]`` prefix."""
        own = {r for line in self.text.splitlines() if (r := line_rank(line)) is not None}
        if len(own) != 1:
            return []
        [rank] = own
        found = []
        for token in self.tokens:
            m = _RANK_TOKEN.match(token.strip())
            if m and str(int(m.group(1) or m.group(2))) == rank:
                found.append(token)
        return found

    def replayed(self, node: str, rank: str) -> str:
        """The excerpt as node ``node``'s rank ``rank`` prints it: host tokens become the node's name, rank
        tokens the rank; nothing else in the text changes."""
        text = self.text
        for token in self.host_tokens():
            text = re.sub(rf"(?<![A-Za-z0-9.-]){re.escape(token)}(?![A-Za-z0-9-]|\.[A-Za-z0-9])", node, text)
        for token in self.rank_tokens():
            number = re.search(r"\d+", token)
            assert number is not None
            renamed = token[: number.start()] + rank + token[number.end() :]
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(token)}(?![0-9])", renamed, text)
        return text


def _syslog_host(line: str) -> str | None:
    m = _SYSLOG_HOST.match(line)
    return m.group(1) if m else None


def is_kernel_log(text: str) -> bool:
    return any(_KERNEL_LINE.search(line) for line in text.splitlines())


def load_corpus_case(case_id: str, directory: Path = CORPUS_DIR) -> CorpusCase:
    """The case ``case_id`` from ``directory``/*.jsonl; LabError naming the files when it is not there."""
    files = sorted(directory.glob("*.jsonl"))
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                case = json.loads(line)
            except ValueError as exc:
                raise LabError(f"{path}:{number}: not JSON ({exc})") from None
            if case.get("id") == case_id:
                tokens = tuple(str(t) for t in case.get("tokens") or ())
                return CorpusCase(case_id, str(case["class"]), str(case["family"]), str(case["text"]), tokens,
                                  str(case.get("source", "")))  # fmt: skip
    where = ", ".join(p.name for p in files) if files else "no *.jsonl files"
    raise LabError(f"corpus case {case_id!r} not found in {directory} ({where})")


def replay(case: CorpusCase) -> Callable[[Lab, str, str], None]:
    """The rank on the node prints the excerpt as its own output and exits 1 (as ``_die_with``); a kernel
    log excerpt goes to the node's kernel log instead and the rank dies with its usual CUDA error (as the
    ``xid`` fault). A benign excerpt is printed and the rank trains on."""

    def inject(lab: Lab, job: str, node: str) -> None:
        rank = _rank(lab, job, node)
        text = case.replayed(node, rank)
        control = lab.root / "control" / job
        if is_kernel_log(text):
            with lab.kmsg(node).open("a") as kmsg:
                kmsg.write(text.rstrip("\n") + "\n")
            # The kernel reports the fault before the application's next CUDA call fails. The exporter counts
            # a kernel line for the workloads whose ranks it sees alive on the node, so a rank that died in
            # the same poll would leave the line to no workload (the decision then rests on the CUDA error).
            time.sleep(KERNEL_LEAD_S)
            text = CUDA_ERROR
        (control / f"line-r{rank}").write_text(text)
        if case.cls != "benign":
            (control / f"die-r{rank}").write_text("1")

    return inject


def corpus_fault(case_id: str, directory: Path = CORPUS_DIR) -> Fault:
    case = load_corpus_case(case_id, directory)
    if case.cls not in CORPUS_EXPECTED:
        raise LabError(f"corpus case {case_id} is labelled {case.cls!r}: no expected decision to check a replay by")
    action, implicates = CORPUS_EXPECTED[case.cls]
    where = "the node's kernel log" if is_kernel_log(case.text) else "the rank's log"
    description = f"corpus {case.id} ({case.cls}, {case.family}) replayed into {where}"
    return Fault(f"{CORPUS_PREFIX}{case.id}", description, replay(case), action, implicates,
                 timeout_s=25 if action is None else 60)  # fmt: skip


def fault_named(name: str) -> Fault:
    """A fault by name: one of FAULTS, or ``corpus:<case id>`` (a replay of that corpus case)."""
    if name.startswith(CORPUS_PREFIX):
        return corpus_fault(name.removeprefix(CORPUS_PREFIX))
    if name not in FAULTS:
        raise LabError(f"unknown fault {name!r}: one of {', '.join(sorted(FAULTS))} or {CORPUS_PREFIX}<case id>")
    return FAULTS[name]


QUICK = ("xid", "nccl_error", "cuda_error", "ecc", "hang", "crash", "node_loss", "app_error")


@dataclass
class TrialResult:
    fault: str
    mode: str
    job: str
    target: str
    ok: bool = False
    expected_action: str | None = None
    action: str | None = None
    outcome: str | None = None
    expected_nodes: list[str] = field(default_factory=list)
    implicated: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    detection_s: float | None = None
    decision_s: float | None = None
    action_s: float | None = None
    productive_s: float | None = None
    approval_s: float | None = None  # approve mode: decision recorded -> operator's approval (part of productive_s)
    resumed_from_step: int | None = None
    checkpoint_step: int | None = None
    decisions: int = 0
    trained_s: float | None = None  # attempt 0 from step 12 (productive) to the fault: goodput accounting
    step_at_fault: int | None = None
    step_s: float | None = None  # attempt 0's mean step time
    first_alert: str | None = None
    note: str = ""
    events: list[tuple[float, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "events"} | {
            "events": [{"t": round(t, 3), "what": w} for t, w in self.events]
        }


def run_trial(lab: Lab, fault: Fault, say: Callable[[str], None] = print, nodes: int | None = None) -> TrialResult:
    """Start a job, inject ``fault`` on its second node once training is productive, follow it."""
    job = lab.submit(nodes=nodes or fault.nodes)
    try:
        return _follow(lab, fault, job, say)
    finally:
        lab.cancel(job)
        for node in NODES:
            if node not in lab.exporters:
                lab.start_exporter(node)


def _prepare(lab: Lab, fault: Fault, job: str, nodes: int) -> TrialResult:
    """Wait until ``job`` trains and has a checkpoint; aim the fault at its second node."""
    started = lab.wait_productive(job, 0, nodes, 12, timeout=120)
    placed = expand_hostlist(str((lab.squeue(job) or {}).get("nodes", "")))
    target = placed[1] if len(placed) > 1 else placed[0]
    result = TrialResult(fault.name, lab.mode, job, target, expected_action=fault.action)
    result.expected_nodes = [target] if fault.implicates_target else []
    result.checkpoint_step = lab.checkpoint_step(job)
    steps = lab.steps(job, 0)
    if steps:
        step, at = max(steps.values())
        result.trained_s, result.step_at_fault = time.time() - started, step
        result.step_s = (at - started) / (step - 12) if step > 12 else None
    return result


def _follow(lab: Lab, fault: Fault, job: str, say: Callable[[str], None]) -> TrialResult:
    result = _prepare(lab, fault, job, fault.nodes)
    t0 = time.time()
    say(f"  +{0:6.2f}s  inject {fault.name} on {result.target}: {fault.description}")
    result.events.append((0.0, f"inject {fault.name} on {result.target}: {fault.description}"))
    fault.inject(lab, job, result.target)
    return _observe(lab, fault, result, t0, say)


def run_two_jobs(lab: Lab, fault: Fault, say: Callable[[str], None] = print) -> list[TrialResult]:
    """Two 2-node jobs hit by ``fault`` at the same moment: each must get its own correct decision."""
    jobs = [lab.submit(nodes=2, name="train-a"), lab.submit(nodes=2, name="train-b")]
    try:
        results = [_prepare(lab, fault, job, 2) for job in jobs]
        t0 = time.time()
        for result in results:
            fault.inject(lab, result.job, result.target)
            result.fault = f"two_jobs_{fault.name}"
            result.events.append((0.0, f"inject {fault.name} on {result.target} (job {result.job})"))
        say(f"  +{0:6.2f}s  inject {fault.name} on " + " and ".join(f"{r.target} (job {r.job})" for r in results))
        return [_observe(lab, fault, result, t0, say) for result in results]
    finally:
        for job in jobs:
            lab.cancel(job)


def _observe(lab: Lab, fault: Fault, result: TrialResult, t0: float, say: Callable[[str], None]) -> TrialResult:
    job, target = result.job, result.target

    def event(what: str, when: float | None = None) -> None:
        at = (when or time.time()) - t0
        result.events.append((at, what))
        say(f"  +{at:6.2f}s  {what}")

    deadline = t0 + fault.timeout_s
    seen_alert = False
    decision: dict[str, Any] | None = None
    while time.time() < deadline:
        if not seen_alert:
            alerts = [a for a in lab.alerts(job) if a["received_at"] >= t0 - 1 and a["disposition"] == "evidence"]
            if alerts:
                first = alerts[0]
                seen_alert = True
                labels = first["labels"]
                result.first_alert = labels.get("alertname")
                result.detection_s = first["received_at"] - t0
                words = [
                    labels.get("alertname"),
                    f"[{labels.get('category')}]",
                    labels.get("pattern"),
                    f"rank {labels['rank']}" if labels.get("rank") else None,
                    "on",
                    labels.get("host", "?"),
                ]
                line = " ".join(str(w) for w in words if w)
                event(f"alert at the responder: {line}", first["received_at"])
        found = [d for d in lab.decisions(job) if d["attempt"] == "0"]
        if found:
            decision = found[-1]
            break
        time.sleep(0.1)
    if fault.action is None:
        result.decisions = len(lab.decisions(job))
        result.ok = result.decisions == 0
        result.note = "no decision, as it should be" if result.ok else "a decision on a healthy job"
        event(result.note)
        return result
    if decision is None:
        result.note = f"no decision within {fault.timeout_s:.0f}s"
        event(result.note)
        return result
    result.decisions = len(lab.decisions(job))
    decided = _ts(decision["decided_at"])
    received = _ts(decision["received_at"])
    if received is not None and decided is not None:
        result.decision_s = decided - received
    excluded = ",".join(decision["excluded_nodes"])
    event(f"decision: {decision['action']} {excluded} [{decision['mode']}] - {decision['reason']}", decided)
    if decision["outcome"] == "awaiting_approval":
        decision, result.approval_s = _approve(lab, job, decision, event)
    decision = _settled(lab, job, decision)
    result.action, result.outcome = decision["action"], decision["outcome"]
    result.implicated, result.excluded = decision["implicated_nodes"], decision["excluded_nodes"]
    acted = _ts(decision.get("acted_at"))
    if acted is not None and decided is not None:
        result.action_s = acted - decided - (result.approval_s or 0.0)  # the machine's time, the wait apart
        event(f"action {decision['outcome']}: {decision.get('detail', '')}", acted)
    result.ok = result.action == fault.action and sorted(result.implicated) == sorted(result.expected_nodes)
    if (
        lab.mode in ("act", "approve")
        and result.action in ("requeue", "requeue_excluding")
        and decision["outcome"] == "done"
    ):
        try:
            first_step = lab.wait_productive(job, 1, len(lab.steps(job, 0)), 0, timeout=90)
        except LabError as exc:
            result.ok = False
            result.note = str(exc)
            event(result.note)
        else:
            result.productive_s = first_step - t0
            resumed = min((s for s, _ in lab.steps(job, 1).values()), default=None)
            result.resumed_from_step = resumed
            placed = expand_hostlist(str((lab.squeue(job) or {}).get("nodes", "")))
            event(f"training productive again on {','.join(placed)} (attempt 1, from checkpoint step "
                  f"{result.checkpoint_step})", first_step)  # fmt: skip
            if fault.implicates_target and target in placed:
                result.ok = False
                result.note = f"restarted on the faulty node {target}"
    if fault.name == "node_loss":
        with contextlib.suppress(LabError):
            lab._run([str(ROOT / "slurm" / "lab.sh"), "start-node", target, str(lab.slurm_dir)])
    if fault.name == "hang":
        with contextlib.suppress(OSError, LabError):
            os.kill(_pid(lab, job, target), signal.SIGCONT)
    return result


def _approve(
    lab: Lab, job: str, decision: dict[str, Any], event: Callable[[str, float | None], None]
) -> tuple[dict[str, Any], float]:
    """Approve mode: the decision waits; the real ``trainguard approve`` (a subprocess) answers it after
    ``lab.approve_after_s``, or an operator does (``None``: console or CLI, within ``operator_wait_s``).
    The decision once answered, and the wait from its recording to the approval."""
    ident = decision["id"]
    event(f"decision {ident} waits for approval: trainguard approve {ident} "
          f"(or {lab.responder_url}/console/decisions/{ident})", None)  # fmt: skip
    said = None
    if lab.approve_after_s is None:
        fresh = _answered(lab, job, ident, lab.operator_wait_s)
    else:
        time.sleep(lab.approve_after_s)  # the operator reading the decision page
        argv = [TRAINGUARD, "approve", ident, "--by", "lab-demo", "--url", lab.responder_url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise LabError(f"trainguard approve {ident} failed ({done.returncode}): {done.stdout}{done.stderr}")
        said = f"$ trainguard approve {ident} --by lab-demo: {done.stdout.strip()}"
        fresh = _answered(lab, job, ident, 10)
    approval = fresh.get("approval") or {}
    if approval.get("state") != "approved":
        raise LabError(f"decision {ident} was not approved: {approval or fresh['outcome']}")
    at = approval.get("at")
    answered = float(at) if isinstance(at, int | float) else time.time()
    event(said or f"approved by {approval.get('by')} ({approval.get('identity')})", answered)
    return fresh, answered - (_ts(decision["decided_at"]) or answered)


def _answered(lab: Lab, job: str, ident: str, timeout: float) -> dict[str, Any]:
    """The decision ``ident`` once it no longer awaits approval (approved, rejected or expired)."""

    def check() -> dict[str, Any] | None:
        found = next((d for d in lab.decisions(job) if d["id"] == ident), None)
        return found if found is not None and found["outcome"] != "awaiting_approval" else None

    return wait(check, timeout, f"an answer to decision {ident} (trainguard approve {ident})", interval=0.2)  # type: ignore[no-any-return]


def _settled(lab: Lab, job: str, decision: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
    """The decision once its outcome is final (act mode writes ``pending`` before the scheduler acts)."""
    deadline = time.time() + timeout
    while decision["outcome"] == "pending" and time.time() < deadline:
        time.sleep(0.1)
        decision = next((d for d in lab.decisions(job) if d["id"] == decision["id"]), decision)
    return decision


def _ts(value: str | None) -> float | None:
    return parse_rfc3339(value) if value else None


def summarise(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"min": round(ordered[0], 3), "median": round(statistics.median(ordered), 3), "p95": round(p95, 3),
            "max": round(ordered[-1], 3), "n": len(ordered)}  # fmt: skip
