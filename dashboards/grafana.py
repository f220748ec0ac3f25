"""Small builders for classic Grafana dashboard JSON (schemaVersion 39), as plain dicts.

Only what trainguard's dashboards use: a few panel types, Prometheus and Loki targets, datasource
and query variables, rows, and a layout helper that places panels left to right on Grafana's
24-column grid. Every panel gets a stable id from its position, so regenerating is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 39
PROMETHEUS_UID = "trainguard-prometheus"
LOKI_UID = "trainguard-loki"
PROM = {"type": "prometheus", "uid": "${datasource}"}
LOKI = {"type": "loki", "uid": "${loki}"}
GRID_COLUMNS = 24

Json = dict[str, Any]


def prom(expr: str, legend: str = "", *, instant: bool = False, fmt: str = "time_series", ref: str = "A") -> Json:
    target: Json = {"refId": ref, "datasource": PROM, "expr": expr, "legendFormat": legend or "__auto"}
    if instant:
        target["instant"] = True
        target["range"] = False
    if fmt != "time_series":
        target["format"] = fmt
    return target


def loki(expr: str, legend: str = "", *, ref: str = "A", query_type: str = "range") -> Json:
    target: Json = {"refId": ref, "datasource": LOKI, "expr": expr, "queryType": query_type}
    if legend:
        target["legendFormat"] = legend
    return target


def _panel(kind: str, title: str, targets: list[Json], description: str, w: int, h: int, **extra: Any) -> Json:
    datasource = targets[0]["datasource"] if targets else PROM
    refs = "ABCDEFGH"
    for i, target in enumerate(targets):
        target["refId"] = refs[i]
    panel: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": datasource,
        "targets": targets,
        "gridPos": {"x": 0, "y": 0, "w": w, "h": h},
    }
    panel.update(extra)
    return panel


def _defaults(unit: str = "short", **custom: Any) -> Json:
    defaults: Json = {"unit": unit}
    if custom:
        defaults["custom"] = custom
    return defaults


def stat(title: str, targets: list[Json], description: str, unit: str = "short", w: int = 4, h: int = 4,
         mappings: list[Json] | None = None, thresholds: list[Json] | None = None) -> Json:  # fmt: skip
    defaults = _defaults(unit)
    if mappings:
        defaults["mappings"] = mappings
    defaults["thresholds"] = {"mode": "absolute", "steps": thresholds or [{"color": "green", "value": None}]}
    return _panel(
        "stat", title, targets, description, w, h,
        fieldConfig={"defaults": defaults, "overrides": []},
        options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                 "colorMode": "background" if thresholds or mappings else "value", "graphMode": "none",
                 "textMode": "auto"},
    )  # fmt: skip


def timeseries(title: str, targets: list[Json], description: str, unit: str = "short", w: int = 12, h: int = 8,
               stacked: bool = False, bars: bool = False) -> Json:  # fmt: skip
    custom: Json = {"drawStyle": "bars" if bars else "line", "fillOpacity": 60 if bars else 10, "lineWidth": 1,
                    "showPoints": "never", "spanNulls": False}  # fmt: skip
    if stacked:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return _panel(
        "timeseries", title, targets, description, w, h,
        fieldConfig={"defaults": _defaults(unit, **custom), "overrides": []},
        options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]},
                 "tooltip": {"mode": "multi", "sort": "desc"}},
    )  # fmt: skip


def bargauge(title: str, targets: list[Json], description: str, unit: str = "short", w: int = 8, h: int = 8,
             thresholds: list[Json] | None = None, maximum: float | None = None) -> Json:  # fmt: skip
    defaults = _defaults(unit)
    defaults["thresholds"] = {"mode": "absolute", "steps": thresholds or [{"color": "blue", "value": None}]}
    if maximum is not None:
        defaults["min"], defaults["max"] = 0, maximum
    return _panel(
        "bargauge", title, targets, description, w, h,
        fieldConfig={"defaults": defaults, "overrides": []},
        options={"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                 "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
    )  # fmt: skip


def heatmap(title: str, targets: list[Json], description: str, unit: str = "s", w: int = 12, h: int = 8) -> Json:
    return _panel(
        "heatmap", title, targets, description, w, h,
        fieldConfig={"defaults": {"custom": {"scaleDistribution": {"type": "linear"}}}, "overrides": []},
        options={"calculate": True, "calculation": {"yBuckets": {"mode": "count", "value": "20"}},
                 "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64}, "yAxis": {"unit": unit},
                 "cellGap": 1, "tooltip": {"show": True, "yHistogram": True}},
    )  # fmt: skip


def table(title: str, targets: list[Json], description: str, w: int = 12, h: int = 8,
          rename: dict[str, str] | None = None, unit: str = "short") -> Json:  # fmt: skip
    transformations: list[Json] = [{"id": "merge", "options": {}}]
    if rename:
        transformations.append({"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}})
    return _panel(
        "table", title, targets, description, w, h,
        fieldConfig={"defaults": _defaults(unit), "overrides": []},
        options={"showHeader": True, "cellHeight": "sm"},
        transformations=transformations,
    )  # fmt: skip


def logs(title: str, targets: list[Json], description: str, w: int = 24, h: int = 12) -> Json:
    return _panel(
        "logs", title, targets, description, w, h,
        options={"showTime": True, "wrapLogMessage": True, "enableLogDetails": True, "sortOrder": "Descending",
                 "dedupStrategy": "none", "prettifyLogMessage": False},
    )  # fmt: skip


def text(title: str, content: str, w: int = 24, h: int = 3) -> Json:
    return {"type": "text", "title": title, "gridPos": {"x": 0, "y": 0, "w": w, "h": h},
            "options": {"mode": "markdown", "content": content}}  # fmt: skip


@dataclass
class Row:
    title: str
    panels: list[Json] = field(default_factory=list)


def datasource_variable(name: str, kind: str, uid: str, label: str) -> Json:
    return {
        "name": name, "label": label, "type": "datasource", "query": kind, "hide": 0, "refresh": 1,
        "current": {"text": label, "value": uid}, "options": [], "regex": "", "includeAll": False, "multi": False,
    }  # fmt: skip


def query_variable(name: str, label: str, query: str, datasource: Json = PROM, *, all_value: str = ".*") -> Json:
    return {
        "name": name, "label": label, "type": "query", "datasource": datasource,
        "definition": query, "query": {"query": query, "refId": f"{name}-var"}, "refresh": 2, "sort": 1,
        "multi": True, "includeAll": True, "allValue": all_value, "hide": 0, "regex": "",
        "current": {"text": ["All"], "value": ["$__all"]}, "options": [],
    }  # fmt: skip


def textbox_variable(name: str, label: str, default: str) -> Json:
    return {"name": name, "label": label, "type": "textbox", "query": default, "hide": 0,
            "current": {"text": default, "value": default}, "options": []}  # fmt: skip


def layout(rows: list[Row]) -> list[Json]:
    """Place rows top to bottom and their panels left to right, wrapping at 24 columns."""
    out: list[Json] = []
    y = 0
    next_id = 1
    for row in rows:
        out.append({"type": "row", "title": row.title, "id": next_id, "collapsed": False, "panels": [],
                    "gridPos": {"x": 0, "y": y, "w": GRID_COLUMNS, "h": 1}})  # fmt: skip
        next_id += 1
        y += 1
        x, line_h = 0, 0
        for panel in row.panels:
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > GRID_COLUMNS:
                x, y, line_h = 0, y + line_h, 0
            panel["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
            panel["id"] = next_id
            next_id += 1
            out.append(panel)
            x += w
            line_h = max(line_h, h)
        y += line_h
    return out


def dashboard(uid: str, title: str, description: str, variables: list[Json], rows: list[Row],
              tags: tuple[str, ...] = ("trainguard",), time_from: str = "now-6h") -> Json:  # fmt: skip
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": time_from, "to": "now"},
        "timezone": "utc",
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [{"title": "trainguard", "type": "dashboards", "tags": ["trainguard"], "asDropdown": True}],
        "panels": layout(rows),
    }


def targets_of(board: Json) -> list[tuple[Json, Json]]:
    """Every (panel, target) pair of a dashboard, rows included."""
    pairs: list[tuple[Json, Json]] = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            pairs.extend((inner, target) for target in inner.get("targets", []))
    return pairs
