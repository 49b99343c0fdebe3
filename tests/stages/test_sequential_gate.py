"""The sequential paired gate (issue 42, `optimizer.gate_test=sequential`): the first pass paired with the current
skill's samples, more pairs only while the evidence is close, decisions at Wald-style boundaries in net paired
wins; the extra samples are kept for later gates and in the gate record, so a resumed run decides the same."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any, Optional

import pytest
from skillopt_envs.base import EpisodeResult, Task
from skillopt_envs.chat import JsonResult

from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.report import paired_text
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402
from skillopt_ray.stages.gate import GatePolicy
from skillopt_ray.stages.sequential_gate import SequentialRule, pair_stats, sequential_gate, sign_flip_p

# ---------------------------------------------------------------- the procedure on its own


def _play_from(script: dict[tuple[str, str], list[Optional[float]]], log: list[Any]):
    """A `play` that hands out scripted samples per (skill, task), in order, and logs each look."""

    async def play(requests):
        log.append(list(requests))
        return [script[r].pop(0) for r in requests]

    return play


def run(rule, cand, cur, script=None, log=None):
    log = [] if log is None else log
    return asyncio.run(sequential_gate(rule, cand, cur, _play_from(script or {}, log), sum(map(len, cand.values()))))


def test_a_clear_winner_is_accepted_at_the_first_look_with_no_extra_episode():
    cand = {f"t{i}": [1.0] for i in range(10)}
    cur = {f"t{i}": [1.0 if i < 3 else 0.0] for i in range(10)}  # 7 pairs won, none lost: net +7 >= 5, p = 2^-7
    out = run(SequentialRule(accept_at=6), cand, cur)
    assert out.accepted and out.stopped == "accept_boundary"
    assert (out.episodes, out.looks, out.net, out.n_better, out.n_worse) == (10, 1, 7.0, 7, 0)
    assert out.candidate_extra == {} and out.current_extra == {}


def test_a_clear_loser_is_rejected_at_once():
    cand = {f"t{i}": [0.0] for i in range(10)}
    cur = {f"t{i}": [1.0 if i < 2 else 0.0] for i in range(10)}  # net -2: the reject boundary
    out = run(SequentialRule(reject_at=2), cand, cur)
    assert not out.accepted and out.stopped == "reject_boundary" and out.episodes == 10


def test_a_close_call_plays_pairs_on_the_tasks_that_disagreed_first_then_decides():
    cand = {f"t{i}": [1.0 if i < 3 else 0.0] for i in range(9)}
    cur = {f"t{i}": [1.0 if i == 3 else 0.0] for i in range(9)}  # net +2: undecided
    script = {(w, t): [1.0 if w == "candidate" else 0.0] * 10 for w in ("candidate", "current") for t in cand}
    log: list[Any] = []
    out = run(SequentialRule(accept_at=6), cand, cur, script, log)
    # the first look's extra pairs go to tasks whose pair disagreed (t0..t3), both skills each time
    assert {t for _, t in log[0]} <= {"t0", "t1", "t2", "t3"}
    assert sorted(w for w, _ in log[0]) == ["candidate", "candidate", "current", "current"]
    assert out.accepted and out.stopped == "accept_boundary" and out.net >= 6
    assert out.looks == 1 + len(log) and out.episodes == 9 + sum(map(len, log))
    assert sum(map(len, out.candidate_extra.values())) == sum(map(len, out.current_extra.values())) == len(log) * 2


def test_the_budget_ends_a_close_call_at_the_final_margin():
    rule = SequentialRule(accept_at=7, reject_at=2, final_at=5, extra_budget=1.0, min_extra=0)
    cand = {f"t{i}": [1.0 if i < 4 else 0.0] for i in range(8)}
    cur = {f"t{i}": [0.0] for i in range(8)}  # net +4 over 4 tasks: p = 1/16
    ties = {(w, t): [1.0, 0.0] * 10 for w in ("candidate", "current") for t in cand}  # every new pair a tie
    out = run(rule, cand, cur, ties)
    assert out.stopped == "budget" and out.episodes == 16 and not out.accepted  # +4 < 5 at the end
    out = run(SequentialRule(accept_at=7, reject_at=2, final_at=4, extra_budget=1.0, min_extra=0), cand, cur,
              {k: list(v) for k, v in ties.items()})  # fmt: skip
    assert out.stopped == "budget" and out.accepted  # +4 >= 4 and p = 1/16 <= 0.1


def test_the_current_skills_unpaired_samples_make_a_pair_cost_one_episode():
    cand = {"a": [1.0], "b": [0.0]}
    cur = {"a": [0.0, 0.0, 0.0], "b": [1.0]}  # a: two stored samples of the current skill wait for partners
    log: list[Any] = []
    run(SequentialRule(accept_at=6, reject_at=2, final_at=4, extra_budget=2.0, min_extra=0, task_p=0.5), cand, cur,
        {("candidate", "a"): [1.0, 1.0], ("candidate", "b"): [0.0] * 4, ("current", "b"): [1.0] * 4}, log)  # fmt: skip
    assert log[0][0] == ("candidate", "a") and ("current", "a") not in log[0]


def test_an_unscored_sample_is_no_pair_never_a_zero():
    cand = {f"t{i}": [1.0 if i < 3 else 0.0] for i in range(6)}
    cur = {f"t{i}": [0.0] for i in range(6)}
    script = {(w, t): [None] * 20 for w in ("candidate", "current") for t in cand}  # every extra episode fails
    out = run(SequentialRule(extra_budget=1.0, task_p=0.2), cand, cur, script)
    assert out.pairs == 6 and out.net == 3.0 and out.candidate_extra == {} and out.current_extra == {}


def test_tasks_one_side_did_not_score_take_no_part():
    net, disc, pairs, better, worse = pair_stats({"a": [1.0], "b": [1.0, 0.0]}, {"a": [0.0], "b": [1.0]})
    assert (net, disc, pairs, better, worse) == (1.0, 1, 2, 1, 0)
    out = run(SequentialRule(extra_budget=0, task_p=0.6), {"a": [1.0], "gone": [1.0]}, {"a": [0.0]})
    assert out.n_tasks == 1 and out.pairs == 1


def test_the_margins_grow_with_a_large_first_look():
    rule = SequentialRule(accept_at=6, final_at=4, margin_per_sqrt=1.5)
    assert rule.margins(8) == (6.0, 4.0)  # 1.5 * sqrt(8) = 4.2 -> 5: the constant margin holds
    assert rule.margins(47) == (11.0, 9.0)  # 1.5 * sqrt(47) = 10.3 -> 11, the final margin 2 below


def test_the_record_and_the_report_say_what_was_paid():
    cand = {f"t{i}": [1.0] for i in range(10)}
    cur = {f"t{i}": [0.0] for i in range(10)}
    out = run(SequentialRule(), cand, cur)
    d = out.to_test_dict(0.05)
    assert d["test"] == "sequential" and d["episodes"] == 10 and d["looks"] == 1 and d["significant"] is True
    assert d["mean_diff"] == 1.0 and d["lo"] <= d["mean_diff"] <= d["hi"]
    line = paired_text(d)
    assert "sequential paired gate" in line and "10 episodes in 1 looks" in line and "accepted" in line


def test_the_slow_update_gate_under_the_sequential_setting_takes_the_sign_test():
    from skillopt_ray.runs.records import Evaluation

    policy = GatePolicy(test="sequential")
    a = Evaluation(n=4, n_scored=4, hard=1.0, soft=1.0, tasks={f"t{i}": [1.0, 1.0] for i in range(4)})
    b = Evaluation(n=4, n_scored=4, hard=0.0, soft=0.0, tasks={f"t{i}": [0.0, 0.0] for i in range(4)})
    _, test = policy.judge(a, b, (1.0, 0.0, 0.0))
    assert test is not None and test.test == "sign"
    assert GatePolicy(test="sequential", early_stop=True).stops_early is False  # its own boundaries stop it


@pytest.mark.parametrize(
    "arg,needle",
    [
        ("optimizer.gate_seq_final_at=12", "optimizer.gate_seq_final_at=12.0 is above gate_seq_accept_at="),
        ("optimizer.gate_seq_reject_at=0", "optimizer.gate_seq_reject_at=0.0 is invalid"),
        ("optimizer.gate_seq_budget=-1", "optimizer.gate_seq_budget=-1.0 is invalid"),
        ("optimizer.gate_seq_deterministic=maybe", "optimizer.gate_seq_deterministic='maybe' is invalid"),
        ("optimizer.gate_judge_reask=-1", "optimizer.gate_judge_reask=-1 is invalid"),
    ],
)
def test_bad_sequential_options_are_one_line_errors(capsys, arg, needle):
    from skillopt_ray import cli

    code = cli.main(["+experiment=alfworld", "optimizer.gate_test=sequential", arg])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err and needle in err


# ---------------------------------------------------------------- in the loop: a planted helpful and harmful edit

P_WIN = {"base": 0.5, "HELPFUL": 0.75, "HARMFUL": 0.25}
EDITS = {1: "- HARMFUL: answer before reading the task.", 2: "- HELPFUL: read the task twice.", 3: "- HARMFUL again."}


def p_win(skill: str) -> float:
    if "HARMFUL" in skill:
        return P_WIN["HARMFUL"]
    return P_WIN["HELPFUL"] if "HELPFUL" in skill else P_WIN["base"]


class NoisyRunner:
    """Selection task i is won with a probability set by the skill (planted rules), drawn from the episode's own
    sample key, so every repeat context is a fresh, reproducible sample. Training episodes all fail.
    `crash_after`: raise after that many selection episodes (a killed command)."""

    def __init__(self, crash_after: Optional[int] = None) -> None:
        self.selection_played = 0
        self.crash_after = crash_after

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop: Any = None) -> list[EpisodeResult]:
        ctxs = ctx if isinstance(ctx, list) else [ctx] * len(tasks)
        out = []
        for t, c in zip(tasks, ctxs):
            if c.training:
                hard = 0.0
            else:
                if self.crash_after is not None and self.selection_played >= self.crash_after:
                    raise KeyboardInterrupt("killed")
                self.selection_played += 1
                digest = hashlib.sha256(f"{c.key}|{t.task_id}".encode()).digest()
                draw = int.from_bytes(digest[:8], "big") / 2**64
                hard = float(draw < p_win(skill))
            out.append(
                EpisodeResult(
                    t.task_id,
                    t.task_type,
                    hard=hard,
                    soft=hard,
                    n_turns=1,
                    task_description="g",
                    fail_reason="" if hard else "failed: no",
                    trajectory=[{"role": "agent", "content": "x"}],
                )  # fmt: skip
            )
        return out


class PlantedOptimizer:
    """Step s proposes EDITS[s]."""

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        step = int(re.search(r"/e\d+s(\d+)/", req.key).group(1))  # type: ignore[union-attr]  # train/e1s2/analyst/...
        data = {"batch_size": 1, "failure_summary": [],
                "patch": {"reasoning": "r", "edits": [{"op": "append", "content": EDITS[step]}]}}  # fmt: skip
        return JsonResult(data, json.dumps(data))

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def _train(root, runner) -> list[dict[str, Any]]:
    cfg = Config(experiment="sequential")
    cfg.optimizer = OptimizerConfig(epochs=1, batch_size=1, minibatch_size=8, slow_update=False, meta_skill=False,
                                    gate_test="sequential")  # fmt: skip
    rd = RunDir(root).ensure()
    splits = Splits(
        [Task(f"tr{i}", "t") for i in range(3)], [Task(f"va{i:02d}", "t") for i in range(18)], [Task("te0", "t")]
    )
    trainer = Trainer(cfg, rd, PlantedOptimizer(), runner, Tracker(False, None, "seq", root.parent), splits, "# seed\n")
    asyncio.run(trainer.run())
    return json.loads((rd.root / "history.json").read_text())


def _gates(root) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((root / "steps").glob("*/gate.json"))]


def test_the_loop_accepts_the_helpful_edit_refuses_the_harmful_ones_and_says_what_it_paid(tmp_path):
    history = _train(tmp_path / "a", NoisyRunner())
    actions = [h["action"] for h in history]
    assert actions[0] == "reject" and actions[1].startswith("accept") and actions[2] == "reject", actions
    gates = _gates(tmp_path / "a")
    for g in gates:
        t = g["gate_test"]
        assert t["test"] == "sequential" and t["episodes"] >= 18 and t["looks"] >= 1
        assert t["lo"] <= t["mean_diff"] <= t["hi"] and "sequential paired gate" in g["reason"]
        print(f"{g['action']}: {t['episodes']} episodes, {t['looks']} looks, net {t['net']:+g}, "
              f"difference {t['mean_diff']:+.3f} [{t['lo']:+.3f}, {t['hi']:+.3f}]")  # fmt: skip
    assert sum(g["gate_test"]["looks"] > 1 for g in gates) >= 1  # at least one close call played more pairs
    assert all(h.get("gate_episodes") == g["gate_test"]["episodes"] for h, g in zip(history, gates))


def test_a_killed_run_resumes_to_the_same_decisions(tmp_path):
    full = _train(tmp_path / "full", NoisyRunner())
    paid = [g["gate_test"]["episodes"] for g in _gates(tmp_path / "full")]
    assert paid[1] > 18  # step 2's gate played extra pairs, which step 3's gate pairs with
    # killed in the middle of step 3's first pass: after the initial evaluation (18) and the first two gates
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "cut", NoisyRunner(crash_after=18 + paid[0] + paid[1] + 5))
    assert len(_gates(tmp_path / "cut")) == 2
    resumed = _train(tmp_path / "cut", NoisyRunner())
    assert [(h["action"], h["current_score"]) for h in resumed] == [(h["action"], h["current_score"]) for h in full]
    assert [g["gate_test"] for g in _gates(tmp_path / "cut")] == [g["gate_test"] for g in _gates(tmp_path / "full")]


def test_auto_takes_the_sequential_gate_below_30_selection_tasks_and_the_papers_above():
    o = OptimizerConfig(gate_test="auto")
    assert GatePolicy.from_config(o, 29).test == "sequential" and GatePolicy.from_config(o, 30).test == "none"
    assert GatePolicy.from_config(OptimizerConfig(), 5).test == "none"  # the paper protocol keeps the paper's gate


def test_the_custom_preset_uses_auto_and_the_paper_preset_the_papers_gate():
    from skillopt_ray import cli

    custom = cli.plain(cli.compose(["+experiment=custom", "env.data_dir=/nowhere"]))
    paper = cli.plain(cli.compose(["+experiment=alfworld"]))
    assert custom["optimizer"]["gate_test"] == "auto" and paper["optimizer"]["gate_test"] == "none"


def test_a_handful_of_tasks_still_gets_pairs_enough_to_accept():
    cand = {t: [1.0] for t in "abcde"}
    cur = {t: [1.0 if t in "cde" else 0.0] for t in "abcde"}  # net +2 over 5 tasks
    script = {(w, t): [1.0 if w == "candidate" else 0.0] * 20 for w in ("candidate", "current") for t in cand}
    out = run(SequentialRule(), cand, cur, script)  # 5 tasks: 5 x 2 extra episodes would never reach +5
    assert out.accepted and out.net >= 5 and out.episodes <= 5 + 24 and out.p_value <= 0.1


# ---------------------------------------------------------------- the task is the unit of evidence (issue 47)


def test_repeats_of_a_few_tasks_never_accept_whatever_they_replay():
    """A deterministic endpoint that does not say temperature 0: 3 tasks won, replayed as often as asked."""
    cand = {t: [1.0] for t in "abc"}
    cur = {t: [0.0] for t in "abc"}
    script = {(w, t): [1.0 if w == "candidate" else 0.0] * 40 for w in ("candidate", "current") for t in cand}
    log: list[Any] = []
    out = run(SequentialRule(), cand, cur, script, log)
    assert not out.accepted and out.stopped == "too_few_tasks" and log == []  # nothing more paid
    assert SequentialRule().min_tasks == 4 and out.p_value == 0.125
    seven = run(SequentialRule(accept_at=5, task_p=0.2), cand, cur, script)  # 1/8 <= 0.2: pairs may be played
    assert seven.n_tasks == 3 and seven.p_value == 0.125  # however many replays: 3 observations


def test_the_sign_flip_test_counts_tasks_not_pairs():
    assert sign_flip_p([1.0, 1.0, 1.0]) == 0.125
    assert sign_flip_p([7.0, 7.0, 7.0]) == 0.125  # 7 replays of each of 3 tasks: still 3 observations
    assert sign_flip_p([1.0, 1.0, -1.0]) == 0.5 and sign_flip_p([]) == 1.0 and sign_flip_p([0.0, 0.0]) == 1.0
    assert abs(sign_flip_p([1.0] * 6) - 1 / 64) < 1e-12


def test_exact_ties_stop_paying_once_they_cannot_change_the_decision():
    """Every pair a tie (a clean run whose extra pairs replay ties): a settled task gets no more pairs, and once too
    few tasks could still favour the candidate the gate stops."""
    cand = {f"t{i}": [1.0] for i in range(7)}
    cur = {f"t{i}": [1.0] for i in range(7)}
    script = {(w, t): [1.0] * 40 for w in ("candidate", "current") for t in cand}
    log: list[Any] = []
    out = run(SequentialRule(), cand, cur, script, log)
    assert not out.accepted and out.stopped == "settled"
    assert out.episodes - 7 <= 8, out  # before: the whole budget (24 extra episodes), every pair a tie
    assert all(len(v) <= 1 for v in out.candidate_extra.values())  # one replay settles a task


# ---------------------------------------------------------------- a deterministic target: a repeat is no fresh evidence


def test_a_deterministic_target_counts_each_task_once_and_plays_no_extra_pair():
    cand = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0], "c": [0.0, 0.0, 0.0]}
    cur = {"a": [0.0, 0.0, 0.0], "b": [0.0, 0.0, 0.0], "c": [0.0, 0.0, 0.0]}
    log: list[Any] = []
    out = run(SequentialRule(deterministic=True, task_p=0.5), cand, cur, log=log)
    assert log == [] and out.looks == 1 and out.stopped == "budget"
    assert (out.net, out.pairs, out.n_better) == (2.0, 3, 2)  # three repeats of a replay are one pair per task
    assert not out.accepted  # 2 tasks better cannot reach the final margin +3
    sampled = run(SequentialRule(), cand, cur, {(w, t): [1.0 if w == "candidate" and t != "c" else 0.0] * 20
                                                for w in ("candidate", "current") for t in cand})  # fmt: skip
    assert not sampled.accepted and sampled.n_tasks == 3  # without temperature 0 either: 3 tasks, 3 observations


def test_gate_seq_deterministic_false_on_the_command_line_is_taken():
    from skillopt_ray import cli

    cfg = cli.plain(cli.compose(["+experiment=alfworld", "optimizer.gate_seq_deterministic=false"]))
    assert GatePolicy.from_config(OptimizerConfig(**cfg["optimizer"]), 18, True).rule.deterministic is False


def test_gate_seq_deterministic_follows_the_target_unless_forced():
    auto = OptimizerConfig(gate_test="sequential")
    assert GatePolicy.from_config(auto, 18, deterministic_target=True).rule.deterministic
    assert not GatePolicy.from_config(auto, 18, deterministic_target=False).rule.deterministic
    forced = OptimizerConfig(gate_test="sequential", gate_seq_deterministic="false")
    assert not GatePolicy.from_config(forced, 18, deterministic_target=True).rule.deterministic
    forced = OptimizerConfig(gate_test="sequential", gate_seq_deterministic="true")
    assert GatePolicy.from_config(forced, 18, deterministic_target=False).rule.deterministic


class ReplayRunner:
    """A deterministic target: the same skill on the same task always gives the same episode. The planted rule wins
    exactly two selection tasks the seed loses; every other task is lost by both."""

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop: Any = None) -> list[EpisodeResult]:
        out = []
        for t in tasks:
            hard = float("HELPFUL" in skill and t.task_id in ("va00", "va01"))
            out.append(EpisodeResult(t.task_id, t.task_type, hard=hard, soft=hard, n_turns=1, task_description="g",
                                     fail_reason="" if hard else "failed: no",
                                     trajectory=[{"role": "agent", "content": "x"}]))  # fmt: skip
        return out


@pytest.mark.parametrize("temperature,accepted", [(0.0, False), (None, False)])
def test_at_temperature_0_replays_of_two_won_tasks_do_not_accept(tmp_path, temperature, accepted):
    """At temperature 0 the gate pays only the first pass and rejects; a deterministic endpoint that does not say
    temperature 0 replays the two won tasks as often as the gate asks, and still cannot accept (each task is one
    observation: 2 tasks better of 18 is p = 1/4)."""
    cfg = Config(experiment="sequential")
    cfg.llm.target.temperature = temperature
    cfg.optimizer = OptimizerConfig(epochs=1, batch_size=1, minibatch_size=8, slow_update=False, meta_skill=False,
                                    gate_test="sequential")  # fmt: skip
    rd = RunDir(tmp_path / "run").ensure()
    splits = Splits(
        [Task(f"tr{i}", "t") for i in range(3)], [Task(f"va{i:02d}", "t") for i in range(18)], [Task("te0", "t")]
    )
    trainer = Trainer(cfg, rd, PlantedOptimizer(), ReplayRunner(), Tracker(False, None, "seq", tmp_path), splits, "")
    asyncio.run(trainer.run())
    gate = json.loads((rd.root / "steps" / "e01_s002" / "gate.json").read_text())
    assert gate["action"].startswith("accept") is accepted, gate["reason"]
    if temperature == 0.0:
        assert gate["gate_test"]["episodes"] == 18 and "deterministic target counts each task once" in gate["reason"]
    else:
        assert gate["gate_test"]["tasks_better"] == 2 and gate["gate_test"]["p_value"] == 0.25, gate["reason"]


class JudgedRunner(NoisyRunner):
    """NoisyRunner's episodes as rubric tasks only the judge scores: the outcome says WON or LOST (and which sample it
    was, so every sample's outcome is its own text) and the episode waits for the judge (a data error until then)."""

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop: Any = None) -> list[EpisodeResult]:
        out = await super().run(tasks, skill, ctx, stop)
        ctxs = ctx if isinstance(ctx, list) else [ctx] * len(tasks)
        for r, c in zip(out, ctxs):
            text = f"{'WON' if r.hard else 'LOST'} ({c.key} {c.seed})"
            r.info = {"judge": {"prompt": "do it", "rubric": "it is done", "outcome": text, "unscored": True}}
            r.hard = r.soft = 0.0
            r.fail_reason, r.error = "data_error", "data: no rule check; the judge scores it"
        return out


