"""How often does the gate decide wrongly on judged rubric tasks? A simulation with a noisy, position-biased judge.

Each simulated night has `--tasks` validation tasks that only a judge can score. An episode of a skill on task i
ends in a good outcome with probability sigmoid(theta - d_i) (d_i ~ N(0, spread²)), else a bad one. The judge is
the runner's own `Judge` (both orders, a disagreement is a tie, a tie judged again `optimizer.gate_judge_reask`
times) over a simulated judge model: shown a good and a bad outcome it prefers the good one with probability
1 - `--noise`; shown two of the same quality it answers "A" (the outcome shown first) with probability `--bias`,
else "B" or tie; each call is an independent draw (every outcome has its own text, so no task settles). The
decision is the runner's sequential gate (`sequential_gate`, with the rule of the `+experiment=sleep` preset a
night runs) with the judge as its pairwise verdict, the candidate and the current skill sampled in their own
repeat order, as in a night.

Counted per row: how often a useless rule (theta unchanged) is accepted, how often a helpful one (+`--effect`
logits) is accepted, and how a harmful one (-effect) fares; and the judge calls paid per decision.

    .venv/bin/python scripts/bench_judge.py                  # the table in docs/sleep.md (about a CPU-minute)
    .venv/bin/python scripts/bench_judge.py --tasks 6 12 --noise 0.1 0.3 --nights 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skillopt_envs.chat import JsonResult  # noqa: E402

from skillopt_ray.stages.judge import Judge, Material  # noqa: E402
from skillopt_ray.stages.sequential_gate import Request, SequentialRule, sequential_gate  # noqa: E402


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class NoisyJudgeModel:
    """The judge model: reads the quoted outcomes (GOOD/BAD) and answers with noise and a position bias."""

    def __init__(self, rng: random.Random, noise: float, bias: float):
        self.rng, self.noise, self.bias = rng, noise, bias
        self.calls = 0

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        self.calls += 1
        data = json.loads(req.messages[1]["content"])
        a, b = data["outcome_a"].startswith("GOOD"), data["outcome_b"].startswith("GOOD")
        r = self.rng.random()
        if a != b:  # a good and a bad outcome: the good one, unless the judge errs
            better = ("A" if a else "B") if r >= self.noise else ("B" if a else "A")
        else:  # the same quality: the first shown with probability bias, else the second or a tie
            better = "A" if r < self.bias else ("B" if r < self.bias + (1 - self.bias) / 2 else "tie")
        out = {"better": better, "reason": "simulated"}
        return JsonResult(out, json.dumps(out))


@dataclass
class Row:
    accepted: int = 0
    nights: int = 0

    def rate(self) -> float:
        return self.accepted / self.nights if self.nights else 0.0


async def one_night(seed: int, n_tasks: int, spread: float, effect: float, noise: float, bias: float,
                    rule: SequentialRule) -> tuple[bool, int]:  # fmt: skip
    """One gate decision on judged tasks: (accepted, judge calls paid)."""
    rng = random.Random(seed)
    difficulty = {f"t{i}": rng.gauss(0.0, spread) for i in range(n_tasks)}
    theta = {"current": 0.0, "candidate": effect}
    outcomes: dict[str, dict[str, list[str]]] = {"current": {}, "candidate": {}}

    def sample(who: str, t: str) -> float:
        got = outcomes[who].setdefault(t, [])
        good = rng.random() < sigmoid(theta[who] - difficulty[t])
        got.append(f"{'GOOD' if good else 'BAD'} outcome {who} {t} #{len(got)}")
        return float(good)

    cand = {t: [sample("candidate", t)] for t in difficulty}
    cur = {t: [sample("current", t)] for t in difficulty}
    model = NoisyJudgeModel(rng, noise, bias)
    judge = Judge(model)

    async def play(requests: list[Request]) -> list[Optional[float]]:
        return [sample(who, t) for who, t in requests]

    async def verdict(t: str, j: int) -> Optional[float]:
        m = Material(t, "Tidy the notes file.", "The notes are tidied completely.")
        cur_j, cand_j = outcomes["current"][t][j], outcomes["candidate"][t][j]
        return await judge.pairwise(m, cur_j, cand_j, f"gate/{t}/{j}", rule.judge_reask)

    def replayed(t: str) -> bool:  # as the runner tells it: every outcome of both sides the same text
        return all(len(set(outcomes[w][t])) == 1 for w in outcomes)

    out = await sequential_gate(rule, cand, cur, play, n_tasks, verdict, frozenset(difficulty), replayed)
    return out.accepted, model.calls


def night_rule() -> SequentialRule:
    """The sequential gate a night runs: the `+experiment=sleep` preset's, composed as a night composes it."""
    from skillopt_ray import cli
    from skillopt_ray.stages.gate import GatePolicy

    cfg = cli.compose(["+experiment=sleep", "env.data_dir=/nowhere"])
    return GatePolicy.from_config(cfg.optimizer, 6, False).rule


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=400, help="simulated gate decisions per row and rule kind")
    ap.add_argument("--tasks", type=int, nargs="+", default=[6, 12], help="validation tasks")
    ap.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2, 0.25], help="the judge's error rate on a pair")
    ap.add_argument("--bias", type=float, default=0.7, help="how often the judge picks the first shown of equals")
    ap.add_argument("--spread", type=float, default=1.0, help="task difficulty spread (logit sd)")
    ap.add_argument("--effect", type=float, default=2.0, help="a helpful rule's effect (logits); harmful: minus it")
    ap.add_argument("--min-extra", type=int, default=None, help="optimizer.gate_seq_min_extra (default: the runner's)")
    ap.add_argument("--task-p", type=float, default=None, help="optimizer.gate_seq_task_p (default: the runner's)")
    ap.add_argument("--per-look", type=int, default=None, help="pairs per look (default: the runner's)")
    ap.add_argument("--interim", type=float, default=None, help="a look's share of task_p (default: the runner's)")
    ap.add_argument("--reask", type=int, default=None, help="optimizer.gate_judge_reask (default: the runner's)")
    a = ap.parse_args(argv)
    rule = night_rule()
    if a.interim is not None:
        rule = replace(rule, interim_share=a.interim)
    if a.per_look is not None:
        rule = replace(rule, pairs_per_look=a.per_look)
    if a.min_extra is not None:
        rule = replace(rule, min_extra=a.min_extra)
    if a.task_p is not None:
        rule = replace(rule, task_p=a.task_p)
    if a.reask is not None:
        rule = replace(rule, judge_reask=a.reask)
    print(f"{a.nights} simulated gate decisions per cell; a night's sequential gate (task_p={rule.task_p}, a look at "
          f"{rule.interim_share:g} of it, accept at +{rule.accept_at:g}, at least {rule.min_extra} extra episodes, "
          f"a tie judged again {rule.judge_reask}x); "
          f"judge bias to the first shown {a.bias}; effect ±{a.effect} logits")  # fmt: skip
    print(
        "| tasks | judge noise | useless accepted | helpful accepted | harmful accepted | judge calls/decision (mean) |"
    )
    print("|---|---|---|---|---|---|")
    for n, noise in product(a.tasks, a.noise):
        rows, calls = {k: Row() for k in ("useless", "helpful", "harmful")}, []
        for kind, eff in (("useless", 0.0), ("helpful", a.effect), ("harmful", -a.effect)):
            for s in range(a.nights):
                acc, c = asyncio.run(one_night(7000 + s, n, a.spread, eff, noise, a.bias, rule))
                rows[kind].accepted += acc
                rows[kind].nights += 1
                calls.append(c)
        print(f"| {n} | {noise} | {rows['useless'].rate():.3f} | {rows['helpful'].rate():.3f} "
              f"| {rows['harmful'].rate():.3f} | {statistics.mean(calls):.1f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
