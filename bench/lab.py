"""The lab benchmark: real faults in real training, detect -> decide -> act -> productive again.

`make bench-quick`: one act-mode trial per fault class plus two healthy runs (about 6 minutes), to
bench/results/lab-quick.json. `make bench`: N trials per class in act mode and in monitor mode, to
bench/results/lab.json. Each file has the keys detection_latency_s, decision_latency_s,
action_latency_s, time_to_productive_s ({min, median, p95, max}), attribution_precision,
attribution_recall, false_actions_healthy, trials, machine, and a per-class breakdown; a Markdown
report with a plot goes beside it.

  detection: fault injected -> first alert of the incident at the responder
  decision:  that alert -> decision recorded (the 1 s correlation window included)
  action:    decision -> Slurm action verified by a fresh squeue (act mode)
  productive: fault -> first training step of the next attempt (act mode, requeue actions)
  goodput:   per class, goodput lost per incident (fault -> productive again + work since the checkpoint)
             and ETTR over the trials' observed spans (training before the fault through productive again)

The class `intermittent` (trainguard/lab/intermittent.py, full run or --classes) is a multi-attempt
trial: one node makes every attempt it is in time out on every rank; the responder must find it
through restarts. Every trial runs under that module's POLICY (restarts as experiments from the first
failure within 2 spare nodes, a clean run after 45 s, a probe restart after a clean run that settles
nothing).

`--corpus net-001,gpu-035` replays those cases of tests/data/corpus/*.jsonl as the target rank's real
log output (or its node's kernel log), one fault class `corpus:<id>` each, expected decision from the
case's class; alone it runs only those (to bench/results/lab-corpus.json), with --quick or --classes
beside the other classes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from responder import goodput
from trainguard.lab.faults import (
    CORPUS_PREFIX,
    FAULTS,
    QUICK,
    TrialResult,
    fault_named,
    load_corpus_case,
    run_trial,
    run_two_jobs,
    summarise,
)
from trainguard.lab.intermittent import BREAKER, POLICY, run_intermittent
from trainguard.lab.slurm import Lab, LabError, missing_requirements

ROOT = Path(__file__).resolve().parent.parent

SPECIAL = ("two_jobs", "intermittent")  # classes with their own runner (several jobs, several attempts)
TARGETS = {"detection": 2.0, "decision": 1.5, "action": 1.0, "productive": 30.0, "precision": 0.95, "recall": 0.95}


def attribution_scores(trials: list[TrialResult]) -> tuple[float | None, float | None]:
    """Node-level precision and recall of implicated nodes against each fault's truth."""
    tp = fp = fn = 0
    for t in trials:
        if t.fault == "healthy":
            continue
        truth, said = set(t.expected_nodes), set(t.implicated)
        tp += len(truth & said)
        fp += len(said - truth)
        fn += len(truth - said)
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    return precision, recall


def aggregate(trials: list[TrialResult]) -> dict[str, Any]:
    faults = [t for t in trials if t.fault != "healthy"]
    precision, recall = attribution_scores(trials)
    out: dict[str, Any] = {
        "detection_latency_s": summarise([t.detection_s for t in faults if t.detection_s is not None]),
        "decision_latency_s": summarise([t.decision_s for t in faults if t.decision_s is not None]),
        "action_latency_s": summarise([t.action_s for t in faults if t.action_s is not None]),
        "time_to_productive_s": summarise([t.productive_s for t in faults if t.productive_s is not None]),
        "attribution_precision": None if precision is None else round(precision, 3),
        "attribution_recall": None if recall is None else round(recall, 3),
        "correct_actions": sum(t.ok for t in faults),
        "fault_trials": len(faults),
        "false_actions_healthy": sum(t.decisions for t in trials if t.fault == "healthy"),
        "healthy_trials": sum(t.fault == "healthy" for t in trials),
        "goodput": goodput_summary(faults),
    }
    return out


def goodput_summary(faults: list[TrialResult]) -> dict[str, Any]:
    """Goodput lost per incident (fault -> productive again, plus the work since the checkpoint) and
    ETTR over the trials' observed spans (training before the fault through productive again)."""
    costs = [(t, goodput.incident(t.fault, 0.0, t.productive_s, t.step_at_fault, t.checkpoint_step, t.step_s))
             for t in faults]  # fmt: skip
    spanned = [(t, g) for t, g in costs if t.trained_s is not None and g.lost_s is not None]
    span = sum((t.trained_s or 0.0) + (t.productive_s or 0.0) for t, _ in spanned)
    ratio = goodput.ettr(span, [g for _, g in spanned]) if span > 0 else None
    return {
        "ettr": None if ratio is None else round(ratio, 3),
        "span_s": round(span, 1),
        "goodput_lost_s": summarise([g.lost_s for _, g in costs if g.lost_s is not None]),
        "time_lost_s": summarise([g.time_lost_s for _, g in costs if g.time_lost_s is not None]),
        "work_lost_s": summarise([g.work_lost_s for _, g in costs if g.work_lost_s is not None]),
        "lost_by_cause_s": {k: round(v, 1) for k, v in goodput.lost_by_cause(g for _, g in costs).items()},
        "attempts": sum(g.attempts for _, g in costs),
    }