class PlantedJudgingOptimizer(PlantedOptimizer):
    """PlantedOptimizer, and the judge on the same endpoint: a WON outcome meets the rubric and beats a LOST one.
    `asked` counts each distinct judge request (key and material): a response cache answers a repeat for free, so a
    request asked again after a resume is paid again only when its material changed."""

    def __init__(self, asked: Optional[dict[tuple[str, str], int]] = None) -> None:
        self.asked = {} if asked is None else asked

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        if req.role != "judge":  # step 3 proposes a rule that changes nothing: a close call, extra pairs
            res = await super().chat_json(req, schema, name)
            if "HARMFUL again" in res.raw:
                res.data["patch"]["edits"][0]["content"] = "- NEUTRAL: keep a calm tone."
            return res
        material = json.loads(req.messages[1]["content"])
        self.asked[(req.key, req.messages[1]["content"])] = self.asked.get((req.key, req.messages[1]["content"]), 0) + 1
        if req.stage == "judge_score":
            won = material["outcome"].startswith("WON")
            data: dict[str, Any] = {"score": 9 if won else 2, "meets_rubric": won, "reason": "r"}
        else:
            a, b = material["outcome_a"].startswith("WON"), material["outcome_b"].startswith("WON")
            data = {"better": "A" if a and not b else "B" if b and not a else "tie", "reason": "r"}
        return JsonResult(data, json.dumps(data))


