"""The benchmark contract: benchmarks reach nothing of the engine (they import skillopt_envs.base, .chat and .kit, never
skillopt_ray, not even inside a function), the files under envs/ import one another without cycles, and an episode's
target calls are booked under the stage its context names (the engine sets it), without the stage changing any cache
key."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import skillopt_envs
from helpers import gateway
from scripted_server import ScriptedServer

from skillopt_ray.loop.evaluation import Evaluator

ROOT = Path(__file__).resolve().parents[2]
ENVS = ROOT / "envs"


def _imports(path: Path) -> list[str]:
    """Every module a file imports (lazy imports inside functions included)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def _env_files(root: Path = ENVS) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def engine_imports(root: Path = ENVS) -> list[str]:
    """`file: module` for every import of the engine (skillopt_ray) by a file under `root`, every benchmark alike."""
    return [
        f"{p.relative_to(root)}: {m}"
        for p in _env_files(root)
        for m in _imports(p)
        if m == "skillopt_ray" or m.startswith("skillopt_ray.")
    ]


def test_benchmarks_import_no_engine_internals():
    found = engine_imports()
    assert not found, "benchmarks must reach the engine through skillopt_envs (base, chat, kit) only:\n" + "\n".join(
        found
    )


def test_an_engine_import_planted_in_a_benchmark_is_found(tmp_path):
    """The check names what it finds, in any benchmark's folder, at module level or inside a function."""
    (tmp_path / "kit.py").write_text("from skillopt_envs.chat import ChatRequest\n")
    (tmp_path / "alfworld").mkdir()
    (tmp_path / "alfworld" / "benchmark.py").write_text("from skillopt_ray.llm.wire import ChatBody\n")
    (tmp_path / "newbench").mkdir()
    (tmp_path / "newbench" / "agent.py").write_text("def f():\n    import skillopt_ray.engine.driver\n")
    assert engine_imports(tmp_path) == [
        "alfworld/benchmark.py: skillopt_ray.llm.wire",
        "alfworld/benchmark.py: skillopt_ray.llm.wire.ChatBody",
        "newbench/agent.py: skillopt_ray.engine.driver",
    ]


def _module_file(name: str) -> Path | None:
    """The file a module name means, for the package's own modules (skillopt_envs.* under envs/, skillopt_ray.*)."""
    for prefix, root in (("skillopt_envs", ENVS), ("skillopt_ray", ROOT / "skillopt_ray")):
        if name == prefix or name.startswith(prefix + "."):
            rel = Path(*name.split(".")[1:])
            for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if str(rel) != "." and cand.is_file():
                    return cand
    return None


def _graph(files: list[Path]) -> dict[Path, set[Path]]:
    """file -> the package files it imports, followed into skillopt_ray so that a cycle through the engine shows."""
    graph: dict[Path, set[Path]] = {}
    todo = list(files)
    while todo:
        f = todo.pop()
        if f in graph:
            continue
        deps = {d for m in _imports(f) if (d := _module_file(m)) is not None and d != f}
        graph[f] = deps
        todo += [d for d in deps if d not in graph]
    return graph


def _path_back(graph: dict[Path, set[Path]], start: Path) -> list[Path]:
    """Files leading from `start` back to itself through its imports, or [] when none does."""
    seen: set[Path] = set()
    trail: dict[Path, Path] = {}
    todo = [start]
    while todo:
        n = todo.pop()
        for d in sorted(graph.get(n, ())):
            if d == start:
                out = [n]
                while out[-1] != start:
                    out.append(trail[out[-1]])
                return [*reversed(out), start]
            if d not in seen:
                seen.add(d)
                trail[d] = n
                todo.append(d)
    return []


def test_no_import_cycle_through_a_benchmark_file():
    graph = _graph(_env_files())
    files = _env_files()
    cycles = [c for f in files if (c := _path_back(graph, f))]
    assert not cycles, "import cycle: " + " -> ".join(str(p.relative_to(ROOT)) for p in cycles[0])


def test_the_cycle_finder_finds_one():
    a, b, c = Path("a"), Path("b"), Path("c")
    assert _path_back({a: {b}, b: {c}, c: {a}}, a) == [a, b, c, a]
    assert _path_back({a: {b}, b: {c}, c: set()}, a) == []


# ---------- the episode's stage ----------


def _answer(body, headers):
    return "<answer>4</answer>"


def test_a_selection_episode_books_its_chat_calls_under_validate(tmp_path, run):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "q1", "prompt": "2+2?", "answer": "4", "split": "val"}) + "\n")
    bench = skillopt_envs.make("custom", {"name": "custom", "data_dir": str(data), "options": {}})
    task = bench.load_split("val")[0]
    ev = Evaluator(None, None, None, SimpleNamespace(max_turns=1, history_window=0), 0.0, None)
    ctx = ev.context("eval/abc123", False)
    assert ctx.stage == "validate"
    with ScriptedServer(policy=_answer) as srv:
        gw = gateway(srv.base_url, cache=str(tmp_path / "cache.sqlite"))
        res = run(bench.run_episode(task, "# skill", gw, ctx))
        assert res.hard == 1.0
        assert gw.ledger.entries["target/validate"].calls == 1 and "target/rollout" not in gw.ledger.entries
        # the same episode as a training rollout would be the same cache entry: the stage is not in the key
        again = run(bench.run_episode(task, "# skill", gw, replace(ctx, stage="rollout")))
        assert again.hard == 1.0 and sum(srv.state.requests.values()) == 1


# ---------- the check script is part of the run's identity ----------


def test_an_edited_check_script_does_not_resume_with_the_old_scores(tmp_path):
    from skillopt_ray.cli import identity, load
    from skillopt_ray.cli.errors import UsageError
    from skillopt_ray.cli.launch import run_dir_for

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "say hi", "answer": "hi"}) + "\n" for i in range(6)))
    check = tmp_path / "check.py"
    check.write_text("print(1.0)\n")
    over = [
        "+experiment=custom",
        f"env.data_dir={tasks}",
        "env.options.scorer=script",
        f"env.options.check={check}",
        f"output_dir={tmp_path / 'out'}",
    ]
    derived = run_dir_for(load(over))
    named = load([*over, "run_name=mine"])
    rd = run_dir_for(named)
    rd.mkdir(parents=True)
    identity.check_or_record(rd, identity.identity_record(named), resuming=True)
    identity.check_or_record(rd, identity.identity_record(named), resuming=True)  # unchanged: resumes
    check.write_text("print(0.0)\n")  # the same size: only the content says it changed
    assert run_dir_for(load(over)) != derived
    try:
        identity.check_or_record(rd, identity.identity_record(load([*over, "run_name=mine"])), resuming=True)
    except UsageError as e:
        assert "the benchmark data" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("a run whose check script changed resumed")
