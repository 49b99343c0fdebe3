"""The product's floors hold (docs/architecture.md): no file of skillopt_ray/ or envs/ reaches itself through its
imports (a lazy import inside a function counts: it is the same dependency, only later), the launch layer imports no
entry point, and no product file is over 700 lines."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (("skillopt_ray", REPO / "skillopt_ray"), ("skillopt_envs", REPO / "envs"))
MAX_FILE_LINES = 700

# files still over the limit while they are split by job (none left: sweep.py, compare.py and config.py were split);
# the list may only shrink: an entry whose file got short, or went away, fails until it is taken off
LONG_FILES_ALLOWED: set[str] = set()

# the commands: what a user runs (docs/architecture.md, top floor)
ENTRY_POINTS = {
    "skillopt_ray/__main__.py",
    "skillopt_ray/sweep/__main__.py",
    "skillopt_ray/compare/__main__.py",
    "skillopt_ray/cluster/__main__.py",
    "skillopt_ray/report/__main__.py",
    "skillopt_ray/transfer/__main__.py",
    "skillopt_ray/cluster/client.py",
    "skillopt_ray/cli/__init__.py",
    "skillopt_ray/cli/app.py",
    "skillopt_ray/cluster/command.py",
    "skillopt_ray/sweep/command.py",
    "skillopt_ray/compare/command.py",
    "skillopt_ray/compare/transfer.py",
    "skillopt_ray/dashboard/__main__.py",
    "skillopt_ray/sleep/__main__.py",
    "skillopt_ray/sleep/cli.py",
}
# what every command's run goes through before the engine: compose, check, identify, start or attach to Ray
LAUNCH_LAYER = {
    "skillopt_ray/cli/compose.py",
    "skillopt_ray/cli/checks.py",
    "skillopt_ray/cli/identity.py",
    "skillopt_ray/cli/provenance.py",
    "skillopt_ray/cli/ray_session.py",
    "skillopt_ray/cli/launch.py",
    "skillopt_ray/cli/report.py",
    "skillopt_ray/cli/errors.py",
    "skillopt_ray/runs/kept_cluster.py",
    "skillopt_ray/cluster/holder.py",
    "skillopt_ray/cluster/service.py",
    "skillopt_ray/cluster/wire.py",
}


def product_files() -> list[Path]:
    return sorted(p for _, root in PACKAGES for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def imported_names(path: Path, package: str) -> list[str]:
    """Every module a file imports, wherever the import stands (module level, in a function, under TYPE_CHECKING);
    `from a import b` names both `a` and `a.b` (b may be a module). Relative imports are made absolute."""
    here = path.relative_to(dict((n, r) for n, r in PACKAGES)[package]).with_suffix("").parts
    parent = [package, *here[:-1]]  # the package a relative import starts from (for a module and an __init__ alike)
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]
    return names


def module_file(name: str) -> Path | None:
    """The product file a module name means (skillopt_envs.* lives under envs/), or None for anything else."""
    for package, root in PACKAGES:
        if name == package or name.startswith(package + "."):
            rel = Path(*name.split(".")[1:]) if "." in name else Path()
            for cand in (root / rel.with_suffix(".py") if rel.parts else None, root / rel / "__init__.py"):
                if cand is not None and cand.is_file():
                    return cand
    return None


def import_graph(files: list[Path]) -> dict[Path, set[Path]]:
    graph: dict[Path, set[Path]] = {}
    for f in files:
        package = next(n for n, r in PACKAGES if f.is_relative_to(r))
        graph[f] = {d for m in imported_names(f, package) if (d := module_file(m)) is not None and d != f}
    return graph


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """The strongly connected groups of more than one file (Tarjan's algorithm, iterative), each as a cycle through
    its first file so that the message shows a path to follow."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    groups: list[list[Path]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return [_loop_through(graph, set(g), g[0]) for g in groups]


def _loop_through(graph: dict[Path, set[Path]], group: set[Path], start: Path) -> list[Path]:
    """A shortest path from `start` back to itself inside its group (breadth first)."""
    came_from: dict[Path, Path] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for d in sorted(graph[node] & group):
                if d == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if d not in came_from:
                    came_from[d] = node
                    nxt.append(d)
        frontier = nxt
    return [start]


def test_no_import_cycle_in_the_product():
    found = cycles(import_graph(product_files()))
    assert not found, "import cycles (break each one; docs/architecture.md says which way imports go):\n" + "\n".join(
        " -> ".join(_rel(p) for p in c) for c in found
    )


def test_the_launch_layer_imports_no_entry_point():
    graph = import_graph(product_files())
    upward = [
        f"{_rel(f)} -> {_rel(d)}"
        for f in sorted(graph)
        if _rel(f) in LAUNCH_LAYER
        for d in sorted(graph[f])
        if _rel(d) in ENTRY_POINTS
    ]
    assert not upward, "the launch layer imports a command:\n" + "\n".join(upward)
    assert all((REPO / f).is_file() for f in LAUNCH_LAYER | ENTRY_POINTS)  # the lists name files that exist


def test_no_product_file_is_over_700_lines():
    lengths = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in product_files()}
    long = {f: n for f, n in lengths.items() if n > MAX_FILE_LINES and f not in LONG_FILES_ALLOWED}
    assert not long, f"product files over {MAX_FILE_LINES} lines (split them by job): {long}"
    stale = sorted(f for f in LONG_FILES_ALLOWED if lengths.get(f, 0) <= MAX_FILE_LINES)
    assert not stale, f"take these off LONG_FILES_ALLOWED (no longer over {MAX_FILE_LINES} lines): {stale}"


def _package(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return [tmp_path / n for n in files]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", (("skillopt_ray", tmp_path),))
    files = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from skillopt_ray.b import x\n",
            "b.py": "def x():\n    from skillopt_ray import c\n",
            "c.py": "def y():\n    from . import a\n",
            "d.py": "import skillopt_ray.a\n",
        },
    )
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    assert cycles(import_graph(files)) == [[a, b, c, a]]
    (tmp_path / "c.py").write_text("def y():\n    import json\n")
    assert cycles(import_graph(files)) == []
