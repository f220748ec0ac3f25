"""Assign the real-log corpus to its tuning and reporting halves, once.

    .venv/bin/python scripts/corpus_split.py            # give every case without a split one; rewrite the files
    .venv/bin/python scripts/corpus_split.py --check    # exit 1 if a case has no split (CI's guard)

A case's half follows from a hash of its id alone (even: ``tune``, odd: ``report``), so nobody chooses
where a case lands, the rule gives the same answer before and after other cases are added, and a case
that already has a split keeps it: the reporting half is never re-drawn after someone has looked at the
results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from exporters.evaluation import half

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"


def assign(cases: list[dict[str, object]]) -> int:
    """Give a split to every case that lacks one; returns how many were assigned."""
    assigned = 0
    for case in cases:
        if case.get("split") not in ("tune", "report"):
            case["split"] = half(str(case["id"]))
            assigned += 1
    return assigned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that every case has a split")
    args = parser.parse_args(argv)
    files = sorted(CORPUS.glob("*.jsonl"))
    by_file = {
        path: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for path in files
    }
    everything = [case for cases in by_file.values() for case in cases]
    if args.check:
        missing = [str(c["id"]) for c in everything if c.get("split") not in ("tune", "report")]
        if missing:
            print(f"cases without a split: {', '.join(missing[:20])}", file=sys.stderr)
            return 1
        return 0
    assigned = assign(everything)
    for path, cases in by_file.items():
        path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
    print(f"{assigned} cases assigned; {len(everything)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
