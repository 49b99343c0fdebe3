"""Per-episode overhead of the agent harnesses against a chat episode (SearchQA, scripted model, no Ray).

For each target it runs N SearchQA episodes through an in-process gateway against the tests' scripted server
(the agent reads SKILL.md with one shell call, then answers: two model calls) and prints the median wall time per
episode, the time from launch to the agent's first model call, and the jail floor (bubblewrap and the forwarder
starting `true`).

    .venv/bin/python scripts/bench_harness.py --episodes 5

`--benchmarks docvqa,livemathematicianbench,officeqa` also times the agent targets on those benchmarks' built-in
samples (three model calls per episode: read SKILL.md, read task.md, answer; the answer is not scored here).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


async def _jail_floor(n: int) -> float:
    from skillopt_ray.harness.jail import Jail, default_prefix, jail_env

    times = []
    for _ in range(n):
        root = Path(tempfile.mkdtemp(prefix="skillopt-bench-"))
        ws = root / "ws"
        ws.mkdir()
        jail = Jail(root / "j", default_prefix(None))
        t0 = time.monotonic()
        res = await jail.run(ws, jail_env(jail.home_path(), jail.prefix_path(), {}), ["true"], 30, 4096)
        times.append(time.monotonic() - t0)
        assert res.returncode == 0, res.stderr
    return statistics.median(times)


def _other_benchmarks(
    names: list[str], targets: list[str], episodes: int, tmp: Path
) -> list[tuple[str, str, float, float]]:
    """(benchmark, target, median episode s, median launch-to-first-call s) on each benchmark's sample items."""
    import skillopt_envs
    from scripted_server import ScriptedServer
    from test_harness_benchmarks_e2e import ShellAgent
    from test_harness_e2e import _eval, _gateway

    rows = []
    for name in names:
        bench = skillopt_envs.make(name, {})
        tasks = (bench.load_split("test") * episodes)[:episodes]
        agent = ShellAgent(lambda _t: ["cat task.md"], lambda _t, _tools: "<answer>A</answer>")
        with ScriptedServer(policy=agent) as srv:
            for target in targets:
                walls, firsts = [], []
                for i, t in enumerate(tasks):
                    gw = _gateway(srv.base_url, target, tmp / f"{name}-{target}{i}", "off")
                    t0 = time.monotonic()
                    (res,) = asyncio.run(_eval(gw, bench, [t], "RULE: read the task"))
                    walls.append(time.monotonic() - t0)
                    assert not res.infra_error, (name, target, res.error)
                    firsts.append(res.info["agent_first_call_s"])
                rows.append((name, target, statistics.median(walls), statistics.median(firsts)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--targets", default="chat,codex,claude_code")
    ap.add_argument("--benchmarks", default="", help="also time the agent targets on these benchmarks (comma list)")
    args = ap.parse_args()
    from conftest import qa_fixture
    from scripted_server import ScriptedServer
    from skillopt_envs.searchqa.benchmark import SearchQABenchmark
    from test_harness_e2e import AgentPolicy, _eval, _gateway

    tmp = Path(tempfile.mkdtemp(prefix="skillopt-bench-"))
    answers = qa_fixture(tmp / "qa")
    bench = SearchQABenchmark({"data_dir": str(tmp / "qa"), "options": {"split_source": "folders"}})
    tasks = (bench.load_split("train") * 4)[: args.episodes]
    policy = AgentPolicy(answers)
    chat_answers = {t: v for t, v in answers.items()}

    def chat_policy(body, headers):
        if body.get("tools"):
            return policy(body, headers)
        import re

        m = re.search(r"/([^/]+)/t\d+$", headers.get("x-skillopt-key", ""))
        return chat_answers[m.group(1)][1]

    rows = []
    with ScriptedServer(policy=chat_policy) as srv:
        for target in args.targets.split(","):
            walls, firsts = [], []
            for i, t in enumerate(tasks):
                gw = _gateway(srv.base_url, target, tmp / f"{target}{i}", "off")
                t0 = time.monotonic()
                (res,) = asyncio.run(_eval(gw, bench, [t], "RULE-qa: short answers"))
                walls.append(time.monotonic() - t0)
                assert res.hard == 1.0, (target, res.error)
                if res.info.get("agent_first_call_s") is not None:
                    firsts.append(res.info["agent_first_call_s"])
            rows.append((target, statistics.median(walls), statistics.median(firsts) if firsts else None))
    floor = asyncio.run(_jail_floor(args.episodes))
    print(f"{'target':<12} {'episode s (median)':>19} {'launch -> 1st call s':>21} {'overhead vs chat s':>19}")
    chat = next((w for t, w, _ in rows if t == "chat"), 0.0)
    for target, wall, first in rows:
        f = f"{first:.2f}" if first is not None else "-"
        print(f"{target:<12} {wall:>19.2f} {f:>21} {wall - chat:>19.2f}")
    print(f"jail floor (bwrap + forwarder running `true`): {floor:.2f} s median of {args.episodes}")
    if args.benchmarks:
        agents = [t for t in args.targets.split(",") if t != "chat"]
        print(f"\n{'benchmark':<24} {'target':<12} {'episode s (median)':>19} {'launch -> 1st call s':>21}")
        for name, target, wall, first in _other_benchmarks(args.benchmarks.split(","), agents, args.episodes, tmp):
            print(f"{name:<24} {target:<12} {wall:>19.2f} {first:>21.2f}")


if __name__ == "__main__":
    main()
