"""The product's floors hold (docs/architecture.md).

A package is a folder of skillopt_ray/ (`cli`, `runs`, ...; a folder inside the sleep wing is a package of its own:
`sleep.night`; a folder deeper down belongs to its parent's package), the files at the top of skillopt_ray/ are the
`skillopt_ray` command, and the benchmarks' contract (envs/, imported as `skillopt_envs`) is one package. Every
package stands on one of FLOORS; a file imports only from its own floor or the floors beneath it, and no package
reaches itself through other packages (a folder tangle), even when no file does. An import inside a function or under
TYPE_CHECKING counts: it is the same dependency, only later. Besides: no file reaches itself through its imports, no
product file is over 700 lines, and mypy reads the benchmarks' contract under its real name.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
PACKAGES = (("skillopt_ray", REPO / "skillopt_ray"), ("skillopt_envs", REPO / "envs"))
MAX_FILE_LINES = 700
N = TypeVar("N", bound=Hashable)

# files still over the limit while they are split by job (none left: sweep.py, compare.py and config.py were split);
# the list may only shrink: an entry whose file got short, or went away, fails until it is taken off
LONG_FILES_ALLOWED: set[str] = set()

# the floors, top to bottom (docs/architecture.md draws them); a new package must be put on one
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "commands",
        frozenset(
            {"skillopt_ray", "cluster", "sweep", "compare", "transfer", "report", "dashboard"}
            | {"sleep", "sleep.night", "sleep.proposal", "sleep.harvest"}
        ),
    ),
    ("launch layer", frozenset({"cli"})),
    ("engine", frozenset({"engine"})),
    ("loop", frozenset({"loop"})),
    ("stages", frozenset({"stages", "epoch"})),
    ("harness", frozenset({"harness"})),
    ("prompts", frozenset({"prompts"})),
    ("llm", frozenset({"llm"})),
    ("runs", frozenset({"runs"})),
    ("config and skill", frozenset({"config", "skill"})),
    ("base", frozenset({"base"})),
    ("benchmarks' contract", frozenset({"skillopt_envs"})),
)
COMMANDS = FLOORS[0][1]
# the floors a run inside Ray is made of (docs/architecture.md: ENGINE)
ENGINE = frozenset().union(*(pkgs for name, pkgs in FLOORS[2:8]))


def product_files(packages=PACKAGES) -> list[Path]:
    return sorted(p for _, root in packages for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.as_posix()


def _root_of(path: Path, packages) -> tuple[str, Path]:
    return next((n, r) for n, r in packages if path.is_relative_to(r))


def imported_names(path: Path, package: str, root: Path) -> list[str]:
    """Every module a file imports, wherever the import stands (module level, in a function, under TYPE_CHECKING);
    `from a import b` names both `a` and `a.b` (b may be a module). Relative imports are made absolute."""
    here = path.relative_to(root).with_suffix("").parts
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


def module_file(name: str, packages=PACKAGES) -> Path | None:
    """The product file a module name means (skillopt_envs.* lives under envs/), or None for anything else."""
    for package, root in packages:
        if name == package or name.startswith(package + "."):
            rel = Path(*name.split(".")[1:]) if "." in name else Path()
            for cand in (root / rel.with_suffix(".py") if rel.parts else None, root / rel / "__init__.py"):
                if cand is not None and cand.is_file():
                    return cand
    return None


def import_graph(files: list[Path], packages=PACKAGES) -> dict[Path, set[Path]]:
    graph: dict[Path, set[Path]] = {}
    for f in files:
        package, root = _root_of(f, packages)
        names = imported_names(f, package, root)
        graph[f] = {d for m in names if (d := module_file(m, packages)) is not None and d != f}
    return graph


def package_of(path: Path, packages=PACKAGES) -> str:
    """`cli`, `sleep.night` (the sleep wing's folders are packages; deeper folders belong to their parent's),
    `skillopt_ray` for the files at the top (the `python -m skillopt_ray` command), `skillopt_envs` for the contract."""
    name, root = _root_of(path, packages)
    if name != "skillopt_ray":
        return name
    folders = path.relative_to(root).parts[:-1]
    if not folders:
        return name
    return ".".join(folders[:2] if folders[0] == "sleep" else folders[:1])


def package_edges(files: list[Path], packages=PACKAGES) -> dict[tuple[str, str], list[str]]:
    """(importer's package, imported package) -> the file imports behind it. `from skillopt_ray import prompts`
    also names the top-level namespace (skillopt_ray/__init__.py, which holds nothing): that name is no edge."""
    namespace = {root / "__init__.py" for n, root in packages if n == "skillopt_ray"}
    edges: dict[tuple[str, str], list[str]] = {}
    for f, deps in import_graph(files, packages).items():
        for d in sorted(deps - namespace):
            a, b = package_of(f, packages), package_of(d, packages)
            if a != b:
                edges.setdefault((a, b), []).append(f"{_rel(f)} -> {_rel(d)}")
    return edges


def floor_of(package: str) -> int:
    return next((i for i, (_, pkgs) in enumerate(FLOORS) if package in pkgs), -1)


def upward_imports(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Imports from a package to one on a higher floor (or on no floor)."""
    return [
        f"{a} ({FLOORS[floor_of(a)][0]}) -> {b} ({FLOORS[floor_of(b)][0] if floor_of(b) >= 0 else 'no floor'}): {why}"
        for (a, b), whys in sorted(edges.items())
        if floor_of(b) < floor_of(a) or floor_of(b) < 0
        for why in whys
    ]


def cycles(graph: dict[N, set[N]]) -> list[list[N]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm, iterative), each as a cycle through
    its first node so that the message shows a path to follow."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    stack: list[N] = []
    on_stack: set[N] = set()
    groups: list[list[N]] = []
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


def _loop_through(graph: dict[N, set[N]], group: set[N], start: N) -> list[N]:
    """A shortest path from `start` back to itself inside its group (breadth first)."""
    came_from: dict[N, N] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for d in sorted(graph.get(node, set()) & group):
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


def tangles(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Each folder tangle as a loop of packages, with the file imports behind each step."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    return [
        " -> ".join(loop) + "\n    " + "\n    ".join(w for a, b in zip(loop, loop[1:]) for w in edges[(a, b)])
        for loop in cycles(graph)
    ]


def _edges_from(source: str, edges: dict[tuple[str, str], list[str]], allowed: set[str]) -> list[str]:
    return [w for (a, b), whys in sorted(edges.items()) if a == source and b not in allowed for w in whys]


# ---------- the rules, on the product ----------


def test_no_import_cycle_in_the_product():
    found = cycles(import_graph(product_files()))
    assert not found, "import cycles (break each one; docs/architecture.md says which way imports go):\n" + "\n".join(
        " -> ".join(_rel(p) for p in c) for c in found
    )


def test_every_package_stands_on_one_floor():
    found = {package_of(f) for f in product_files()}
    placed = [p for _, pkgs in FLOORS for p in pkgs]
    assert len(placed) == len(set(placed)), "a package stands on two floors"
    assert not found - set(placed), (
        f"put these packages on a floor (FLOORS, docs/architecture.md): {found - set(placed)}"
    )
    assert not set(placed) - found, f"take these packages off FLOORS (they are gone): {set(placed) - found}"


def test_no_import_runs_upward():
    up = upward_imports(package_edges(product_files()))
    assert not up, "imports up a floor (move the definition down to the floor of its users):\n" + "\n".join(up)


def test_no_tangle_between_packages():
    found = tangles(package_edges(product_files()))
    assert not found, "packages that reach themselves through others (move what is shared down):\n" + "\n".join(found)


def test_the_benchmarks_import_nothing_of_skillopt_ray():
    found = _edges_from("skillopt_envs", package_edges(product_files()), set())
    assert not found, "the benchmarks' contract imports the engine:\n" + "\n".join(found)


def test_base_imports_nothing_of_the_package():
    found = _edges_from("base", package_edges(product_files()), {"skillopt_envs"})
    assert not found, "base/ imports the package:\n" + "\n".join(found)


def test_the_runs_import_only_base_config_and_skill():
    found = _edges_from("runs", package_edges(product_files()), {"base", "config", "skill", "skillopt_envs"})
    assert not found, "runs/ imports more than base, config and skill:\n" + "\n".join(found)


def test_the_engine_and_the_launch_layer_import_no_command():
    edges = package_edges(product_files())
    found = [w for (a, b), whys in sorted(edges.items()) if a in ENGINE | {"cli"} and b in COMMANDS for w in whys]
    assert not found, "the engine or the launch layer imports a command:\n" + "\n".join(found)


def test_the_top_level_namespace_holds_nothing():
    assert imported_names(REPO / "skillopt_ray" / "__init__.py", "skillopt_ray", REPO / "skillopt_ray") == []


def test_no_product_file_is_over_700_lines():
    lengths = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in product_files()}
    long = {f: n for f, n in lengths.items() if n > MAX_FILE_LINES and f not in LONG_FILES_ALLOWED}
    assert not long, f"product files over {MAX_FILE_LINES} lines (split them by job): {long}"
    stale = sorted(f for f in LONG_FILES_ALLOWED if lengths.get(f, 0) <= MAX_FILE_LINES)
    assert not stale, f"take these off LONG_FILES_ALLOWED (no longer over {MAX_FILE_LINES} lines): {stale}"