def per_class(trials: list[TrialResult]) -> dict[str, Any]:
    classes: dict[str, list[TrialResult]] = {}
    for t in trials:
        classes.setdefault(f"{t.fault}/{t.mode}", []).append(t)
    return {name: aggregate(group) | {"trials": len(group)} for name, group in sorted(classes.items())}


def miss(t: TrialResult) -> str:
    return (
        f"{t.fault}/{t.mode} job {t.job}: got {t.action} on {t.implicated}, "
        f"expected {t.expected_action} on {t.expected_nodes}. {t.note}"
    )


HANG_FLOOR_S = 10.0  # alert_rules/profiles/fast.yml: trainguard:config:hang_floor_seconds
SLURMD_TIMEOUT_S = 10.0  # slurm/lab.sh: SlurmdTimeout


def notes(result: dict[str, Any]) -> list[str]:
    """Why some figures are what they are: thresholds and the scheduler's own delays."""
    out = [
        "decision ≈ 1 s in every class: the correlation window (1 s) that gathers evidence from the other "
        "ranks; the decision itself takes milliseconds.",
        "time to productive: ≈ 6 s is Slurm's minimum wait before a requeued job may start (cred_expire=5), "
        "≈ 5-8 s is three PyTorch processes starting on 2 cores (import torch, gloo rendezvous), the rest "
        "is resuming from the checkpoint.",
    ]
    for name, c in result.get("per_class", {}).items():
        det = c.get("detection_latency_s")
        if det and name.startswith("hang"):
            beyond = det["median"] - HANG_FLOOR_S
            out.append(f"{name}: detection includes the hang threshold (max of a {HANG_FLOOR_S:g} s floor and 10x "
                       f"the job's median step time); beyond it: {beyond:.2f} s (median).")  # fmt: skip
        if det and name.startswith("node_loss"):
            out.append(f"{name}: nothing on a lost node can report, so detection waits for Slurm to call the node "
                       f"not responding (SlurmdTimeout {SLURMD_TIMEOUT_S:g} s in the lab); beyond it: "
                       f"{det['median'] - SLURMD_TIMEOUT_S:.2f} s (median).")  # fmt: skip
        if det and name.startswith("straggler"):
            out.append(f"{name}: a straggler must persist (2-minute average above 1.5x the job's median, for "
                       "5 minutes) before anyone should act on it.")  # fmt: skip
    return out


