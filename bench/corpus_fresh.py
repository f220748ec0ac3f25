"""The fresh samples, re-scored with the catalogs they were first scored with, from git history.

    .venv/bin/python bench/corpus_fresh.py       # bench/results/corpus-fresh.json (needs the git history)

Each fresh sample was gathered by people who did not run the catalog, scored once with the catalog of the
day, and only then joined the corpus (both halves) and had rows written from its tuning half. Those first
scores are the honest estimate for logs nobody has seen (docs/patterns.md). This script makes them
checkable: it takes each recorded commit's ``patterns.csv`` and ``xid_catalog.csv`` out of git and scores
the sample's corpus files with them, through today's scanner. Two things make a figure differ a little from
the one first measured: cases dropped later for repeating another case's text, and scanner changes since.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporters.catalog import load_catalog
from exporters.evaluation import CATEGORIES, Scanner, catalog_scanner, load_corpus, run, score

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Sample:
    name: str
    files: tuple[str, ...]  # corpus file stems
    before: str  # the commit whose catalog scored it before any row was written from it
    also: tuple[str, ...] = ()  # other catalogs it was scored with, all before its own rows were written


@dataclass(frozen=True)
class Scanned:
    scan: Scanner
    precedence: dict[str, int]
    rows: int


SAMPLES: tuple[Sample, ...] = (
    Sample("1", ("gpu2", "network2", "app2"), "600080d"),
    Sample("2 (hpc)", ("hpc2",), "05742fc"),
    Sample("2 (cloud, frameworks)", ("cloud2", "frameworks2"), "21e976a"),
    Sample("3", ("gpu3", "network3", "node3", "app3", "dist3", "cluster3"), "40d5242"),
    Sample("4", ("gpu4", "network4", "node4", "app4", "infer4", "forum4"), "40d5242", ("a96acf4",)),
    Sample("5", ("docs5", "hpc5", "logbook5", "chronicles5"), "7e8e0ad", ("40d5242", "a96acf4")),
    Sample("6", ("app6", "benign6", "cloud6", "dist6", "gpu6", "mixed6", "network6", "node6"), "c880510"),
    Sample("7", ("code7", "coll7", "infra7", "misc7", "sched7"), "a245951", ("c880510",)),
    Sample("8", ("repos8", "infra8"), "15c4b0a", ("a245951",)),
    Sample("9", ("app9", "fw9", "gpu9", "hang9", "host9", "mix9", "net9"), "101abc1", ("08ac358",)),
    Sample("10", ("cloud10", "cn10", "hpc10", "ops10", "pre10", "rl10", "torch10"), "e4d34e3", ("101abc1",)),
    Sample("11", ("core11", "kube11", "serve11"), "bced046", ("e4d34e3", "101abc1")),
    Sample("12", ("fab12", "ft12", "host12", "meg12", "nvf12", "oth12", "qa12", "sch12"), "ee24f3d", ("101abc1",)),
    Sample("13", ("ben13", "mdl13", "mlp13", "res13"), "b81ce52", ("ee24f3d",)),
    Sample("14", ("mix14",), "78dd6c9", ("ee24f3d",)),
    Sample("15", ("ben15", "cld15", "drv15", "hpc15", "jax15", "kop15", "srv15", "trn15"), "5a0bf19", ("ee24f3d",)),
    Sample("16", ("frm16", "intl16", "new16"), "a8a4a92", ("5a0bf19",)),
    Sample("17", ("mix17",), "469dd99", ("5a0bf19",)),
    Sample("18", ("app18", "coll18", "frm18", "gpu18", "mix18", "net18", "node18"), "a070ea9", ("5a0bf19",)),
    Sample("19", ("intl19", "logs19", "ops19"), "32d8b6a", ("a070ea9", "63fdc27")),
    Sample("20", ("docs20",), "12b42e4", ("a070ea9",)),
    Sample("21", ("acc21", "app21", "gpu21", "hang21", "net21", "node21"), "d2c925b", ("a070ea9",)),
    Sample("22", ("log22", "mpi22", "ops22", "xla22"), "8a9d0bc", ("d2c925b",)),
    Sample("23", ("doc23", "forum23"), "2f7fe2c", ("d2c925b",)),
)


def scanner_at(commit: str, workdir: Path) -> Scanned:
    """Today's scanner over the catalog as ``commit`` shipped it (patterns and Xid table)."""
    out = workdir / commit
    out.mkdir(exist_ok=True)
    for name in ("patterns.csv", "xid_catalog.csv"):
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:exporters/{name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (out / name).write_text(text, encoding="utf-8")
    scan, precedence, _engine, rows = catalog_scanner(
        "auto", load_catalog(out / "patterns.csv", out / "xid_catalog.csv")
    )
    return Scanned(scan, precedence, rows)


def _figures(scanned: Scanned, files: Sequence[str]) -> dict[str, Any]:
    cases = load_corpus([CORPUS / f"{stem}.jsonl" for stem in files])
    s = score(run(cases, scanned.scan, scanned.precedence))
    keep = ("cases", "failing", "benign", "recall", "category_accuracy", "benign_false_alarms", "confusion")
    out = {k: s[k] for k in keep}
    out["rows"] = scanned.rows
    out["per_category_recall"] = {c: s["per_category"][c]["recall"] for c in CATEGORIES}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "corpus-fresh.json")
    args = parser.parse_args(argv)
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        cache: dict[str, Scanned] = {}  # one compiled catalog per commit, for every sample it scores
        for sample in SAMPLES:
            scored = {}
            for commit in (sample.before, *sample.also):
                if commit not in cache:
                    cache[commit] = scanner_at(commit, Path(tmp))
                scored[commit] = _figures(cache[commit], sample.files)
            first = scored[sample.before]
            print(
                f"sample {sample.name}: {first['cases']} cases, catalog {sample.before} ({first['rows']} rows): "
                f"recall {first['recall']}, category accuracy {first['category_accuracy']}, "
                f"benign false alarms {first['benign_false_alarms']}",
                file=sys.stderr,
            )
            samples.append(
                {"sample": sample.name, "files": list(sample.files), "before": sample.before, "scores": scored}
            )
    result = {
        "benchmark": "corpus-fresh",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "samples": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
