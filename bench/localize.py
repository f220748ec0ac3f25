"""Simulation benchmark: localizing intermittent bad nodes by restarts, against two baselines.

Synthetic fleets of 8 to 512 nodes run one job each with 1 to 3 bad nodes. A bad node makes an attempt
fail with probability ``--fail-if-present`` per observation window (intermittent: sometimes it runs
clean); any attempt fails with ``--background`` (noise). The evidence is ambiguous: it names a set of
suspects that holds each bad node with probability ``--hit`` (it can miss it) among healthy decoys.
Nothing names a single node. Methods:

  trainguard   responder.localize: exclude the split with the most expected information, observe, blame
  trainguard_pairs  the same with pair hypotheses (prior_pair): two bad nodes at once
  restart      restart without exclusion (today's behaviour for evidence without a node)
  exclude_all  exclude every suspect at once (ignores the spare-node budget)

Per fleet size and number of bad nodes: attempts until every bad node is blamed, goodput lost over the
horizon (hours: work since the last checkpoint + restart time), ETTR, precision and recall of the final
blame, and the most nodes excluded at once against the budget. JSON to bench/results/localize.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from responder import localize
from responder.localize import LocalizeSettings

ROOT = Path(__file__).resolve().parent.parent
WINDOW_H = 1.0  # one observation window: an attempt that survives it ran clean
CHECKPOINT_H = 0.5  # checkpoint interval: a failure loses up to this much work
RESTART_H = 0.1  # requeue, start, rendezvous, load the checkpoint
GOAL = {"nodes": 64, "bad": 1, "attempts": 7, "precision": 0.9}


@dataclass(frozen=True, slots=True)
class World:
    nodes: tuple[str, ...]
    bad: frozenset[str]
    suspects: frozenset[str]
    fail_if_present: float
    background: float


@dataclass(frozen=True, slots=True)
class Outcome:
    attempts_to_localize: int | None  # None: not every bad node blamed within the horizon
    lost_h: float
    blamed: frozenset[str]
    max_excluded: int
    attempts: int


def make_world(rng: random.Random, n: int, bad: int, suspects: int, hit: float, p: float, bg: float) -> World:
    nodes = tuple(f"n{i:03d}" for i in range(n))
    culprits = frozenset(rng.sample(nodes, bad))
    named = {c for c in culprits if rng.random() < hit}
    decoys = [x for x in nodes if x not in culprits]
    named |= set(rng.sample(decoys, max(0, min(len(decoys), suspects - len(named)))))
    return World(nodes, culprits, frozenset(named), p, bg)


def _attempt(rng: random.Random, world: World, excluded: set[str]) -> bool:
    """True if the attempt fails within its window."""
    present = bool(world.bad - excluded)
    return rng.random() < (world.fail_if_present if present else world.background)


def _cost(rng: random.Random, failed: bool, restarted: bool) -> float:
    return (rng.uniform(0, CHECKPOINT_H) + RESTART_H) if failed else (RESTART_H if restarted else 0.0)


def run_trainguard(rng: random.Random, world: World, settings: LocalizeSettings, horizon: int) -> Outcome:
    belief = localize.start(world.nodes, world.suspects, settings)
    split = localize.choose(belief, world.nodes, settings)
    lost, max_excl, done_at = RESTART_H + rng.uniform(0, CHECKPOINT_H), 0, None  # the first failure
    attempt = 1  # the attempt after the first failure; a window that runs clean without a change is the same one
    for _ in range(horizon):
        excluded = set(split.excluded)
        max_excl = max(max_excl, len(excluded))
        failed = _attempt(rng, world, excluded)
        belief = localize.observe(belief, [n for n in world.nodes if n not in excluded], failed, settings)
        while True:
            belief, culprit = localize.conclude(belief, settings)
            if culprit is None:
                break
        if done_at is None and world.bad <= set(belief.blamed):
            done_at = attempt
        searching = belief.posterior[localize.NONE] < 0.5
        nxt = localize.choose(belief, world.nodes, settings) if (failed or searching) else split
        restarted = failed or set(nxt.excluded) != excluded
        lost += _cost(rng, failed, restarted and not failed)
        attempt += restarted
        split = nxt
    return Outcome(done_at, lost, frozenset(belief.blamed), max_excl, attempt)


def run_restart(rng: random.Random, world: World, horizon: int) -> Outcome:
    lost, attempts = RESTART_H + rng.uniform(0, CHECKPOINT_H), 1
    for _ in range(horizon):
        failed = _attempt(rng, world, set())
        lost, attempts = lost + _cost(rng, failed, False), attempts + failed
    return Outcome(None, lost, frozenset(), 0, attempts)


def run_exclude_all(rng: random.Random, world: World, horizon: int) -> Outcome:
    lost, excluded, attempts = RESTART_H + rng.uniform(0, CHECKPOINT_H), set(world.suspects), 1
    for _ in range(horizon):
        failed = _attempt(rng, world, excluded)
        lost, attempts = lost + _cost(rng, failed, False), attempts + failed
    done = 1 if world.bad <= excluded else None
    return Outcome(done, lost, frozenset(excluded), len(excluded), attempts)


def summarise(outcomes: list[Outcome], world_bad: list[frozenset[str]], horizon: int, budget: int) -> dict[str, Any]:
    tp = sum(len(o.blamed & b) for o, b in zip(outcomes, world_bad, strict=True))
    said = sum(len(o.blamed) for o in outcomes)
    truth = sum(len(b) for b in world_bad)
    found = sorted(o.attempts_to_localize for o in outcomes if o.attempts_to_localize is not None)
    lost = [o.lost_h for o in outcomes]
    return {
        "localized_share": round(len(found) / len(outcomes), 3),
        "attempts_to_localize": None
        if not found
        else {
            "median": statistics.median(found),
            "p90": found[math.ceil(0.9 * len(found)) - 1],
            "max": found[-1],
        },
        "goodput_lost_h": {"mean": round(statistics.fmean(lost), 3), "median": round(statistics.median(lost), 3)},
        "ettr": round(1 - statistics.fmean(lost) / (horizon * WINDOW_H), 3),
        "precision": None if said == 0 else round(tp / said, 3),
        "recall": round(tp / truth, 3),
        "attempts_used": {"mean": round(statistics.fmean(o.attempts for o in outcomes), 2)},
        "max_excluded": max(o.max_excluded for o in outcomes),
        "over_budget_trials": sum(o.max_excluded > budget for o in outcomes),
    }


def cell(n: int, bad: int, args: argparse.Namespace, settings: LocalizeSettings) -> dict[str, Any]:
    pairs = settings.model_copy(update={"prior_pair": args.prior_pair})
    rng = random.Random(f"{args.seed}-{n}-{bad}")
    suspects = min(n, max(args.suspects, 2 * bad))
    worlds = [make_world(rng, n, bad, suspects, args.hit, args.fail_if_present, args.background)
              for _ in range(args.trials)]  # fmt: skip
    truth = [w.bad for w in worlds]
    methods = {
        "trainguard": [run_trainguard(rng, w, settings, args.horizon) for w in worlds],
        "trainguard_pairs": [run_trainguard(rng, w, pairs, args.horizon) for w in worlds],
        "restart": [run_restart(rng, w, args.horizon) for w in worlds],
        "exclude_all": [run_exclude_all(rng, w, args.horizon) for w in worlds],
    }
    return {"nodes": n, "bad": bad, "suspects": suspects,
            **{m: summarise(o, truth, args.horizon, settings.spare_nodes) for m, o in methods.items()}}  # fmt: skip


def goal(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goal: one bad node in 64, ambiguous evidence: <= 7 attempts, precision >= 0.9, within budget."""
    c = next((c for c in cells if c["nodes"] == GOAL["nodes"] and c["bad"] == GOAL["bad"]), None)
    if c is None:
        return {"checked": False}
    tg = c["trainguard"]
    attempts = tg["attempts_to_localize"]
    fast = attempts is not None and attempts["median"] <= GOAL["attempts"]
    met = fast and (tg["precision"] or 0) >= GOAL["precision"] and tg["over_budget_trials"] == 0
    return {
        "checked": True, **GOAL, "median_attempts": attempts and attempts["median"],
        "p90_attempts": attempts and attempts["p90"], "precision_measured": tg["precision"], "met": met,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--bad", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trials", type=int, default=200, help="synthetic fleets per cell")
    parser.add_argument("--horizon", type=int, default=24, help="observation windows (hours) per job")
    parser.add_argument("--suspects", type=int, default=8, help="how many hosts the ambiguous evidence names")
    parser.add_argument("--hit", type=float, default=0.9, help="P(the evidence names a bad node)")
    parser.add_argument("--fail-if-present", type=float, default=0.7, help="true P(fail | bad node in the attempt)")
    parser.add_argument("--background", type=float, default=0.05, help="true P(fail | no bad node)")
    parser.add_argument("--spare-nodes", type=int, default=4)
    parser.add_argument("--prior-pair", type=float, default=0.1, help="prior_pair of the trainguard_pairs variant")
    parser.add_argument("--seed", default="trainguard")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "localize.json")
    args = parser.parse_args(argv)
    settings = LocalizeSettings(spare_nodes=args.spare_nodes)
    started = time.monotonic()
    cells = [cell(n, b, args, settings) for n in args.sizes for b in args.bad if b < n]
    result = {
        "benchmark": "localize", "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "model": settings.model_dump(), "window_h": WINDOW_H, "checkpoint_h": CHECKPOINT_H, "restart_h": RESTART_H,
        "goal": goal(cells), "cells": cells, "wall_s": round(time.monotonic() - started, 1),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for c in cells:
        tg, rs, ex, tp = c["trainguard"], c["restart"], c["exclude_all"], c["trainguard_pairs"]
        print(f"{c['nodes']:>4} nodes, {c['bad']} bad: trainguard attempts {tg['attempts_to_localize']}, "
              f"P {tg['precision']} R {tg['recall']} lost {tg['goodput_lost_h']['mean']}h (max excl "
              f"{tg['max_excluded']}) | restart lost {rs['goodput_lost_h']['mean']}h | exclude_all lost "
              f"{ex['goodput_lost_h']['mean']}h P {ex['precision']} excl {ex['max_excluded']} | pairs P "
              f"{tp['precision']} R {tp['recall']}")  # fmt: skip
    print(f"goal: {result['goal']}\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
