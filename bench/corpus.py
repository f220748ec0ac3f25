"""Detection on real logs: the catalog scored on the real-world corpus (tests/data/corpus/).

    .venv/bin/python bench/corpus.py                 # both halves; bench/results/corpus.{json,md}
    .venv/bin/python bench/corpus.py --split tune    # print the tuning half's mistakes (catalog work)

Every excerpt runs through exactly what ``trainguard patterns scan`` runs. The figures that count are the
reporting half's (the catalog was tuned on the other half only); floors on them are enforced by
tests/test_corpus.py. Definitions: exporters/evaluation.py. Only the tuning half's mistakes can be printed,
and the results carry the reporting half's figures only in aggregate (per category and the confusion
matrix), so that nobody writes a row from a reporting-half case by accident (docs/patterns.md, protocol).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from exporters.evaluation import CATEGORIES, CLASSES, NONE, catalog_scanner, load_corpus, mistakes, run, score

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
RESULTS = ROOT / "bench" / "results"


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Detection on real logs (`bench/corpus.py`)", ""]
    lines.append(
        f"Catalog: {result['catalog_rows']} rows, engine `{result['engine']}`. Corpus: "
        f"{result['corpus']['cases']} excerpts from {result['corpus']['sources']} sources."
    )
    lines += ["", "| half | cases | recall | category accuracy | benign false alarms |", "|---|---|---|---|---|"]
    for name in ("report", "tune", "all"):
        s = result["splits"][name]
        figures = (s["cases"], s["recall"], s["category_accuracy"], s["benign_false_alarms"])
        lines.append(f"| {name} | " + " | ".join(str(f) for f in figures) + " |")
    rep = result["splits"]["report"]
    for name in ("report", "tune"):
        lines += [
            "",
            f"{'Reporting' if name == 'report' else 'Tuning'} half, per category:",
            "",
            "| category | cases | recall | accuracy | precision |",
            "|---|---|---|---|---|",
        ]
        for cat in CATEGORIES:
            c = result["splits"][name]["per_category"][cat]
            lines.append(f"| {cat} | {c['cases']} | {c['recall']} | {c['accuracy']} | {c['precision']} |")
    cols = [*CATEGORIES, NONE]
    lines += [
        "",
        "Reporting half, confusion (rows: label, columns: verdict):",
        "",
        "| label | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for label in CLASSES:
        row = rep["confusion"].get(label)
        if row:
            lines.append(f"| {label} | " + " | ".join(str(row.get(c, 0)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--split", choices=("tune",), help="only print the tuning half's mistakes (the reporting half's are not shown)"
    )
    parser.add_argument("--engine", choices=("auto", "hyperscan", "re"), default="auto")
    args = parser.parse_args(argv)
    cases = load_corpus(sorted(CORPUS.glob("*.jsonl")))
    scanner, precedence, engine, rows = catalog_scanner(args.engine)
    t0 = time.perf_counter()
    outcomes = run(cases, scanner, precedence)
    elapsed = time.perf_counter() - t0
    if args.split:
        for wrong in mistakes([o for o in outcomes if o.case.split == args.split]):
            print(json.dumps(wrong))
        return 0
    result: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "engine": engine,
        "catalog_rows": rows,
        "corpus": {
            "cases": len(cases),
            "sources": len({c.source for c in cases}),
            "by_class": {k: sum(1 for c in cases if c.label == k) for k in CLASSES},
        },
        "scan_seconds": round(elapsed, 3),
        "splits": {
            "report": score([o for o in outcomes if o.case.split == "report"]),
            "tune": score([o for o in outcomes if o.case.split == "tune"]),
            "all": score(outcomes),
        },
        "floors": {"recall": 0.95, "category_accuracy": 0.90, "benign_false_alarms": 0.05},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "corpus.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "corpus.md").write_text(_markdown(result))
    rep = result["splits"]["report"]
    print(
        f"reporting half: recall {rep['recall']}, category accuracy {rep['category_accuracy']}, "
        f"benign false alarms {rep['benign_false_alarms']} ({rep['cases']} cases)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
