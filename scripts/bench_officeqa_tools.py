"""OfficeQA tool loop: the episode's own time per turn, apart from the model, with 24-turn episodes.

A scripted OpenAI-compatible server on localhost plays the target: every turn but the last it calls one or two
tools (glob, grep, read, cycling) on the item's bulletin, and on turn 24 it answers. The corpus is generated
before the clock starts: `--docs` bulletin-like text files of about `--doc-kb` KB each (tables and prose, in
the parsed layout, with page JSONs for the oracle context). Episodes run through the env-actor pool (Ray
actors; the tools run in the actor playing the episode) and talk to the model through the gateway actor.

Each episode reports where its time went (info.timing_s, measured inside the env actor): waiting on the model
(the HTTP round trip through the gateway), in the tools, and the rest (prompt and message building, the
oracle pages, bookkeeping). Per turn, non-model time = (episode - model) / turns.

    python scripts/bench_officeqa_tools.py
    python scripts/bench_officeqa_tools.py --episodes 32 --docs 300 --doc-kb 800 --latency 0.05

Memory on one large file (no Ray, no model): `--rss-file-mb 256` writes a bulletin-like file of that size (table rows,
and one 10 MB line) and runs read (a window past the middle) and grep (a rare pattern, then a common one) in a fresh
process per mode: `streamed` (files over 8 MB are streamed, as the tools run) and `whole` (every file read whole, as
they did before). It reports each mode's peak resident memory above the process's start and the tools' time.

    python scripts/bench_officeqa_tools.py --rss-file-mb 256
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skillopt_envs.base import EnvSettings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted OpenAI-compatible server, a test double, lives with the tests

import ray  # noqa: E402
from scripted_server import ScriptedServer  # noqa: E402
from skillopt_envs.base import EpisodeContext  # noqa: E402
from skillopt_envs.officeqa.benchmark import SEED_SKILL, OfficeQABenchmark  # noqa: E402
from skillopt_envs.officeqa.samples import make_bulletins, write_bulletin  # noqa: E402

from skillopt_ray.engine.envpool import EnvPool, PoolSettings  # noqa: E402
from skillopt_ray.llm.gateway import GatewayActor  # noqa: E402

TURNS = 24


def make_corpus(root: Path, docs: int, doc_kb: int, episodes: int) -> Path:
    """`docs` bulletins of about doc_kb KB (the sample bulletins' pages, padded with numbered table rows) and one
    question per episode, each on its own bulletin, citing page 2 (so the oracle context is built too)."""
    parsed = root / "treasury_bulletins_parsed"
    (parsed / "transformed").mkdir(parents=True)
    (parsed / "jsons").mkdir()
    base = make_bulletins()
    names = []
    for i in range(docs):
        b = base[i % len(base)]
        b.year, b.month = 1939 + i // 12, 1 + i % 12
        write_bulletin(b, parsed / "transformed", parsed / "jsons")
        path = parsed / "transformed" / f"{b.name}.txt"
        pad = "".join(
            f"| Series {n} | {n * 37 % 9973:,}.{n % 10} | {n * 91 % 7919:,}.{n % 7} |\n" for n in range(doc_kb * 24)
        )
        path.write_text(path.read_text() + pad[: doc_kb * 1024])
        names.append(b.name)
    rows = [
        {
            "uid": f"BENCH{e:04d}",
            "question": f"What is the total in {names[e % docs]}?",
            "answer": "1",
            "source_files": f"{names[e % docs]}.txt",
            "source_docs": f"https://fraser.example/{names[e % docs]}?page=2",
            "category": "hard",
        }
        for e in range(episodes)
    ]
    for split in ("train", "val", "test"):
        (root / split).mkdir()
        with (root / split / f"{split}.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return root


def policy(body: dict, headers: dict) -> object:
    """Turns 1-23: tool calls on the first candidate file (glob; grep; read a window further on); turn 24: answer."""
    msgs = body["messages"]
    turn = sum(m["role"] == "assistant" for m in msgs) + 1
    path = re.findall(r"^- (/\S+\.txt)$", msgs[1]["content"], re.M)[0]
    if turn >= TURNS:
        return "<answer>1</answer>"
    kind = turn % 3
    if kind == 1:
        calls: list[tuple[str, dict[str, object]]] = [("glob", {"pattern": f"*{Path(path).stem[-7:]}*"})]
    elif kind == 2:
        calls = [("grep", {"pattern": "Series 4", "path": path}), ("grep", {"pattern": "gold stock", "path": path})]
    else:
        calls = [("read", {"path": path, "start": 1 + 80 * turn, "limit": 80})]
    return {
        "content": "",
        "tool_calls": [
            {"id": f"t{turn}_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def run(a: argparse.Namespace, data: Path) -> dict:
    env_cfg: EnvSettings = {"data_dir": str(data), "max_turns": TURNS, "options": {"target_provider": "openai"}}
    tasks = OfficeQABenchmark(env_cfg).load_split("test")
    srv = ScriptedServer(policy=policy, latency_s=a.latency)
    srv.start()
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": srv.base_url,
        "structured_output": "none",
        "max_concurrency": 64,
        "max_completion_tokens": 16384,
    }
    gw = GatewayActor.remote({"backend": "compatible", "target": role, "optimizer": role}, None, None)  # type: ignore[attr-defined]  # .remote comes from @ray.remote
    try:
        pool = EnvPool("officeqa", env_cfg, gw, PoolSettings(a.actors, a.per_actor, 0.0, 900.0, 0))
        ray.get([act.pid.remote() for act in pool.actors])  # actors (and their corpus index) up before the clock
        t0 = time.monotonic()
        results = asyncio.run(pool.run(tasks, SEED_SKILL, EpisodeContext("bench", False, TURNS, 0)))
        wall = time.monotonic() - t0
        pool.shutdown()
    finally:
        ray.kill(gw)
        srv.stop()
    bad = [r for r in results if r.infra_error or r.error]
    if bad:
        raise SystemExit(f"{len(bad)} episodes failed: {bad[0].error}")
    per_turn_ms, tool_ms, other_ms, model_ms = [], [], [], []
    calls = 0
    for r in results:
        t = r.info["timing_s"]
        turns = t["model_calls"]
        calls += r.info["tool_calls"]
        per_turn_ms.append(1000 * (t["episode"] - t["model"]) / turns)
        tool_ms.append(1000 * t["tools"] / turns)
        other_ms.append(1000 * (t["episode"] - t["model"] - t["tools"]) / turns)
        model_ms.append(1000 * t["model"] / turns)

    def stats(xs: list[float]) -> dict:
        xs = sorted(xs)
        return {
            "mean": round(statistics.fmean(xs), 3),
            "p50": round(xs[len(xs) // 2], 3),
            "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3),
        }

    return {
        "episodes": len(results),
        "turns_per_episode": TURNS,
        "tool_calls": calls,
        "answered_right": int(sum(r.hard for r in results)),
        "wall_s": round(wall, 2),
        "server_latency_s": a.latency,
        "non_model_ms_per_turn": stats(per_turn_ms),
        "tools_ms_per_turn": stats(tool_ms),
        "rest_ms_per_turn": stats(other_ms),
        "model_wait_ms_per_turn": stats(model_ms),
    }


_RSS_PROBE = """
import json, resource, sys, time
import skillopt_envs.officeqa.tools as T
if sys.argv[2] == "whole":
    T.WHOLE_FILE_BYTES = 1 << 62
path = sys.argv[1]
rt = T.ToolRuntime([T.Path(path).parent], set())
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {"start_peak_rss_mb": round(base / 1024, 1)}
t0 = time.perf_counter()
out["read_chars"] = len(rt.read(path, int(sys.argv[3]), 80).output)
out["grep_rare_chars"] = len(rt.grep("needle in the haystack", path).output)
out["grep_common_chars"] = len(rt.grep("series", path).output)
out["tools_s"] = round(time.perf_counter() - t0, 2)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out["peak_rss_mb"] = round(peak / 1024, 1)
out["peak_rss_above_start_mb"] = round((peak - base) / 1024, 1)  # 0: never above the peak the imports reached
print(json.dumps(out))
"""


def rss_bench(mb: int) -> dict:
    """Peak RSS of read + grep on one `mb` MB file, streamed and read whole, each in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="bench-officeqa-rss-") as tmp:
        path = Path(tmp) / "treasury_bulletin_big.txt"
        row = "| Series {n} | {a:,}.{b} | {c:,}.{d} |\n"
        lines = 0
        with path.open("w", encoding="utf-8") as f:
            f.write("x" * (10 << 20) + "\n")  # one 10 MB line
            size = 10 << 20
            while size < mb << 20:
                chunk = "".join(
                    row.format(n=n, a=n * 37 % 9973, b=n % 10, c=n * 91 % 7919, d=n % 7)
                    for n in range(lines, lines + 4096)
                )
                f.write(chunk)
                size += len(chunk)
                lines += 4096
            f.write("the needle in the haystack\n")
        out: dict = {"file_mb": round(path.stat().st_size / (1 << 20), 1), "lines": lines + 2}
        for mode in ("streamed", "whole"):
            done = subprocess.run(
                [sys.executable, "-c", _RSS_PROBE, str(path), mode, str(lines // 2)],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            if done.returncode != 0:
                out[mode] = {"failed": (done.stderr.strip().splitlines() or ["?"])[-1]}
            else:
                out[mode] = json.loads(done.stdout)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--docs", type=int, default=120)
    ap.add_argument("--doc-kb", type=int, default=400, help="approximate size of each bulletin text file")
    ap.add_argument("--latency", type=float, default=0.0, help="the scripted server's delay per call (seconds)")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--per-actor", type=int, default=4, help="episodes in flight per env actor")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--rss-file-mb", type=int, default=0, help="only measure the tools' memory on one file this large")
    a = ap.parse_args()
    if a.rss_file_mb:
        rss = rss_bench(a.rss_file_mb)
        print(json.dumps(rss, indent=2))
        if a.json:
            Path(a.json).write_text(json.dumps(rss, indent=2))
        return 0
    tmp = tempfile.TemporaryDirectory(prefix="bench-officeqa-")
    t0 = time.monotonic()
    data = make_corpus(Path(tmp.name) / "data", a.docs, a.doc_kb, a.episodes)
    made = time.monotonic() - t0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=200 * 1024 * 1024,
    )
    try:
        out = run(a, data)
    finally:
        ray.shutdown()
        tmp.cleanup()
    out = {"docs": a.docs, "doc_kb": a.doc_kb, "corpus_made_s": round(made, 1), "cpus": os.cpu_count(), **out}
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
