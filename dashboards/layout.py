"""Panel maps: each dashboard's layout drawn from its JSON (gridPos rectangles, titles, queries).

    python -m dashboards.layout --out docs/images           # SVG per dashboard
    python -m dashboards.layout --out docs/images --png     # and a PNG, via headless Chromium

The picture is what Grafana lays out from the same ``gridPos`` values (24 columns, rows of 30 px),
with each panel's type and first query, so a reviewer sees a dashboard without a Grafana.
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

from dashboards.generate import DASHBOARDS
from dashboards.grafana import GRID_COLUMNS, Json

COLUMN_PX = 52
ROW_PX = 30
MARGIN = 16
HEADER = 56
COLORS = {
    "stat": "#e8f1ff", "timeseries": "#eef8ee", "bargauge": "#fff4e0", "heatmap": "#ffeceb", "table": "#f1edfb",
    "logs": "#e9f6f7", "text": "#f4f4f4",
}  # fmt: skip
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")  # fmt: skip


def _text(x: float, y: float, content: str, size: int = 12, weight: str = "normal", fill: str = "#1d2330",
          family: str = "DejaVu Sans, sans-serif") -> str:  # fmt: skip
    return (f'<text x="{x:.0f}" y="{y:.0f}" font-family="{family}" font-size="{size}" font-weight="{weight}" '
            f'fill="{fill}">{html.escape(content)}</text>')  # fmt: skip


def _clip(text: str, width_px: float, char_px: float) -> str:
    limit = max(4, int(width_px / char_px))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def svg(board: Json) -> str:
    """The panel map of one dashboard as a standalone SVG document."""
    panels = board["panels"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width = GRID_COLUMNS * COLUMN_PX + 2 * MARGIN
    height = HEADER + bottom * ROW_PX + MARGIN
    variables = ", ".join(v["name"] for v in board["templating"]["list"] if v["type"] != "datasource")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<rect width="{width}" height="{height}" fill="#f5f7fa"/>',
        _text(MARGIN, 26, board["title"], 18, "bold"),
        _text(
            MARGIN,
            46,
            f"uid {board['uid']} · variables: {variables or 'none'} · {len(panels)} panels "
            f"(layout from gridPos, 24 columns)",
            12,
            fill="#5d6677",
        ),
    ]
    for panel in panels:
        pos = panel["gridPos"]
        x = MARGIN + pos["x"] * COLUMN_PX
        y = HEADER + pos["y"] * ROW_PX
        w = pos["w"] * COLUMN_PX - 6
        h = pos["h"] * ROW_PX - 6
        if panel["type"] == "row":
            parts.append(f'<rect x="{x}" y="{y + 4}" width="{w}" height="{ROW_PX - 8}" rx="3" fill="#1d2330"/>')
            parts.append(_text(x + 10, y + 20, panel["title"], 13, "bold", "#ffffff"))
            continue
        fill = COLORS.get(panel["type"], "#ffffff")
        parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" fill="{fill}" stroke="#b8c0cf"/>')
        parts.append(_text(x + 8, y + 18, _clip(panel["title"], w - 16, 7.2), 13, "bold"))
        source = panel["datasource"]["type"]
        parts.append(_text(x + 8, y + 34, f"{panel['type']} · {source}", 11, fill="#5d6677"))
        line_y = y + 50
        for target in panel.get("targets", []):
            if line_y > y + h - 8:
                break
            expr = " ".join(target["expr"].split())
            parts.append(_text(x + 8, line_y, _clip(expr, w - 16, 6.1), 10, fill="#33506e",
                               family="DejaVu Sans Mono, monospace"))  # fmt: skip
            line_y += 14
        for line in textwrap.wrap(panel.get("description", ""), max(10, int((w - 16) / 6.6))):
            if line_y + 16 > y + h - 6:
                break
            parts.append(_text(x + 8, line_y + 8, line, 11, fill="#5d6677"))
            line_y += 15
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def screenshot(svg_path: Path, png_path: Path, width: int, height: int, chromium: str) -> None:
    """PNG of an SVG file through headless Chromium's --screenshot."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--screenshot={png_path}", svg_path.resolve().as_uri()],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.layout", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for dashboard-<name>.svg/.png")
    parser.add_argument("--png", action="store_true", help="also render PNGs with headless Chromium")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") if args.png else None
    if args.png and chromium is None:
        parser.error("--png needs chromium (apt-get install chromium)")
    for name, build in DASHBOARDS.items():
        board = build()
        text = svg(board)
        path = args.out / f"dashboard-{name}.svg"
        path.write_text(text)
        print(f"wrote {path}")
        if chromium is not None:
            width = int(text.split('width="', 1)[1].split('"', 1)[0])
            height = int(text.split('height="', 1)[1].split('"', 1)[0])
            png = path.with_suffix(".png")
            screenshot(path, png, width, height, chromium)
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
