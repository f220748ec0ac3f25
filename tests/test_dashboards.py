"""The dashboards as code: committed JSON up to date, well-formed panels, provisioning that matches.

The PromQL of every panel runs against a real Prometheus in ``test_dashboards_prometheus.py``; the
LogQL cannot (no Loki on these machines), so here each Loki query is parsed with Grafana's own LogQL
grammar and checked against what ``responder/loki.py`` pushes: stream labels and metadata keys.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate, layout
from dashboards.grafana import GRID_COLUMNS, LOKI_UID, PROMETHEUS_UID, Json, targets_of
from responder.loki import BASE_LABELS, METADATA_KEYS
from tests.services import require_binary, unavailable

ROOT = Path(__file__).resolve().parent.parent
BOARDS = {name: build() for name, build in generate.DASHBOARDS.items()}
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__auto"}


def test_committed_json_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m dashboards.generate --check`` (also run by make lint) passes on the committed files."""
    assert generate.main(["--check"]) == 0, capsys.readouterr().err
    for name, text in generate.render().items():
        assert (generate.OUT_DIR / name).read_text() == text


def test_check_fails_on_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate.main(["--out", str(tmp_path)])
    stale = tmp_path / "fleet.json"
    stale.write_text(stale.read_text().replace("Workloads watched", "Workloads"))
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1
    assert "fleet.json is out of date" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panels_are_well_formed(name: str) -> None:
    board = BOARDS[name]
    assert board["uid"] == f"trainguard-{name}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= GRID_COLUMNS, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] != "row":
            assert panel["title"]
            assert panel["description"], f"{panel['title']}: say what the panel shows"
            assert panel["targets"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_variables_are_defined_and_datasources_are_the_pickers(name: str) -> None:
    board = BOARDS[name]
    defined = {v["name"] for v in board["templating"]["list"]}
    for panel, target in targets_of(board):
        used = set(re.findall(r"\$\{?(\w+)", target["expr"])) - GRAFANA_VARIABLES - {"1"}
        assert used <= defined, f"{panel['title']}: undefined {used - defined}"
        assert target["datasource"]["uid"] in {"${datasource}", "${loki}"}
    current = {v["name"]: v["current"]["value"] for v in board["templating"]["list"] if v["type"] == "datasource"}
    assert current == {"datasource": PROMETHEUS_UID, "loki": LOKI_UID}


def _loki_exprs() -> list[tuple[str, str, str]]:
    return [
        (name, panel["title"], target["expr"])
        for name, board in BOARDS.items()
        for panel, target in targets_of(board)
        if target["datasource"]["type"] == "loki"
    ]


def test_decisions_and_workload_read_the_audit_stream() -> None:
    assert {name for name, _, _ in _loki_exprs()} == {"workload", "decisions"}


@pytest.mark.parametrize(("board", "panel", "expr"), _loki_exprs(), ids=lambda v: str(v)[:40])
def test_loki_queries_match_what_the_mirror_pushes(board: str, panel: str, expr: str) -> None:
    """Stream selectors use only the mirror's stream labels; label filters only its metadata (or json)."""
    assert expr.count("{") == expr.count("}") or "line_format" in expr
    selectors = re.findall(r"\{(app=[^}]*)\}", expr)
    assert selectors, f"{board}/{panel}: no stream selector"
    for selector in selectors:
        labels = {m.group(1) for m in re.finditer(r'(\w+)\s*(?:=~|!=|!~|=)\s*"', selector)}
        assert labels <= set(BASE_LABELS), f"{panel}: {labels - set(BASE_LABELS)} are not stream labels"
        assert 'app="trainguard"' in selector
        assert 'kind="audit"' in selector
    pipeline = expr.split("}", 1)[1].split("| json", maxsplit=1)[0]
    filtered = set(re.findall(r'\|\s*(\w+)\s*(?:=~|!=|=)\s*"', pipeline))
    assert filtered <= set(METADATA_KEYS), f"{panel}: {filtered - set(METADATA_KEYS)} are not structured metadata"


def _yaml(path: str) -> Any:
    return yaml.safe_load((ROOT / "dashboards" / "provisioning" / path).read_text())


def test_provisioning_matches_the_dashboards() -> None:
    datasources = {d["uid"]: d for d in _yaml("datasources/trainguard.yaml")["datasources"]}
    assert datasources[PROMETHEUS_UID]["type"] == "prometheus"
    assert datasources[LOKI_UID]["type"] == "loki"
    assert datasources[LOKI_UID]["jsonData"]["httpHeaderName1"] == "X-Scope-OrgID"
    (provider,) = _yaml("dashboards/trainguard.yaml")["providers"]
    assert provider["type"] == "file"
    assert provider["allowUiUpdates"] is False


def test_committed_files_are_the_three_dashboards() -> None:
    files = sorted(p.name for p in generate.OUT_DIR.glob("*.json"))
    assert files == ["decisions.json", "fleet.json", "workload.json"]
    for path in generate.OUT_DIR.glob("*.json"):
        board: Json = json.loads(path.read_text())
        assert board["schemaVersion"] >= 39
        assert board["editable"] is False


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panel_map_draws_every_panel(name: str) -> None:
    """The layout picture in docs/ is drawn from the same JSON: every panel's title is in it."""
    picture = layout.svg(BOARDS[name])
    assert picture.startswith("<svg")
    for panel in BOARDS[name]["panels"]:
        assert html.escape(panel["title"]) in picture


def test_panel_maps_render_as_png_in_chromium() -> None:
    """Headless Chromium turns each panel map into a PNG (saved under test-artifacts/dashboards/)."""
    require_binary("chromium")
    out = ROOT / "test-artifacts" / "dashboards"
    assert layout.main(["--out", str(out), "--png"]) == 0
    for name in BOARDS:
        png = out / f"dashboard-{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 20_000


LOGQL_CHECK = ROOT / "dashboards" / "logql"
LOGQL_MISSING = "the LogQL grammar is not installed: npm ci --prefix dashboards/logql"
LOGQL_VARIABLES = {"$__auto": "1m", "$__interval": "1m", "$__range": "1h"}


def test_loki_queries_parse_with_grafanas_logql_grammar() -> None:
    """Every LogQL target and variable query parses with @grafana/lezer-logql (Grafana's own grammar).

    No Loki can run on these machines, so the syntax is checked with the parser of Grafana's Loki
    query editor instead (node; ``npm ci --prefix dashboards/logql`` installs it).
    """
    node = require_binary("node")
    if not (LOGQL_CHECK / "node_modules" / "@grafana" / "lezer-logql").is_dir():
        unavailable(LOGQL_MISSING)
    exprs = [expr for _, _, expr in _loki_exprs()]
    exprs += [
        var["definition"].removeprefix("label_values(").rsplit(",", 1)[0]
        for board in BOARDS.values()
        for var in board["templating"]["list"]
        if var["type"] == "query" and var["datasource"]["type"] == "loki"
    ]
    substituted = []
    for expr in exprs:
        text = expr
        for name, value in LOGQL_VARIABLES.items():
            text = text.replace(name, value)
        substituted.append(text)
    assert len(substituted) >= 10
    done = subprocess.run(
        [node, str(LOGQL_CHECK / "check.cjs")], input=json.dumps(substituted), capture_output=True, text=True,
        timeout=60, check=True, cwd=LOGQL_CHECK,
    )  # fmt: skip
    results = json.loads(done.stdout)
    bad = [f"{r['expr']}\n  {r['errors']}" for r in results if r["errors"]]
    assert not bad, "LogQL that Grafana's grammar rejects:\n" + "\n".join(bad)


def test_logql_grammar_check_catches_a_broken_query() -> None:
    """The check above can fail: a missing brace is reported."""
    node = require_binary("node")
    if not (LOGQL_CHECK / "node_modules" / "@grafana" / "lezer-logql").is_dir():
        unavailable(LOGQL_MISSING)
    done = subprocess.run(
        [node, str(LOGQL_CHECK / "check.cjs")], input=json.dumps(['{app="trainguard" | json']), capture_output=True,
        text=True, timeout=60, check=True, cwd=LOGQL_CHECK,
    )  # fmt: skip
    assert json.loads(done.stdout)[0]["errors"]
