"""The sequential gate on judged tasks (a rubric, no rule check; issue 47): with a noisy, position-biased judge at
6 validation tasks a helpful rule is accepted and a useless one refused (seeded nights, as scripts/bench_judge.py
plays them), a judge that prefers the first shown never accepts, equal verdicts on fresh outcomes do not settle a
task while replayed outcomes do, and a task whose sign is clear stops taking pairs while others are open."""

from __future__ import annotations

import asyncio
import json
import math
import random
from typing import Any, Optional

from skillopt_envs.chat import JsonResult

from skillopt_ray.config import OptimizerConfig
from skillopt_ray.stages.gate import GatePolicy
from skillopt_ray.stages.judge import Judge, Material
from skillopt_ray.stages.sequential_gate import SequentialRule, sequential_gate

# the night preset's gate (conf/experiment/sleep.yaml): the task-level test at 0.05, looks at 0.03 of it, 240 extra
NIGHT = SequentialRule(task_p=0.05, interim_share=0.03, min_extra=240)
M = Material("t", "Tidy the notes file.", "The notes are tidied completely.")


class NoisyJudge:
    """Prefers the GOOD outcome but errs with probability `noise`; of two equal ones it picks the first shown with
    probability `bias`, else the second or a tie. `bias=None`: always "A" (the first shown), whatever it reads."""

    def __init__(self, rng: random.Random, noise: float, bias: Optional[float]):
        self.rng, self.noise, self.bias = rng, noise, bias
        self.calls = 0

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        self.calls += 1
        data = json.loads(req.messages[1]["content"])
        a, b = data["outcome_a"].startswith("GOOD"), data["outcome_b"].startswith("GOOD")
        r = self.rng.random()
        if self.bias is None:
            better = "A"
        elif a != b:
            better = ("A" if a else "B") if r >= self.noise else ("B" if a else "A")
        else:
            better = "A" if r < self.bias else ("B" if r < self.bias + (1 - self.bias) / 2 else "tie")
        return JsonResult({"better": better, "reason": "simulated"}, "")


def night(seed: int, effect: float, noise: float = 0.2, bias: Optional[float] = 0.7, n: int = 6) -> Any:
    """One gate decision on `n` judged tasks: a good outcome with probability sigmoid(theta - d_i)."""
    rng = random.Random(seed)
    difficulty = {f"t{i}": rng.gauss(0.0, 1.0) for i in range(n)}
    theta = {"current": 0.0, "candidate": effect}
    outcomes: dict[str, dict[str, list[str]]] = {"current": {}, "candidate": {}}

    def sample(who: str, t: str) -> float:
        got = outcomes[who].setdefault(t, [])
        good = rng.random() < 1 / (1 + math.exp(difficulty[t] - theta[who]))
        got.append(f"{'GOOD' if good else 'BAD'} {who} {t} #{len(got)}")
        return float(good)

    cand = {t: [sample("candidate", t)] for t in difficulty}
    cur = {t: [sample("current", t)] for t in difficulty}
    model = NoisyJudge(rng, noise, bias)
    judge = Judge(model)

    async def play(requests: list[tuple[str, str]]) -> list[Optional[float]]:
        return [sample(who, t) for who, t in requests]

    async def verdict(t: str, j: int) -> Optional[float]:
        cur_j, cand_j = outcomes["current"][t][j], outcomes["candidate"][t][j]
        return await judge.pairwise(M, cur_j, cand_j, f"gate/{t}/{j}", NIGHT.judge_reask)

    def replayed(t: str) -> bool:
        return all(len(set(outcomes[w][t])) == 1 for w in outcomes)

    out = asyncio.run(sequential_gate(NIGHT, cand, cur, play, n, verdict, frozenset(difficulty), replayed))
    return out, model.calls


def test_a_helpful_rule_is_accepted_and_a_useless_one_refused_at_6_judged_tasks():
    """Before issue 47's second pass a helpful rule was accepted in about half such nights (chance runs of equal
    verdicts settled tasks at 0, and a tie was never looked at again)."""
    seeds = range(30)
    helpful = [night(900 + s, 2.0)[0] for s in seeds]
    useless = [night(900 + s, 0.0)[0] for s in seeds]
    assert sum(o.accepted for o in helpful) >= 24, [(o.stopped, o.p_value) for o in helpful]
    assert sum(o.accepted for o in useless) <= 2
    assert all(o.n_tasks == 6 and o.episodes <= 6 + 240 for o in helpful + useless)