# ---------- the checks find what they name (planted trees) ----------


def _tree(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return [tmp_path / n for n in files]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    packages = (("skillopt_ray", tmp_path),)
    files = _tree(
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
    assert cycles(import_graph(files, packages)) == [[a, b, c, a]]
    (tmp_path / "c.py").write_text("def y():\n    import json\n")
    assert cycles(import_graph(files, packages)) == []


def test_an_upward_import_and_a_folder_tangle_are_found(tmp_path):
    ray_root, envs_root = tmp_path / "skillopt_ray", tmp_path / "envs"
    packages = (("skillopt_ray", ray_root), ("skillopt_envs", envs_root))
    files = _tree(
        tmp_path,
        {
            "skillopt_ray/__init__.py": "",
            "skillopt_ray/base/io.py": "def read():\n    from skillopt_ray.runs import report\n",  # up, lazily
            "skillopt_ray/runs/report.py": "",
            "skillopt_ray/runs/rundir.py": "from skillopt_ray.base.io import read\nfrom skillopt_envs.chat import x\n",
            # no file cycle, but the two commands reach each other: a tangle on one floor
            "skillopt_ray/sweep/spec.py": "from skillopt_ray.compare.stats import mean\n",
            "skillopt_ray/sweep/report.py": "",
            "skillopt_ray/compare/stats.py": "",
            "skillopt_ray/compare/render.py": "from skillopt_ray.sweep import report\n",
            "skillopt_ray/sleep/night/runner.py": "from skillopt_ray import prompts\n",  # the namespace: no edge
            "skillopt_ray/prompts/__init__.py": "",
            "envs/chat.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from skillopt_ray.llm import wire\n",
            "skillopt_ray/llm/wire.py": "",
        },
    )
    assert cycles(import_graph(files, packages)) == []
    edges = package_edges(files, packages)
    assert set(edges) == {
        ("base", "runs"),
        ("runs", "base"),
        ("runs", "skillopt_envs"),
        ("sweep", "compare"),
        ("compare", "sweep"),
        ("sleep.night", "prompts"),
        ("skillopt_envs", "llm"),
    }
    up = upward_imports(edges)
    assert [u.split(":")[0] for u in up] == [
        "base (base) -> runs (runs)",
        "skillopt_envs (benchmarks' contract) -> llm (llm)",
    ]
    assert up[0].endswith(f"{ray_root}/base/io.py -> {ray_root}/runs/report.py")
    found = tangles(edges)
    assert [t.splitlines()[0] for t in found] == ["base -> runs -> base", "compare -> sweep -> compare"]
    assert f"{ray_root}/compare/render.py -> {ray_root}/sweep/report.py" in found[1]
    assert _edges_from("skillopt_envs", edges, set()) == [f"{envs_root}/chat.py -> {ray_root}/llm/wire.py"]


def test_mypy_reads_the_benchmarks_contract_under_its_real_name(tmp_path):
    """The project's mypy settings (what CI runs) resolve `skillopt_envs` to envs/, not to Any through the editable
    install's import hook: a wrong use of a contract type is an error."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from skillopt_envs.base import Task\nfrom skillopt_envs.chat import ChatRequest\n\n"
        'wrong: int = Task("t1", "kind")\nreq = ChatRequest("target", "rollout", "not a list of messages")\n'
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            os.devnull,
            "--follow-imports",
            "silent",
            str(probe),
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert 'incompatible type "str"; expected "list[ChatMessage]"' in out.stdout, out.stdout + out.stderr
    assert 'expression has type "Task", variable has type "int"' in out.stdout, out.stdout + out.stderr