def _train_judged(root, runner, asked) -> list[dict[str, Any]]:
    cfg = Config(experiment="sequential")
    cfg.optimizer = OptimizerConfig(epochs=1, batch_size=1, minibatch_size=8, slow_update=False, meta_skill=False,
                                    gate_test="sequential")  # fmt: skip
    rd = RunDir(root).ensure()
    splits = Splits(
        [Task(f"tr{i}", "t") for i in range(3)], [Task(f"va{i:02d}", "t") for i in range(18)], [Task("te0", "t")]
    )
    llm = PlantedJudgingOptimizer(asked)
    trainer = Trainer(cfg, rd, llm, runner, Tracker(False, None, "seq", root.parent), splits, "# seed\n")
    asyncio.run(trainer.run())
    return json.loads((rd.root / "history.json").read_text())


def test_a_run_stopped_mid_gate_resumes_with_the_judged_outcomes_of_the_gates_extra_samples(tmp_path):
    """Issue 47: the outcomes of a gate's extra samples (what its judged pairs compare) were kept in memory only, so a
    resumed run lost them: a later gate pairing the current skill's extra samples found no outcome (a pair dropped,
    another decision) or compared misaligned ones (judge calls paid again). They are in the gate record now."""
    full_asked: dict[tuple[str, str], int] = {}
    full = _train_judged(tmp_path / "full", JudgedRunner(), full_asked)
    gates = _gates(tmp_path / "full")
    paid = [g["gate_test"]["episodes"] for g in gates]
    assert paid[1] > 18 and paid[2] >= 18 + 8, paid  # step 2's gate played extra pairs; step 3's gate too
    assert gates[1]["action"].startswith("accept")  # step 3 pairs with the accepted candidate's extra samples
    # stopped in the middle of step 3's extra pairs: after the initial evaluation, two gates and step 3's first pass
    cut_asked: dict[tuple[str, str], int] = {}
    with pytest.raises(KeyboardInterrupt):
        _train_judged(tmp_path / "cut", JudgedRunner(crash_after=18 + paid[0] + paid[1] + 18 + 4), cut_asked)
    assert len(_gates(tmp_path / "cut")) == 2
    resumed = _train_judged(tmp_path / "cut", JudgedRunner(), cut_asked)
    assert [(h["action"], h["current_score"]) for h in resumed] == [(h["action"], h["current_score"]) for h in full]
    assert [g["gate_test"] for g in _gates(tmp_path / "cut")] == [g["gate_test"] for g in gates]
    # every judge request of the stopped and the resumed command together is one the uninterrupted run asked: with
    # the response cache, no judge call is paid twice
    assert set(cut_asked) == set(full_asked)
    judged = json.loads((tmp_path / "cut" / "judge.json").read_text())
    assert judged["pair_errors"] == 0, judged
    # each judged comparison counted once: the replies the response cache gave the resumed command are not counted
    # again, so the resumed run's counts are the uninterrupted run's
    whole = json.loads((tmp_path / "full" / "judge.json").read_text())
    assert {k: v for k, v in judged.items() if isinstance(v, int)} == {
        k: v for k, v in whole.items() if isinstance(v, int)
    }


