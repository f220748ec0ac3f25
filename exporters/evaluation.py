"""Scoring the catalog on labelled real-world excerpts (the corpus in ``tests/data/corpus/``).

An excerpt is a few lines a user posted with a failure report, labelled by what the thread concluded:
one of the five categories, ``benign`` (scary-looking lines from a healthy run) or ``unknown`` (a failure
nobody explained). The excerpt runs through exactly what ``trainguard patterns scan`` runs; its *verdict*
is the object of the highest-precedence row (the catalog's order: specific causes first), which is also
the cause the exporter's alerts lead with. We report:

- recall: failing excerpts (any class but ``benign``) in which the scan names anything;
- category accuracy: excerpts of the five categories whose verdict has their category;
- benign false alarms: benign excerpts in which the scan names anything;
- per category: recall, accuracy and precision (of excerpts given that verdict, how many carry it),
  and the confusion matrix of label against verdict.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from exporters.patterns import Matcher, load_catalog
from exporters.patterns_cli import scan_stream
from exporters.rows import Pattern
from trainguard.vocabulary import LOG_CATEGORIES

CATEGORIES: Final = LOG_CATEGORIES
CLASSES: Final = (*LOG_CATEGORIES, "benign", "unknown")
SPLITS: Final = ("tune", "report")
NONE: Final = "none"  # the verdict when the scan names nothing
FIELDS: Final = ("id", "source", "title", "text", "class", "family", "tokens", "cause", "label_basis", "split")

# One scanned object of ``trainguard patterns scan``: {"line", "pattern", "category", "rank"?, "host"?, ...}
ScanObject = dict[str, Any]
Scanner = Callable[[str], list[ScanObject]]


class CorpusError(ValueError):
    """A corpus file is malformed; the message names the file, the line and the field."""


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    source: str
    text: str
    label: str
    family: str
    tokens: tuple[str, ...]
    split: str


@dataclass(frozen=True, slots=True)
class Outcome:
    case: Case
    objects: tuple[ScanObject, ...]
    verdict: str  # category of the highest-precedence object, or NONE
    first: str  # category of the earliest object, or NONE


def half(case_id: str) -> str:
    """The corpus half a case belongs to, from its id alone (even first byte of its SHA-256: ``tune``), so
    nobody chooses where a case lands and adding cases never moves an old one."""
    return "tune" if hashlib.sha256(case_id.encode()).digest()[0] % 2 == 0 else "report"


def load_corpus(paths: Iterable[Path]) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for path in paths:
        for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip():
                continue
            where = f"{path.name} line {lineno}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{where}: not JSON: {exc.msg}") from exc
            missing = [f for f in FIELDS if f not in obj]
            if missing:
                raise CorpusError(f"{where}: missing {', '.join(missing)}")
            if obj["class"] not in CLASSES:
                raise CorpusError(f"{where}: class {obj['class']!r} is not one of {CLASSES}")
            if obj["split"] not in SPLITS:
                raise CorpusError(f"{where}: split {obj['split']!r} is not one of {SPLITS}")
            if obj["id"] in seen:
                raise CorpusError(f"{where}: id {obj['id']!r} appears twice")
            seen.add(obj["id"])
            cases.append(
                Case(
                    obj["id"],
                    obj["source"],
                    obj["text"],
                    obj["class"],
                    obj["family"],
                    tuple(obj["tokens"]),
                    obj["split"],
                )
            )
    return cases


def verdict_of(objects: Sequence[ScanObject], precedence: dict[str, int]) -> tuple[str, str]:
    """(verdict, first): the category of the highest-precedence object and of the earliest one."""
    if not objects:
        return NONE, NONE
    best = min(objects, key=lambda o: (precedence.get(str(o["pattern"]), len(precedence)), int(o["line"])))
    first = min(objects, key=lambda o: int(o["line"]))
    return str(best["category"]), str(first["category"])


def run(cases: Iterable[Case], scan: Scanner, precedence: dict[str, int]) -> list[Outcome]:
    outcomes = []
    for case in cases:
        objects = tuple(scan(case.text))
        verdict, first = verdict_of(objects, precedence)
        outcomes.append(Outcome(case, objects, verdict, first))
    return outcomes


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def score(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The figures of the module docstring, for one set of outcomes."""
    failing = [o for o in outcomes if o.case.label != "benign"]
    categorised = [o for o in outcomes if o.case.label in CATEGORIES]
    benign = [o for o in outcomes if o.case.label == "benign"]
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        confusion[o.case.label][o.verdict] += 1
    predicted = Counter(o.verdict for o in outcomes)
    per_category = {}
    for cat in CATEGORIES:
        labelled = [o for o in outcomes if o.case.label == cat]
        per_category[cat] = {
            "cases": len(labelled),
            "recall": _ratio(sum(1 for o in labelled if o.objects), len(labelled)),
            "accuracy": _ratio(sum(1 for o in labelled if o.verdict == cat), len(labelled)),
            "precision": _ratio(confusion[cat][cat], predicted[cat]),
        }
    return {
        "cases": len(outcomes),
        "failing": len(failing),
        "benign": len(benign),
        "recall": _ratio(sum(1 for o in failing if o.objects), len(failing)),
        "category_accuracy": _ratio(sum(1 for o in categorised if o.verdict == o.case.label), len(categorised)),
        "category_accuracy_first_object": _ratio(
            sum(1 for o in categorised if o.first == o.case.label), len(categorised)
        ),
        "category_in_any_object": _ratio(
            sum(1 for o in categorised if any(x["category"] == o.case.label for x in o.objects)), len(categorised)
        ),
        "benign_false_alarms": _ratio(sum(1 for o in benign if o.objects), len(benign)),
        "per_category": per_category,
        "confusion": {label: dict(confusion[label]) for label in CLASSES if label in confusion},
    }


def mistakes(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """The excerpts scored wrong, with what the scan said: where a catalog row is missing or misplaced."""
    wrong = []
    for o in outcomes:
        label = o.case.label
        ok = (not o.objects) if label == "benign" else bool(o.objects) if label == "unknown" else o.verdict == label
        if not ok:
            wrong.append(
                {
                    "id": o.case.id,
                    "class": label,
                    "verdict": o.verdict,
                    "patterns": [x["pattern"] for x in o.objects],
                    "source": o.case.source,
                }
            )
    return wrong


def catalog_scanner(
    engine: str = "auto", catalog: list[Pattern] | None = None
) -> tuple[Scanner, dict[str, int], str, int]:
    """(scanner, precedence, engine name, rows) for the installed catalog (or ``catalog``, e.g. an older one
    out of git), through the very function that ``trainguard patterns scan`` writes its JSON lines with.
    ``engine``: ``auto``, ``hyperscan`` or ``re``."""
    catalog = load_catalog() if catalog is None else catalog
    matcher = Matcher(catalog, None if engine == "auto" else engine)

    def scan(text: str) -> list[ScanObject]:
        out = io.StringIO()
        scan_stream(matcher, io.BytesIO(text.encode("utf-8")), out)
        return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]

    return scan, {p.id: i for i, p in enumerate(catalog)}, matcher.engine.name, len(catalog)
