"""Reports of lab runs: a Markdown page and a PNG timeline (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainguard.lab.faults import TrialResult


def timeline_png(trial: TrialResult, path: Path) -> Path | None:
    """One trial's events on a time axis, seconds after the fault; None without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    events = trial.events
    fig, ax = plt.subplots(figsize=(11, 0.6 + 0.45 * len(events)))
    for i, (t, what) in enumerate(events):
        y = len(events) - i
        ax.plot([t], [y], "o", color="#c0392b" if i == 0 else "#2c3e50")
        ax.annotate(f"{t:+.2f}s  {what[:95]}", (t, y), xytext=(8, -4), textcoords="offset points", fontsize=8)
    spans = [("detection", 0.0, trial.detection_s), ("to productive", 0.0, trial.productive_s)]
    for label, start, end in spans:
        if end is not None:
            ax.axvspan(start, end, alpha=0.06 if label == "to productive" else 0.15, color="#2980b9")
    right = max((t for t, _ in events), default=1.0)
    ax.set_xlim(-1, right * 1.9 + 5)
    ax.set_ylim(0, len(events) + 1)
    ax.set_yticks([])
    ax.set_xlabel("seconds after the fault was injected")
    ax.set_title(f"trainguard lab: {trial.fault} on {trial.target} (job {trial.job}, {trial.mode} mode)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def trial_markdown(trial: TrialResult, record: dict[str, Any] | None, png: Path | None) -> str:
    lines = [
        f"# trainguard lab: {trial.fault} on {trial.target}",
        "",
        f"Job {trial.job}, responder in **{trial.mode}** mode. Verdict: "
        f"{'as expected' if trial.ok else 'NOT as expected'}{f' ({trial.note})' if trial.note else ''}.",
        "",
        "| measure | seconds |",
        "| --- | --- |",
        f"| detection (fault injected → alert at the responder) | {_s(trial.detection_s)} |",
        f"| decision (alert → decision recorded, correlation window included) | {_s(trial.decision_s)} |",
        f"| action (decision → Slurm action verified) | {_s(trial.action_s)} |",
        f"| time to productive (fault → first training step of the next attempt) | {_s(trial.productive_s)} |",
        *(
            [
                f"| of which the approval wait (decision → operator's approval) | {_s(trial.approval_s)} |",
                f"| time to productive without the approval wait | {_s(trial.productive_s - trial.approval_s)} |",
            ]
            if trial.approval_s is not None and trial.productive_s is not None
            else []
        ),
        "",
        "## Timeline",
        "",
        "| t | event |",
        "| --- | --- |",
    ]
    lines += [f"| +{t:.2f}s | {what} |" for t, what in trial.events]
    if png is not None:
        lines += ["", f"![timeline]({png.name})"]
    if record is not None:
        keep = ("id", "time", "cluster", "workload", "attempt", "incident_id", "patterns", "failure_class",
                "implicated_nodes", "action", "excluded_nodes", "mode", "outcome", "reason", "detected_at",
                "received_at", "decided_at", "acted_at", "detail", "verified")  # fmt: skip
        lines += ["", "## Audit record", "", "```"]
        lines += [f"{k}: {record.get(k)}" for k in keep]
        lines += ["attribution:"] + [f"  - {x}" for x in record.get("attribution", {}).get("explanation", [])]
        lines += ["driven by:"] + [f"  - {x}" for x in driving_signals(record)]
        lines += ["```"]
    return "\n".join(lines) + "\n"


HARD = ("infra_gpu", "infra_node", "node_lost")


def driving_signals(record: dict[str, Any]) -> list[str]:
    """The evidence on the implicated nodes that counts as hard (docs/decisions.md), node-level
    signals (a kernel-log XID: no rank) first: one line each, what the demo says drove the decision."""
    implicated = set(record.get("implicated_nodes") or [])
    found = []
    for item in record.get("evidence") or []:
        labels = item.get("labels", {})
        if labels.get("category") in HARD and labels.get("host") in implicated:
            source = "kernel log, node level" if not labels.get("rank") else f"rank {labels['rank']}'s log"
            line = f"{labels.get('alertname')} {labels.get('pattern', '')} on {labels.get('host')} ({source})"
            found.append((bool(labels.get("rank")), line))
    return [line for _, line in sorted(set(found))]


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"
