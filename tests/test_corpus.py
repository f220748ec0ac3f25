"""The real-world corpus (tests/data/corpus/): well-formed, split once, and the catalog's floors on the
reporting half, scored through exactly what ``trainguard patterns scan`` runs (exporters/evaluation.py).

The reporting half is never tuned on: the floors below are the issue's acceptance figures, measured on
excerpts no catalog row was written from."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from exporters.evaluation import CLASSES, Case, catalog_scanner, half, load_corpus, run, score

CORPUS = Path(__file__).parent / "data" / "corpus"
CASES = load_corpus(sorted(CORPUS.glob("*.jsonl")))


def test_corpus_is_large_and_varied_enough() -> None:
    classes = Counter(c.label for c in CASES)
    assert len(CASES) >= 300
    assert classes["benign"] >= 60
    assert set(classes) == set(CLASSES), "every class is represented"
    assert len({c.source for c in CASES}) >= 200, "cases come from many threads"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_is_well_formed(case: Case) -> None:
    assert re.fullmatch(r"[a-z0-9]+-[0-9]{3}", case.id)
    assert re.match(r"https?://\S+$", case.source)
    assert case.text.strip()
    assert len(case.text.splitlines()) <= 30
    for token in case.tokens:
        assert token in case.text, f"token {token!r} is not in the text"
    assert case.split == half(case.id), "a case's half follows from its id (scripts/corpus_split.py)"


def test_no_thread_dominates_and_no_text_repeats() -> None:
    per_source = Counter(c.source for c in CASES)
    assert max(per_source.values()) <= 3
    assert len({c.text for c in CASES}) == len(CASES)


def test_every_line_has_the_documented_fields() -> None:
    for path in sorted(CORPUS.glob("*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(raw)
            assert obj["label_basis"] in ("thread", "maintainer", "docs", "signature"), obj["id"]
            assert obj["cause"], obj["id"]


# The goal on the reporting half is recall >= 0.95, category accuracy >= 0.90 and benign false alarms
# <= 0.05 (bench/results/corpus.json says where we stand). These floors sit just under the measured figures,
# so that no change to the catalog or the scanner makes detection on real logs worse unnoticed. They went
# down when two fresh samples of 120 and 121 cases (files *2.jsonl) joined and 127 of them fell in this half,
# and again when a third of 240 (files *3.jsonl, 122 here) joined: its benign excerpts raised the false alarms
# above the 0.05 (its healthy runs print real error lines: scancel, expected kills, retried workers);
# and when a fourth of 217 (files *4.jsonl, 107 here; many from vendor docs and training logbooks) joined,
# and a fifth of 131 from HPC centre guides, framework docs and training logbooks (files *5.jsonl, 63 here).
# A sixth of 309 (files *6.jsonl, 157 here) scored better before use than the others, so they went up a step;
# a seventh of 201 (files *7.jsonl, 97 here) and an eighth of 34 (files *8.jsonl, 17 here) left them there.
# A ninth of 235 (files *9.jsonl, 117 here), gathered from less-mined repositories and docs, scored lowest
# before use (recall 0.63, category accuracy 0.47), so the category floor went down a step; a tenth of 234
# (files *10.jsonl, 112 here; newer stacks, non-English threads, HPC-centre and cloud docs) scored 0.68 / 0.56,
# and both floors went down another step; an eleventh of 68 (files *11.jsonl, 34 here; Kubernetes operators,
# multi-node serving, the newest core-framework threads) scored 0.54 / 0.36, and the recall floor followed.
# A twelfth of 341 (files *12.jsonl, 181 here; fabric libraries, fine-tuning frameworks, host and storage,
# pretraining stacks, NVIDIA's container and GPU tooling, other stacks, Q&A, schedulers) scored 0.68 / 0.51
# with false alarms 0.10, and all three followed it down a step; a thirteenth of 130 (files *13.jsonl, 72 here;
# model repositories, managed ML platforms, research code, half-benign threads) scored 0.77 / 0.63 / 0.12, and a
# fourteenth of 28 (mix14.jsonl, the search budget's last) 0.87 / 0.70 / 0. A fifteenth of 284 (files *15.jsonl,
# 144 here; Kubernetes GPU stack, serving, JAX and other non-PyTorch stacks, HPC centres, clouds, drivers,
# harmless lines, training frameworks) scored 0.69 / 0.55 / 0.07 and left them there, as did a sixteenth of 66
# (files *16.jsonl; forums, threads in Chinese, the newest stacks) at 0.81 / 0.68 / 0.08 and a seventeenth of 12
# (mix17.jsonl, the budget's last) at 0.80 / 0.14 / 0.5. An eighteenth of 233 (files *18.jsonl, 117 here; GPU,
# fabric, host, hang and application threads from less-mined repositories, forums, other accelerators) scored
# 0.79 / 0.52 / 0.15: its harmless lines raised the false alarms here to 0.093, and their ceiling went up a step.
# A nineteenth of 80 (files *19.jsonl, 39 here; committed logs, threads in Chinese, operators' node logs) scored
# 0.78 / 0.62 / 0.05 and left them there, as did a twentieth of 15 (docs20.jsonl, the budget's last) at
# 0.73 / 0.40 / 0. A twenty-first of 275 (files *21.jsonl, 139 here; other accelerators, fabric mailing lists,
# committed logs of healthy runs, hosts and schedulers, less-mined trainers, GPUs of three vendors) scored
# 0.65 / 0.53 / 0.08 and left them there, as did a twenty-second of 66 (files *22.jsonl, 37 here; MPI mailing lists
# and trackers, Kubernetes and cloud operators, JAX/XLA/TPU, committed logs) at 0.54 / 0.38 / 0, and a twenty-third
# of 16 (doc23.jsonl, forum23.jsonl; the search budget's last) at 0.69 / 0.58 / 0.
REGRESSION_FLOORS = {"recall": 0.73, "category_accuracy": 0.57}
BENIGN_FALSE_ALARMS_CEILING = 0.10


@pytest.mark.parametrize("engine", ["hyperscan", "re"])
def test_catalog_does_not_fall_below_its_measured_figures_on_the_reporting_half(engine: str) -> None:
    scan, precedence, _engine, _rows = catalog_scanner(engine)
    figures = score(run([c for c in CASES if c.split == "report"], scan, precedence))
    assert figures["benign_false_alarms"] <= BENIGN_FALSE_ALARMS_CEILING, figures
    for name, floor in REGRESSION_FLOORS.items():
        assert figures[name] >= floor, (name, figures[name], figures["confusion"])


def test_every_fresh_sample_file_names_the_catalog_that_first_scored_it() -> None:
    """The honest estimate (docs/patterns.md) is only checkable if bench/corpus_fresh.py knows, for every file
    that came in as a fresh sample (``*2.jsonl`` and later), which commit's catalog scored it before use."""
    from bench.corpus_fresh import SAMPLES  # noqa: PLC0415 - the bench's table, read only here

    listed = [stem for sample in SAMPLES for stem in sample.files]
    assert len(listed) == len(set(listed)), "a file in two samples"
    fresh = {p.stem for p in CORPUS.glob("*.jsonl") if p.stem[-1].isdigit()}
    assert fresh == set(listed)