def test_a_judge_that_prefers_the_first_shown_never_accepts_even_a_helpful_rule():
    for s in range(5):
        out, calls = night(300 + s, 2.0, bias=None)
        assert not out.accepted and out.net == 0 and out.tasks_better == 0
        assert calls == 4 * out.pairs  # every round a tie: each pair judged twice more (both orders)


def judged_run(cand_texts: dict[str, list[str]], cur_texts: dict[str, list[str]], log: list[Any],
               rule: SequentialRule = SequentialRule(task_p=0.05, min_extra=40)) -> Any:  # fmt: skip
    """A gate on judged tasks with scripted outcomes (each play hands out the next text); a fair judge: a text
    containing 'tidy' beats one that does not, two alike tie."""
    texts = {
        "candidate": {t: list(v) for t, v in cand_texts.items()},
        "current": {t: list(v) for t, v in cur_texts.items()},
    }
    shown: dict[str, dict[str, list[str]]] = {w: {t: [v.pop(0)] for t, v in texts[w].items()} for w in texts}

    class Fair:
        async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
            d = json.loads(req.messages[1]["content"])
            a, b = "tidy" in d["outcome_a"], "tidy" in d["outcome_b"]
            return JsonResult({"better": "A" if a and not b else "B" if b and not a else "tie", "reason": "r"}, "")

    judge = Judge(Fair())

    async def play(requests: list[tuple[str, str]]) -> list[Optional[float]]:
        log.append(list(requests))
        out: list[Optional[float]] = []
        for who, t in requests:
            shown[who][t].append(texts[who][t].pop(0))
            out.append(float("tidy" in shown[who][t][-1]))
        return out

    async def verdict(t: str, j: int) -> Optional[float]:
        return await judge.pairwise(M, shown["current"][t][j], shown["candidate"][t][j], f"g/{t}/{j}", 1)

    def replayed(t: str) -> bool:
        return all(len(set(shown[w][t])) == 1 for w in shown)

    first = {w: {t: [float("tidy" in v[0])] for t, v in shown[w].items()} for w in shown}
    return asyncio.run(sequential_gate(rule, first["candidate"], first["current"], play, len(first["candidate"]),
                                       verdict, frozenset(first["candidate"]), replayed))  # fmt: skip


def test_replayed_judged_outcomes_settle_a_task_but_equal_verdicts_on_fresh_ones_do_not():
    tasks = [f"t{i}" for i in range(6)]
    # every sample the same text on both sides (a deterministic endpoint): settled after one replay, as rule checks
    log: list[Any] = []
    same = judged_run({t: ["done"] * 40 for t in tasks}, {t: ["done"] * 40 for t in tasks}, log)
    assert not same.accepted and same.stopped == "settled" and same.episodes - 6 <= 8
    # fresh texts, equal verdicts at first (both sides fail twice), then the candidate tidies: not settled, and
    # the tasks' later pairs show the difference
    log = []
    cand = {t: [f"fail {i}" for i in range(2)] + [f"tidy {i}" for i in range(40)] for t in tasks}
    cur = {t: [f"fail again {i}" for i in range(42)] for t in tasks}
    fresh = judged_run(cand, cur, log)
    assert fresh.stopped != "settled" and fresh.accepted and fresh.tasks_better == 6


def test_a_task_whose_sign_is_clear_stops_taking_pairs_while_others_are_open():
    tasks = [f"t{i}" for i in range(6)]
    # t0..t4: the candidate tidies every time (their sign is clear after 4 pairs); t5: both fail, fresh texts
    cand = {t: [f"tidy {i}" if t != "t5" else f"fail {i}" for i in range(60)] for t in tasks}
    cur = {t: [f"fail again {i}" for i in range(60)] for t in tasks}
    log: list[Any] = []
    judged_run(cand, cur, log, SequentialRule(task_p=0.05, interim_share=0.1, min_extra=40))  # no early accept
    asked = [t for look in log for who, t in look if who == "candidate"]
    assert max(asked.count(t) for t in tasks[:5]) <= 4  # 1 + 3 extra pairs make the sign clear
    assert asked.count("t5") > 4  # the open task takes the rest


def test_the_night_preset_judges_a_tie_again_and_the_option_reaches_the_gate():
    from skillopt_ray import cli

    night_rule = GatePolicy.from_config(cli.compose(["+experiment=sleep", "env.data_dir=/x"]).optimizer, 6).rule
    assert night_rule.judge_reask == 1
    assert (night_rule.task_p, night_rule.min_extra, night_rule.interim_share) == (0.05, 240, NIGHT.interim_share)
    assert GatePolicy.from_config(OptimizerConfig(gate_judge_reask=0), 6).rule.judge_reask == 0
