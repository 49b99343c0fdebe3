"""How often does the gate decide wrongly? A simulation on the synthetic benchmark with known true qualities.

Each simulated training starts from a skill of true quality 0 (logit scale) and proposes `--steps` candidates;
a candidate's true quality is the current one's plus an effect drawn from {-e, 0, +e}. A task i has a fixed
difficulty d_i ~ N(0, spread²), and an episode of skill v on task i is won with probability sigmoid(theta_v - d_i):
a small spread makes every task a near coin flip (a noisy target), a large one makes most tasks always won or always
lost (a near-deterministic target). The episodes are the synthetic benchmark's own (`SyntheticBenchmark.run_episode`),
played through the runner's repeat contexts and scored by the runner's `summarize`; the simulated target answers
with the task id (a win) with the probability above, drawn from a seed fixed by the training, the skill and the
sample key, so a skill's episode is the same whichever gate asks. Each gate decides with the runner's
`GatePolicy`: the candidate's fresh evaluation against the current skill's stored one, as the loop does.

Counted per gate, over every step of every training: how often a worse candidate (effect -e) was accepted and a
better one (+e) refused, how often an equal one (0) was accepted, and the true quality gained by the end of the
training (in success-rate points over the task population). Gates compared at equal paid episodes: the paper's
gate and the paired gates play the same `rollouts_per_task` episodes per selection task.

Every gate of a setting plays the same seeded trainings (the same tasks and proposals), so its gain is compared with
the paper gate's training by training: the closing lines give, per setting, the sequential gate's worse candidates
accepted and its gain minus the paper gate's with the standard error of that paired difference, and whether the
sequential gate's rows hold (worse accepted <= 0.02 at 18 tasks; gain >= the paper's, or within 1 standard error).

    .venv/bin/python scripts/bench_gate.py            # paper and sequential rows (two processes; docs/performance.md)
    .venv/bin/python scripts/bench_gate.py --gates paper paired_bootstrap sign sequential   # the full table
    .venv/bin/python scripts/bench_gate.py --trainings 50 --tasks 18 --spreads 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from itertools import product
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skillopt_envs.base import EpisodeContext, EpisodeResult, Task  # noqa: E402
from skillopt_envs.chat import ChatRequest, ChatResult, content_text  # noqa: E402
from skillopt_envs.synthetic.benchmark import SyntheticBenchmark  # noqa: E402

from skillopt_ray.runs.records import Evaluation  # noqa: E402
from skillopt_ray.stages.gate import GatePolicy  # noqa: E402
from skillopt_ray.stages.rollout import repeat_context, rollout_repeats, summarize  # noqa: E402
from skillopt_ray.stages.sequential_gate import (  # noqa: E402
    Request,
    SequentialRule,
    first_samples,
    sequential_gate,
)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class SimulatedTarget:
    """The target model of the simulation: wins task i with skill v with probability sigmoid(theta_v - d_i)."""

    def __init__(self, theta: dict[str, float], difficulty: dict[str, float], seed: int):
        self.theta, self.difficulty, self.seed = theta, difficulty, seed

    async def chat(self, req: ChatRequest) -> ChatResult:
        skill, user = content_text(req.messages[0].get("content")), content_text(req.messages[1].get("content"))
        task_id = user.split(" ", 1)[0]
        p = sigmoid(self.theta[skill] - self.difficulty[task_id])
        digest = hashlib.blake2b(f"{self.seed}|{req.key}".encode(), digest_size=8).digest()
        draw = int.from_bytes(digest, "big") / 2**64  # uniform in [0, 1), fixed by the seed and the sample key
        return ChatResult(task_id if draw < p else "no")

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> Any:
        raise NotImplementedError("the simulated target only plays episodes")

    async def response_format_for(self, role: str, schema: dict, name: str) -> Any:
        return None


class InProcessRunner:
    """Plays episodes in this process (one context per task, as the environment pool takes them)."""

    def __init__(self, bench: SyntheticBenchmark, llm: SimulatedTarget):
        self.bench, self.llm = bench, llm

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop: Any = None) -> list[EpisodeResult]:
        ctxs = ctx if isinstance(ctx, list) else [ctx] * len(tasks)
        return [await self.bench.run_episode(t, skill, self.llm, c) for t, c in zip(tasks, ctxs)]


@dataclass
class Tally:
    worse: int = 0
    worse_accepted: int = 0
    better: int = 0
    better_refused: int = 0
    equal: int = 0
    equal_accepted: int = 0
    gains: list[float] | None = None
    paid: list[int] = field(default_factory=list)  # episodes paid per gate decision

    def rate(self, k: int, n: int) -> str:
        return f"{k / n:.3f}" if n else "-"


def true_quality(theta: float, difficulty: dict[str, float]) -> float:
    """A skill's expected success rate over the tasks."""
    return sum(sigmoid(theta - d) for d in difficulty.values()) / len(difficulty)


