"""The structure rules of ``scripts/check_structure.py`` hold for responder/ (exporters/ has an allow-list)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "check_structure", Path(__file__).resolve().parent.parent / "scripts" / "check_structure.py"
)
assert _SPEC is not None
assert _SPEC.loader is not None
check_structure = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check_structure)


def test_responder_keeps_its_sizes_and_a_one_way_acyclic_import_graph() -> None:
    found = [f for f in check_structure.findings() if not f.startswith("exporters/")]
    assert found == []


def test_a_cycle_is_found() -> None:
    assert check_structure.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_are_assigned_by_the_longest_prefix() -> None:
    assert check_structure.layer("responder.schedulers.base") == "domain"
    assert check_structure.layer("responder.schedulers.slurm.adapter") == "adapter"
    assert check_structure.layer("responder.store") == "domain"
    assert check_structure.layer("responder.store.sqlite") == "adapter"
    assert check_structure.layer("responder.api") == "edge"
