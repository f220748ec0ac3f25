"""`make demo`: trainguard end to end on a real stack, in about a minute.

Starts a 4-node Slurm cluster, one trainguard exporter per node, Prometheus and Alertmanager (fast
profile) and the responder in act mode for cluster `lab`; runs real distributed training (PyTorch,
gloo, 3 ranks on 3 nodes, checkpoints every 10 steps); injects a GPU fault (XID 79 in node n2's
kernel log, its rank dies with a CUDA error); and shows detection -> attribution -> requeue excluding
n2 -> training resumed from the last checkpoint. Ends with the timeline, the audit record and a
report (Markdown + PNG) under the output directory, and tears everything down.

--mode approve: the decision waits for an operator; the demo shows it pending, then answers it with the
real `trainguard approve ID` (a subprocess, after --approve-after seconds) or, with --operator, waits for
you to run that command or press Approve on the console. Time to productive is reported with the
approval wait apart. --mode monitor: the decision is only recorded.

Needs root and the Debian packages slurm-wlm, munge, prometheus, prometheus-alertmanager, plus torch
in the virtualenv (`make install-lab` brings them); it says exactly what is missing otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from trainguard.lab.faults import CORPUS_PREFIX, FAULTS, TrialResult, fault_named, run_trial
from trainguard.lab.keep import keep, stop
from trainguard.lab.report import driving_signals, timeline_png, trial_markdown
from trainguard.lab.slurm import Lab, LabError, missing_requirements

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", default="xid", metavar="FAULT",
                        help=f"fault to inject: {', '.join(sorted(FAULTS))}, or {CORPUS_PREFIX}<case id> to replay "
                        "a case of tests/data/corpus/*.jsonl as the rank's own log output (default xid)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "demo-output", help="where the report goes")
    parser.add_argument(
        "--mode",
        choices=["act", "approve", "monitor"],
        default="act",
        help="the responder's mode for the lab cluster (default act; make demo MODE=approve)",
    )
    parser.add_argument(
        "--approve-after",
        type=float,
        default=5.0,
        metavar="S",
        help="approve mode: run `trainguard approve ID` this long after the decision (default 5)",
    )
    parser.add_argument(
        "--operator",
        action="store_true",
        help="approve mode: wait (up to 10 min) for you to approve, on the console or with the CLI",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=19400,
        metavar="PORT",
        help="first of the lab's ports (responder; +1.. exporters, +10 Prometheus, +11 "
        "Alertmanager, +20.. and +30 Slurm; default 19400)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the lab running (make demo KEEP=1)")
    parser.add_argument("--stop", action="store_true", help="end a lab left by --keep (make demo-stop)")
    args = parser.parse_args()
    state = args.out / "lab.json"
    if args.stop:
        if not state.exists():
            print(f"no kept lab: {state} does not exist", file=sys.stderr)
            return 1
        print(f"ended {len(stop(state))} lab processes and the Slurm lab")
        return 0
    try:
        fault = fault_named(args.fault)
    except LabError as exc:
        parser.error(str(exc))
    missing = missing_requirements()
    if missing:
        print("make demo cannot run the real stack on this machine. Missing:", file=sys.stderr)
        for item in missing:
            print(f"  - {item}", file=sys.stderr)
        print("`make install-lab` (as root) installs the packages; `make demo-replay` needs none of them.",
              file=sys.stderr)  # fmt: skip
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-lab-"))
    lab = Lab(workdir, mode=args.mode, port_base=args.port_base, say=lambda m: print(f"[lab] {m}", flush=True),
              approve_after_s=None if args.operator else args.approve_after)  # fmt: skip
    started = time.monotonic()
    kept = False
    try:
        lab.up()
        print(f"[lab] stack up in {time.monotonic() - started:.1f}s; logs and state under {workdir}")
        print(f"[lab] submitting a 3-node training job; injecting '{args.fault}' once it has a checkpoint\n")
        trial = run_trial(lab, fault, say=lambda m: print(m, flush=True))
        records = lab.decisions(trial.job)
        record = records[-1] if records else None
        if args.keep:
            urls = keep(lab, state)
            kept = True
    except LabError as exc:
        print(f"\nlab error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not kept:
            lab.down()
    args.out.mkdir(parents=True, exist_ok=True)
    png = timeline_png(trial, args.out / "timeline.png")
    (args.out / "report.md").write_text(trial_markdown(trial, record, png))
    (args.out / "trial.json").write_text(json.dumps({"trial": trial.as_json(), "record": record}, indent=2))
    print("\nsummary")
    for label, value in summary(trial):
        print(f"  {label:<42} {'—' if value is None else f'{value:.2f}s'}")
    if record is not None:
        print("\naudit record")
        for key in ("id", "incident_id", "patterns", "failure_class", "implicated_nodes", "action",
                    "excluded_nodes", "mode", "outcome", "reason", "detail", "approval"):  # fmt: skip
            if key == "approval" and not record.get(key):
                continue
            print(f"  {key:<17} {record.get(key)}")
        print("\nsignals that drove the decision (hard evidence on the implicated node)")
        for line in driving_signals(record) or ["none"]:
            print(f"  {line}")
    print(f"\nreport: {args.out / 'report.md'}" + (f", timeline plot: {png}" if png else ""))
    if kept:
        print("\nthe lab keeps running: " + ", ".join(f"{k} {v}" for k, v in urls.items()))
        default_out = args.out.resolve() == (ROOT / "demo-output").resolve()
        print("end it with: " + ("make demo-stop" if default_out else f"{sys.argv[0]} --stop --out {args.out}"))
    print("as expected" if trial.ok else f"NOT as expected: {trial.note}")
    return 0 if trial.ok else 1


def summary(trial: TrialResult) -> list[tuple[str, float | None]]:
    """The demo's figures; in approve mode the operator's wait apart from the machine's time."""
    rows = [("detection", trial.detection_s), ("decision", trial.decision_s), ("action", trial.action_s),
            ("time to productive", trial.productive_s)]  # fmt: skip
    if trial.approval_s is not None:
        without = None if trial.productive_s is None else trial.productive_s - trial.approval_s
        rows += [("  of which the approval wait", trial.approval_s), ("  without the approval wait", without)]
    return rows


if __name__ == "__main__":
    sys.exit(main())
