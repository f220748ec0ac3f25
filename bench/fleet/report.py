"""bench/results/scale.md and scale.png from scale.json; churn.png from churn.jsonl.

Run after bench/fleet/scale.py or churn.py (``python -m bench.fleet.report``). The plot is detection
p50 (line) and p95 (whisker) against fleet size, one line per engine and profile, log-scaled nodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# The rule files' digests (bench/fleet/scale.py rules_digest) before and after the churn fix, 3492a51.
RULES = {
    "621e64b6d34c": "before fix",
    "8d4b7e831fdf": "before fix",
    "ddf586616a2a": "after fix",
    "d05f37adc115": "after fix",
}


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes (GPUs) | engine | profile | detected | p50 s | p95 s | max s | rule group eval s (mean) | scrape s "
        "(mean / max) | samples/s | engine CPU cores | engine RSS MiB | storm decisions/s | load 1m | rules |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r["nodes"], r["engine"], r["profile"])):
        if "error" in r:
            lines.append(f"| {r['nodes']} | {r['engine']} | {r['profile']} | error: {r['error'][-120:]!r} |")
            continue
        d, storm = r["detection"], r.get("storm", {})
        scrape = f"{_fmt(_round(r['scrape_duration_mean_s']))} / {_fmt(_round(r['scrape_duration_max_s']))}"
        up = "" if r.get("kept_up", True) else f" (not kept up; targets up {r.get('targets_up_fraction', '?')})"
        lines.append(
            f"| {r['nodes']} ({r['gpus']}) | {r['engine']} | {r['profile']} | {r['detected']}/{r['faults']}{up} "
            f"| {_fmt(d['p50_s'])} | {_fmt(d['p95_s'])} | {_fmt(d['max_s'])} | {_fmt(r['rule_group_eval_mean_s'])} "
            f"| {scrape} | {r['samples_per_s']} | {r['engine_cpu_cores']} | {r['engine_rss_mib']} "
            f"| {_fmt(storm.get('decisions_per_s'))} | {r['loadavg_1m_before']} to {r['loadavg_1m_after']} "
            f"| {RULES.get(r.get('rules_sha256', ''), r.get('rules_sha256', '?'))} |"
        )
    return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def plot_scale(runs: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        if "error" not in r and r["detection"]["p50_s"] is not None:
            series.setdefault((r["engine"], r["profile"]), []).append(r)
    for (engine, profile), points in sorted(series.items()):
        points.sort(key=lambda r: r["nodes"])
        xs = [r["nodes"] for r in points]
        p50 = [r["detection"]["p50_s"] for r in points]
        p95 = [r["detection"]["p95_s"] for r in points]
        line = ax.plot(xs, p50, "o-", label=f"{engine}, {profile} (p50; bar to p95)")[0]
        ax.vlines(xs, p50, p95, color=line.get_color(), alpha=0.5)
    for y, label in ((3, "fast goal 3 s"), (30, "production goal 30 s")):
        ax.axhline(y, ls=":", color="grey")
        ax.annotate(label, (ax.get_xlim()[0], y), fontsize=8, color="grey", va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fleet size, nodes (8 GPUs each)")
    ax.set_ylabel("detection latency, fault -> responder (s)")
    ax.set_title("trainguard detection at scale (2 shared cores; see scale.md for load)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def churn_windows(lines_path: Path, width_s: float = 600) -> list[dict[str, Any]]:
    """Detection p50 and the engine's figures per ``width_s`` window of a churn run."""
    records = [json.loads(line) for line in lines_path.read_text().splitlines() if line.strip()]
    trials = [r for r in records if r["type"] == "trial" and r["latency_s"] is not None]
    samples = [r for r in records if r["type"] == "sample"]
    out = []
    end = max((r["t_s"] for r in records if "t_s" in r), default=0.0)  # the run's config line has none
    start = 0.0
    while start < end:
        xs = [r["latency_s"] for r in trials if start <= r["t_s"] < start + width_s]
        ss = [s for s in samples if start <= s["t_s"] < start + width_s]
        out.append(
            {
                "from_min": round(start / 60),
                "trials": len(xs),
                "p50_s": round(statistics.median(xs), 3) if xs else None,
                "head_series_end": ss[-1]["head_series"] if ss else None,
                "rule_time_sum_mean_s": round(statistics.mean(s["rule_group_last_duration_sum_s"] for s in ss), 3)
                if ss
                else None,
                "loadavg_mean": round(statistics.mean(s["loadavg_1m"] for s in ss), 2) if ss else None,
            }
        )
        start += width_s
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--churn", type=Path, default=RESULTS / "churn.jsonl")
    args = parser.parse_args(argv)
    parts = []
    if args.scale.exists():
        runs = json.loads(args.scale.read_text())["runs"]
        png = plot_scale(runs, args.scale.with_suffix(".png"))
        parts.append("# Detection at scale (bench/fleet/scale.py)\n\n" + table(runs) + "\n")
        if png:
            parts.append(f"![detection latency against fleet size]({png.name})\n")
    if args.churn.exists():
        rows = churn_windows(args.churn)
        parts.append("# Churn run (bench/fleet/churn.py), per 10 minutes\n")
        parts.append("| from min | trials | p50 s | head series at end | rule time, sum of groups s | load 1m |")
        parts.append("|---|---|---|---|---|---|")
        parts.extend(
            f"| {r['from_min']} | {r['trials']} | {_fmt(r['p50_s'])} | {_fmt(r['head_series_end'])} "
            f"| {_fmt(r['rule_time_sum_mean_s'])} | {_fmt(r['loadavg_mean'])} |"
            for r in rows
        )
    (RESULTS / "scale.md").write_text("\n".join(parts) + "\n")
    print((RESULTS / "scale.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
