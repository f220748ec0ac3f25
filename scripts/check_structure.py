"""The structure rules that keep the house livable, checked by ``make lint``.

* no function over ``MAX_FUNCTION`` lines and no module over ``MAX_MODULE`` lines in ``responder/`` and
  ``exporters/``;
* the import graph of ``responder``, ``exporters`` and ``trainguard`` has no cycle;
* it points one way: the edge (HTTP, console, CLI) -> the engine -> the domain, and the adapters
  (schedulers, storage, Loki, Prometheus enrichment) -> the domain; the settings (config) compose the
  domain's and the adapters' settings models and are read by the edge. The layer of each module is in
  ``LAYERS``; ``ALLOWED`` says which layers each may import.

Known exceptions are listed in ``ALLOWED_EXCEPTIONS`` (to be emptied, never grown). Exit status 1 on a
finding, with one line per finding.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZED = ("responder", "exporters")
GRAPHED = ("responder", "exporters", "trainguard")
MAX_FUNCTION = 80
MAX_MODULE = 500

# Longest prefix wins. Ports (the Scheduler protocol, the store protocols) belong to the domain.
LAYERS: dict[str, str] = {
    "trainguard.identity": "shared",
    "trainguard.vocabulary": "shared",
    "responder.clock": "shared",
    "responder.errors": "shared",
    "responder.metrics": "shared",
    "responder.model": "domain",
    "responder.alerts": "domain",
    "responder.attribution": "domain",
    "responder.policy": "domain",
    "responder.isolation": "domain",
    "responder.localize": "domain",
    "responder.experiments": "domain",
    "responder.goodput": "domain",
    "responder.suspicion": "domain",
    "responder.likelihoods": "domain",
    "responder.breaker": "domain",
    "responder.approval": "domain",
    "responder.node_groups": "domain",
    "responder.store": "domain",
    "responder.schedulers.base": "domain",
    "responder.store.sqlite": "adapter",
    "responder.store.sql": "adapter",
    "responder.store.postgres": "adapter",
    "responder.store.pg_lease": "adapter",
    "responder.store.retention": "adapter",
    "responder.schedulers": "adapter",
    "responder.loki": "adapter",
    "responder.alertmanager": "adapter",
    "responder.enrichment": "adapter",
    "responder.settings": "config",
    "responder.engine": "engine",
    "responder.acting": "engine",
    "responder.engine_config": "engine",
    "responder.decision_record": "engine",
    "responder.supervisor": "engine",
    "responder": "edge",
    "trainguard": "edge",
    "exporters": "exporter",
}
ALLOWED: dict[str, set[str]] = {
    "shared": {"shared"},
    "domain": {"domain", "shared"},
    "adapter": {"adapter", "domain", "shared"},
    "config": {"config", "adapter", "domain", "shared"},
    "engine": {"engine", "domain", "shared"},
    "edge": {"edge", "engine", "config", "adapter", "domain", "shared", "exporter"},
    "exporter": {"exporter", "shared"},
}
# Known findings, to be emptied and never grown (empty now).
ALLOWED_EXCEPTIONS: frozenset[str] = frozenset()


def modules() -> Iterator[tuple[str, Path]]:
    for top in GRAPHED:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def layer(module: str) -> str:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def size_findings(path: Path, tree: ast.Module, text: str) -> Iterator[str]:
    rel = path.relative_to(ROOT)
    lines = len(text.splitlines())
    if lines > MAX_MODULE:
        yield f"{rel}: module is {lines} lines (limit {MAX_MODULE})"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION:
                yield f"{rel}: function {node.name} is {length} lines (limit {MAX_FUNCTION})"


def imports(module: str, path: Path, tree: ast.Module, known: set[str]) -> set[str]:
    """The project modules ``module`` imports (a name imported from a package counts as its submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def findings() -> list[str]:
    parsed = {name: (path, path.read_text(encoding="utf-8")) for name, path in modules()}
    trees = {name: ast.parse(text, str(path)) for name, (path, text) in parsed.items()}
    out: list[str] = []
    for name, (path, text) in parsed.items():
        if name.split(".")[0] in SIZED:
            out.extend(size_findings(path, trees[name], text))
    known = set(parsed)
    graph = {name: imports(name, parsed[name][0], trees[name], known) for name in parsed}
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer(target) not in ALLOWED[layer(name)]:
                out.append(f"{name} ({layer(name)}) imports {target} ({layer(target)}): against the one-way rule")
    out.extend(f"import cycle: {' <-> '.join(c)}" for c in cycles(graph))
    return out


def main() -> int:
    found = findings()
    problems = [f for f in found if f not in ALLOWED_EXCEPTIONS]
    stale = sorted(ALLOWED_EXCEPTIONS - set(found))
    for line in problems:
        print(f"check_structure: {line}")
    for line in stale:
        print(f"check_structure: allowed exception no longer found, remove it: {line}")
    known = len(found) - len(problems)
    if problems or stale:
        print(f"check_structure: FAILED, {len(problems) + len(stale)} problem(s)")
        return 1
    print(f"check_structure: ok ({known} known exporters/ exception(s) allowed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