def markdown(result: dict[str, Any], png: Path | None) -> str:
    def cell(stat: dict[str, float] | None) -> str:
        return "—" if not stat else f"{stat['median']:.2f} / {stat['p95']:.2f} / {stat['max']:.2f}"

    lines = [f"# trainguard lab benchmark ({result['run']})", "", f"{result['machine']['summary']}", "",
             "| class | trials | correct | detection | decision | action | productive | ETTR | goodput lost |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, c in result["per_class"].items():
        lines.append(
            f"| {name} | {c['trials']} | {c['correct_actions']}/{c['fault_trials']} | {cell(c['detection_latency_s'])} "
            f"| {cell(c['decision_latency_s'])} | {cell(c['action_latency_s'])} | {cell(c['time_to_productive_s'])} "
            f"| {_ettr(c)} | {cell(c.get('goodput', {}).get('goodput_lost_s'))} |"
        )
    lines += ["", "Cells: median / p95 / max seconds.", "", "| overall | value | target |", "| --- | --- | --- |"]
    for key, target in (("detection_latency_s", "median ≤ 2 s"), ("decision_latency_s", "median ≤ 1.5 s"),
                        ("action_latency_s", "median ≤ 1 s"), ("time_to_productive_s", "median ≤ 30 s")):  # fmt: skip
        lines.append(f"| {key} | {cell(result[key])} | {target} |")
    lines += [
        f"| attribution_precision | {result['attribution_precision']} | ≥ 0.95 |",
        f"| attribution_recall | {result['attribution_recall']} | ≥ 0.95 |",
        f"| ETTR (observed spans) | {_ettr(result)} | — |",
        f"| false_actions_healthy | {result['false_actions_healthy']} | 0 |",
    ]
    lines += ["", "## Where the time goes", ""] + [f"- {n}" for n in notes(result)]
    if result.get("misses"):
        lines += ["", "## Trials not as expected", ""] + [f"- {m}" for m in result["misses"]]
    if png is not None:
        lines += ["", f"![latencies]({png.name})"]
    return "\n".join(lines) + "\n"


def _ettr(c: dict[str, Any]) -> str:
    value = c.get("goodput", {}).get("ettr")
    return "—" if value is None else f"{value:.3f}"


def plot(trials: list[TrialResult], path: Path) -> Path | None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    faults = [t for t in trials if t.fault != "healthy" and t.detection_s is not None]
    if not faults:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.4 * len(faults)))
    for i, t in enumerate(faults):
        spans = [(0.0, t.detection_s, "#c0392b", "detection")]
        if t.decision_s is not None and t.detection_s is not None:
            spans.append((t.detection_s, t.decision_s, "#f39c12", "decision"))
            if t.action_s is not None:
                spans.append((t.detection_s + t.decision_s, t.action_s, "#27ae60", "action"))
        for start, width, colour, label in spans:
            if width is not None:
                ax.barh(i, width, left=start, color=colour, label=label if i == 0 else None)
        if t.productive_s is not None:
            ax.plot([t.productive_s], [i], "k|", markersize=12, label="productive" if i == 0 else None)
    ax.set_yticks(range(len(faults)), [f"{t.fault} ({t.mode})" for t in faults])
    ax.set_xlabel("seconds after the fault")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("trainguard lab: detection, decision, action, productive again")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one act-mode trial per class plus two healthy runs")
    parser.add_argument("--trials", type=int, default=3, help="trials per class and mode (full run)")
    parser.add_argument("--classes", nargs="*", help="only these fault classes")
    parser.add_argument("--corpus", metavar="ID[,ID...]", help="also replay these corpus cases (tests/data/corpus)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fast-path", action="store_true", help="exporters also post straight to Alertmanager")
    parser.add_argument("--report-only", type=Path, help="rewrite the Markdown report of an existing JSON result")
    args = parser.parse_args()
    if args.report_only:
        existing = json.loads(args.report_only.read_text())
        png = args.report_only.with_suffix(".png")
        args.report_only.with_suffix(".md").write_text(markdown(existing, png if png.exists() else None))
        return 0
    missing = missing_requirements()
    if missing:
        print("the lab benchmark needs:\n  - " + "\n  - ".join(missing), file=sys.stderr)
        return 2
    corpus = [f"{CORPUS_PREFIX}{i.strip()}" for i in (args.corpus or "").split(",") if i.strip()]
    try:
        faults = {c: fault_named(c) for c in [*(args.classes or []), *corpus] if c not in SPECIAL}
        cases = [load_corpus_case(c.removeprefix(CORPUS_PREFIX)) for c in faults if c.startswith(CORPUS_PREFIX)]
    except LabError as exc:
        parser.error(str(exc))
    name = "lab-quick" if args.quick else "lab-corpus" if corpus and not args.classes else "lab"
    out = args.out or ROOT / "bench" / "results" / f"{name}.json"
    if args.quick:
        plan = [(c, "act") for c in (args.classes or [*QUICK, "two_jobs"]) + corpus]
        plan += [("healthy", "act"), ("healthy", "act")]
    elif corpus and not args.classes:
        plan = [(c, "act") for c in corpus for _ in range(args.trials)]
    else:
        classes = (args.classes or [*(c for c in FAULTS if c != "healthy"), *SPECIAL]) + corpus
        plan = [
            (c, m)
            for m in ("act", "monitor")
            for c in classes
            for _ in range(args.trials)
            if not (c == "intermittent" and m == "monitor")
        ]  # a planned split never runs: act mode only
        plan += [("healthy", m) for m in ("act", "monitor") for _ in range(args.trials)]
    trials: list[TrialResult] = []
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    lab = Lab(
        workdir, mode="act", fast_path=args.fast_path, policy=POLICY, breaker=BREAKER,
        say=lambda m: print(f"[lab] {m}", flush=True),
    )  # fmt: skip
    try:
        with lab.running():
            for i, (fault, mode) in enumerate(plan, 1):
                if lab.mode != mode:
                    lab.set_mode(mode)
                print(f"\n[{i}/{len(plan)}] {fault} ({mode} mode), {time.monotonic() - started:.0f}s elapsed",
                      flush=True)  # fmt: skip
                if fault == "two_jobs":
                    trials += run_two_jobs(lab, FAULTS["xid"], say=lambda m: print(m, flush=True))
                elif fault == "intermittent":
                    trials.append(run_intermittent(lab, say=lambda m: print(m, flush=True)))
                else:
                    chosen = faults.get(fault) or FAULTS[fault]
                    trials.append(run_trial(lab, chosen, say=lambda m: print(m, flush=True)))
                time.sleep(6)  # keep consecutive trials outside the breaker's correlation window
    except LabError as exc:
        print(f"lab error: {exc}", file=sys.stderr)
        if not trials:
            return 1
    result: dict[str, Any] = {
        "benchmark": "lab",
        "run": name,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        **aggregate(trials),
        "targets": TARGETS,
        "trials": len(trials),
        "fast_path": args.fast_path,
        "wall_s": round(time.monotonic() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "summary": f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
            "Slurm lab of 4 slurmd on one host, Prometheus/Alertmanager fast profile",
        },
        "per_class": per_class(trials),
        "corpus": [
            {
                "id": c.id,
                "class": c.cls,
                "family": c.family,
                "source": c.source,
                "fault": f"{CORPUS_PREFIX}{c.id}",
                "expected_action": faults[f"{CORPUS_PREFIX}{c.id}"].action,
            }
            for c in cases
        ],
        "notes": [],
        "misses": [miss(t) for t in trials if not t.ok],
        "trial_results": [t.as_json() for t in trials],
    }
    result["notes"] = notes(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    png = plot(trials, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(markdown(result, png))
    print(f"\nwrote {out} and {out.with_suffix('.md')}")
    print(markdown(result, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