def eval_context(skill: str) -> EpisodeContext:
    return EpisodeContext(key=f"eval/{hashlib.sha256(skill.encode()).hexdigest()[:12]}", training=False,
                          max_turns=1, history_window=1, seed=0)  # fmt: skip


async def evaluate(runner: InProcessRunner, skill: str, tasks: list[Task], repeats: int) -> Evaluation:
    ctx = eval_context(skill)
    res = await rollout_repeats(runner, tasks, skill, ctx, repeats, 1.0, "selection")
    stats = summarize(res, repeats)
    # the record the runner stores (`to_dict`'s keys), without its deep copy: the stats are not changed after this
    d = {f.name: getattr(stats, f.name) for f in fields(stats)}
    if stats.repeats is None:
        d.pop("repeats")
        d.pop("task_repeats")
    return Evaluation.from_dict(d)


async def training(
    rule: SequentialRule,
    seed: int,
    n_tasks: int,
    spread: float,
    effect: float,
    steps: int,
    repeats: int,
    policy: GatePolicy,
    t: Tally,
    mix: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> None:
    rng = random.Random(seed)
    bench = SyntheticBenchmark({"options": {"tasks": n_tasks, "prompt_chars": 0}})
    tasks = bench.load_split("selection")
    difficulty = {task.task_id: rng.gauss(0.0, spread) for task in tasks}
    # the same proposals for every gate: worse, equal and better in the proportions of `mix`
    effects = rng.choices((-effect, 0.0, effect), weights=mix, k=steps)
    theta = {"# Skill v0\n": 0.0}
    runner = InProcessRunner(bench, SimulatedTarget(theta, difficulty, seed))
    current, cur_theta = "# Skill v0\n", 0.0
    cur_ev = await evaluate(runner, current, tasks, repeats)
    cur_score = best_score = policy.score(cur_ev)
    by_id = {task.task_id: task for task in tasks}
    samples = {current: first_samples(cur_ev, lambda h, s: h)}  # every sample played of each skill (hard gate)
    for step, delta in enumerate(effects, start=1):
        cand = f"# Skill v{step}\n"  # proposed from the current skill: its quality is the current one's + delta
        theta[cand] = cur_theta + delta
        ev = await evaluate(runner, cand, tasks, repeats)
        if policy.test == "sequential":
            samples[cand] = first_samples(ev, lambda h, s: h)
            names = {"candidate": cand, "current": current}
            out = await sequential_gate(rule, samples[cand], samples[current],
                                        player(runner, by_id, samples, names), len(tasks) * repeats)  # fmt: skip
            accepted, new_score = out.accepted, policy.score(ev)
            t.paid.append(out.episodes)
        else:
            rec = policy.step_record("k", ev, cur_ev, (policy.score(ev), cur_score, best_score, len(ev.tasks)))
            accepted, new_score = rec.accepted, rec.candidate_full_score or 0.0
            t.paid.append(len(tasks) * repeats)
        if delta < 0:
            t.worse += 1
            t.worse_accepted += accepted
        elif delta > 0:
            t.better += 1
            t.better_refused += not accepted
        else:
            t.equal += 1
            t.equal_accepted += accepted
        if accepted:
            current, cur_theta, cur_ev, cur_score = cand, theta[cand], ev, new_score
            best_score = max(best_score, cur_score)
    assert t.gains is not None
    t.gains.append(100 * (true_quality(cur_theta, difficulty) - true_quality(0.0, difficulty)))


def player(runner: InProcessRunner, by_id: dict[str, Task], samples: dict[str, dict[str, list[float]]],
           names: dict[str, str]) -> Any:  # fmt: skip
    """The sequential gate's `play`: the next sample of a skill on a task, in its own repeat context, kept in
    `samples` (so the current skill's extra samples serve later gates, as in the runner)."""

    async def play(requests: list[Request]) -> list[float | None]:
        out: list[float | None] = []
        for who, task_id in requests:
            skill = names[who]
            got = samples[skill].setdefault(task_id, [])
            ctx = repeat_context(eval_context(skill), len(got))
            r = (await runner.run([by_id[task_id]], skill, [ctx]))[0]
            score = r.hard if r.scored else None
            if score is not None:
                got.append(score)
            out.append(score)
        return out

    return play


def flip_rate(spread: float, n: int = 20000) -> float:
    """How often two episodes of the same skill on the same task disagree, averaged over tasks (2·p·(1-p))."""
    rng = random.Random(7)
    ps = [sigmoid(-rng.gauss(0.0, spread)) for _ in range(n)]
    return sum(2 * p * (1 - p) for p in ps) / n


GATES = {
    "paper": dict(test="none"),
    "paired_bootstrap": dict(test="paired_bootstrap"),
    "sign": dict(test="sign"),
    "sequential": dict(test="sequential"),
}


def paid_text(paid: list[int]) -> str:
    """Mean and 95th percentile of the episodes paid per gate decision."""
    ordered = sorted(paid) or [0]
    return f"{statistics.mean(ordered):.1f}, {ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]}"


@dataclass(frozen=True)
class RowSpec:
    """One row of the table: a setting and a gate, over `trainings` seeded trainings."""

    n: int
    spread: float
    effect: float
    repeats: int
    gate: str
    trainings: int
    steps: int
    alpha: float
    mix: tuple[float, ...]
    rule: SequentialRule


def cost(spec: RowSpec) -> float:
    """A row's rough CPU cost: its episodes (a sequential gate plays about twice the first pass)."""
    return spec.trainings * spec.n * spec.repeats * (2.0 if spec.gate == "sequential" else 1.0)


def table_row(spec: RowSpec) -> tuple[str, list[float], Tally]:
    """Play a row's trainings: its line, each training's gain (in seed order) and the tally (in a worker process)."""
    policy = GatePolicy("hard", 0.5, True, False, GATES[spec.gate]["test"], spec.alpha, spec.repeats)
    t = Tally(gains=[])

    async def run_all() -> None:
        for s in range(spec.trainings):
            await training(spec.rule, 1000 + s, spec.n, spec.spread, spec.effect, spec.steps, spec.repeats, policy, t,
                           spec.mix)  # type: ignore[arg-type]  # fmt: skip

    asyncio.run(run_all())
    gains = t.gains or [0.0]
    se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else 0.0
    line = (
        f"| {spec.n} | {spec.spread} ({flip_rate(spec.spread):.2f}) | {spec.effect} | {spec.repeats} | {spec.gate} "
        f"| {t.rate(t.worse_accepted, t.worse)} | {t.rate(t.better_refused, t.better)} "
        f"| {t.rate(t.equal_accepted, t.equal)} | {statistics.mean(gains):+.1f} ± {statistics.pstdev(gains):.1f} "
        f"({se:.1f}) | {paid_text(t.paid)} |"
    )
    return line, gains, t


def check_lines(specs: list[RowSpec], rows: list[tuple[str, list[float], Tally]]) -> list[str]:
    """Per setting, the sequential gate against the paper gate on the same seeded trainings: its worse candidates
    accepted, and its gain minus the paper's with the standard error of that paired difference."""
    by = {(sp.n, sp.spread, sp.effect, sp.repeats, sp.gate): row for sp, row in zip(specs, rows)}
    out = []
    for (n, spread, effect, repeats, gate), (_, gains, t) in by.items():
        paper = by.get((n, spread, effect, repeats, "paper"))
        if gate != "sequential" or paper is None:
            continue
        diffs = [a - b for a, b in zip(gains, paper[1])]
        d = statistics.mean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
        worse = t.worse_accepted / t.worse if t.worse else 0.0
        gain = "gain >= the paper's" if d >= 0 else "within 1 se" if d >= -se else "TRAILS by more than 1 se"
        fa = "" if n != 18 else " (<= 0.02)" if worse <= 0.02 else " (ABOVE 0.02)"
        out.append(f"{n} tasks, spread {spread}, effect {effect}, {repeats} repeat(s): sequential accepted "
                   f"{worse:.3f} of worse candidates{fa}; gain minus the paper gate's {d:+.1f} (se {se:.1f}): "
                   f"{gain}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainings", type=int, default=200, help="seeded trainings per setting and gate")
    ap.add_argument("--steps", type=int, default=8, help="candidates proposed per training")
    ap.add_argument("--tasks", type=int, nargs="+", default=[18, 100], help="selection tasks (18: paper's ALFWorld)")
    ap.add_argument("--spreads", type=float, nargs="+", default=[0.5, 3.0],
                    help="task difficulty spread (logit sd): 0.5 a noisy target, 3.0 a near-deterministic one")  # fmt: skip
    ap.add_argument(
        "--effects", type=float, nargs="+", default=[0.4, 1.0], help="a candidate's true effect, +-e (logits)"
    )
    ap.add_argument("--repeats", type=int, nargs="+", default=[1, 3], help="optimizer.rollouts_per_task")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--mix", type=float, nargs=3, default=[1.0, 1.0, 1.0], metavar=("WORSE", "EQUAL", "BETTER"),
                    help="how often a candidate is worse, equal, better (weights)")  # fmt: skip
    ap.add_argument("--gates", nargs="+", default=["paper", "sequential"], choices=list(GATES),
                    help="gates compared (default: the paper's and the sequential; all four: the full table)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=2, help="rows played at once, one process each")
    ap.add_argument("--sequential", type=float, nargs=6, default=None,
                    metavar=("ACCEPT", "REJECT", "FINAL", "BUDGET", "PER_SQRT", "TASK_P"),
                    help="the sequential gate's boundaries (net paired wins), extra budget and level over tasks "
                         "(default: the runner's)")  # fmt: skip
    a = ap.parse_args(argv)
    rule = SequentialRule()
    if a.sequential:
        acc, rej, fin, budget, per_sqrt, task_p = a.sequential
        rule = SequentialRule(acc, rej, fin, budget, margin_per_sqrt=per_sqrt, task_p=task_p)
    started = time.monotonic()
    print(
        f"{a.trainings} trainings x {a.steps} candidates per row; a candidate's effect is -e, 0 or +e logit "
        f"(weights {' : '.join(f'{w:g}' for w in a.mix)}); alpha={a.alpha}; hard gate"
    )
    head = (
        "| tasks | spread (flip rate) | effect e | repeats | gate | worse accepted | better refused | equal accepted "
        "| true gain, points (mean ± sd (se)) | episodes/gate (mean, p95) |"
    )
    print(head)
    print("|" + "---|" * 10, flush=True)
    specs = [
        RowSpec(n, spread, effect, r, gate, a.trainings, a.steps, a.alpha, tuple(a.mix), rule)
        for n, spread, effect, r in product(a.tasks, a.spreads, a.effects, a.repeats)
        for gate in a.gates
    ]
    rows = []
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:  # rows are independent: one per process
        # the costliest rows first (so the last ones running are short), printed in the table's order
        futures = {
            i: pool.submit(table_row, specs[i]) for i in sorted(range(len(specs)), key=lambda i: -cost(specs[i]))
        }
        for f in futures.values():  # the table waits for its first rows (the cheapest): a dot a finished row
            f.add_done_callback(lambda _: print(".", end="", file=sys.stderr, flush=True))
        for i in range(len(specs)):
            rows.append(futures[i].result())
            print(rows[-1][0], flush=True)
    for line in check_lines(specs, rows):
        print(line)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"({time.monotonic() - started:.0f} s wall clock, {a.jobs} processes, load {load:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