def test_a_run_killed_mid_gate_keeps_the_judge_counts_of_the_work_it_recorded(tmp_path, monkeypatch):
    """A kill (no `finally` runs) lost the judge counts of everything the killed command had recorded (its cached
    evaluations are not judged again on resume): judge.json is written with each record now, and a resumed run's
    counts equal the uninterrupted run's."""
    _train_judged(tmp_path / "full", JudgedRunner(), {})
    gates = _gates(tmp_path / "full")
    paid = [g["gate_test"]["episodes"] for g in gates]

    async def killed(self):  # Trainer.run without its `finally`: as a SIGKILL leaves it
        return await self._run()

    with monkeypatch.context() as m:
        m.setattr(Trainer, "run", killed)
        with pytest.raises(KeyboardInterrupt):
            _train_judged(tmp_path / "cut", JudgedRunner(crash_after=18 + paid[0] + paid[1] + 18 + 4), {})
    _train_judged(tmp_path / "cut", JudgedRunner(), {})
    judged = json.loads((tmp_path / "cut" / "judge.json").read_text())
    whole = json.loads((tmp_path / "full" / "judge.json").read_text())
    assert {k: v for k, v in judged.items() if isinstance(v, int)} == {
        k: v for k, v in whole.items() if isinstance(v, int)
    }
