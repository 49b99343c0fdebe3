"""What a night may spend, said before its first model call: calls and tokens from the night's task counts, its
schedule (`+experiment=sleep` and any overrides) and the models' token budgets, as three figures:

- **first pass**: what the night spends whatever happens (the baseline on the selection split, every train
  episode, the initial skill on test), prompts only: a floor (a skill is evaluated on a split once: a night without
  test tasks, whose test split is the selection split, plays no test episode of its own);
- **as planned**: every episode the schedule plans and the optimizer calls of a step whose analysts all have
  something to say, each reply as long as its budget allows;
- **at most**: that, plus every extra pair the sequential gate may play on a close decision, a re-ask of every
  JSON reply, a ranking call per step: a ceiling the night does not pass.

Each figure counts the judge's calls (stages/judge.py) where the night has rubric tasks: a `judge_score` call per
episode the judge scores (every episode of a rubric-only task; the evaluations' episodes of a rubric task with rule
checks, for the agreement), and two `judge_pair` calls (both orders) per pair the sequential gate compares on a
rubric-only selection task: its first look's pairs at each step's gate, and at most one more per extra episode.

Tokens are estimated as the gateway does before sending (prompt characters / 4, plus the completion budget); an
agent target's episode is several calls, each carrying its CLI's own request (measured, AGENT_REQUEST_CHARS). The
figures say nothing of quality; the caps (`--max-tokens`, `--max-cost`, `--max-minutes`) are what stop a night."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt_envs.jsontypes import JSONObject, as_int, as_object

from skillopt_ray import prompts
from skillopt_ray.config.plain import PlainConfig, from_container
from skillopt_ray.llm.agent_api import MAX_AGENT_CALLS
from skillopt_ray.stages import judge as judge_stage
from skillopt_ray.stages.gate import GatePolicy, deterministic_target

# The target's prompt around the skill and the request (role line, headings, message framing), in characters:
# measured on the demo night, whose ~100-character requests with an empty skill averaged 93 estimated tokens.
TARGET_FRAME_CHARS = 270
# An episode as an analyst sees it besides the request and the reply (score, check verdict, headings), in characters:
# measured on the demo night (two-episode analyst prompts of about 5,100 characters with a 3,500-character system).
TRAJECTORY_FRAME_CHARS = 500
SCHEMA_CHARS = 1000  # a re-ask repeats the prompt and the reply, and adds the error and the schema
# An agent episode is several calls, each carrying the CLI's own request around the task: its system prompt,
# instructions, environment context and tool definitions, in characters, measured with Codex CLI 0.171 (20,455 of
# messages and 7,506 of tools) and Claude Code 2.1.197 (6,574 and 4,490; `--tools Read,Bash`) jailed against the
# scripted server. An unknown CLI is counted as the larger.
AGENT_REQUEST_CHARS = {"codex": 28_000, "claude_code": 11_100}
AGENT_CALLS = 2  # planned calls an episode: the real-CLI fixtures' agents run a command (read the skill), then answer
AGENT_TURN_CHARS = 1_000  # what a turn adds to the next call's prompt: the reply and the command's output
JUDGE_FRAME_CHARS = 120  # the judge's JSON object around the quoted request, rubric and outcomes


@dataclass(frozen=True)
class Spend:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, o: Spend) -> Spend:
        return Spend(
            self.calls + o.calls, self.prompt_tokens + o.prompt_tokens, self.completion_tokens + o.completion_tokens
        )

    def times(self, n: int) -> Spend:
        return Spend(self.calls * n, self.prompt_tokens * n, self.completion_tokens * n)


@dataclass(frozen=True)
class Estimate:
    first_pass: Spend
    planned: Spend
    at_most: Spend
    episodes: tuple[int, int, int]  # target episodes: first pass, planned, at most
    cost_planned: float = 0.0
    cost_at_most: float = 0.0
    agent_target: bool = False
    agent_call_tokens: int = 0  # an agent call's first prompt, as estimated
    judge: tuple[Spend, Spend] = (Spend(), Spend())  # the judge's part of the planned and the at-most figures

    def as_dict(self) -> JSONObject:
        out: JSONObject = {"episodes": dict(zip(("first_pass", "planned", "at_most"), self.episodes))}
        for name in ("first_pass", "planned", "at_most"):
            s: Spend = getattr(self, name)
            out[name] = {"calls": s.calls, "tokens": s.tokens, "prompt_tokens": s.prompt_tokens}
        out["judge"] = {
            k: {"calls": s.calls, "tokens": s.tokens, "prompt_tokens": s.prompt_tokens}
            for k, s in zip(("planned", "at_most"), self.judge)
        }
        out["cost_usd"] = {"planned": self.cost_planned, "at_most": self.cost_at_most}
        return out

    def lines(self, max_tokens: int = 0, max_cost: float = 0.0) -> list[str]:
        f, p, m = self.first_pass, self.planned, self.at_most
        cost = f", ${self.cost_planned:.4f} .. ${self.cost_at_most:.4f}" if self.cost_at_most else ""
        more = self.episodes[2] - self.episodes[1]
        extra = f", up to {more} more where the gate's decision is close" if more else ", no extra gate pairs"
        out = [
            f"estimate (before any model call): first pass {f.calls} calls ~{f.tokens:,} tokens; as planned "
            f"{p.calls} calls ~{p.tokens:,} tokens; at most {m.calls} calls ~{m.tokens:,} tokens{cost} "
            f"({self.episodes[1]} planned episodes{extra})"
        ]
        if self.judge[1].calls:
            j, jm = self.judge
            out.append(
                f"  the judge's calls are in these figures: {j.calls} as planned ~{j.tokens:,} tokens, at most "
                f"{jm.calls} ~{jm.tokens:,} (a score per judged episode, both orders of each pair the gate compares)"
            )
        if self.agent_target:
            out.append(
                f"  an agent episode is counted as {AGENT_CALLS} calls as planned (the CLI's own request measured, "
                f"~{self.agent_call_tokens:,} tokens a call), at most {MAX_AGENT_CALLS} (its call limit); longer "
                "agent work spends more than planned"
            )
        if max_tokens and max_tokens < p.tokens:
            out.append(f"  the --max-tokens cap ({max_tokens:,}) is below the planned spend: it may stop the night")
        if max_cost and self.cost_planned and max_cost < self.cost_planned:
            out.append(f"  the --max-cost cap (${max_cost}) is below the planned cost: it may stop the night")
        return out


def mean_task_chars(folder: Path, ids: list[str]) -> int:
    sizes = [
        len((folder / t / "task.md").read_text(encoding="utf-8")) for t in ids if (folder / t / "task.md").is_file()
    ]
    return round(sum(sizes) / len(sizes)) if sizes else 0


def hierarchical_merges(k: int, batch: int) -> int:
    """Calls a hierarchical merge of k patches makes, in chunks of `batch` (a chunk of one passes up free)."""
    calls = 0
    while k > 1:
        chunks = math.ceil(k / batch)
        calls += chunks - (1 if k % batch == 1 else 0)
        k = chunks
    return calls


def gate_extra(data: PlainConfig, n_tasks: int, first_pass: int) -> int:
    """The extra episodes the night's gate may play per decision, by the gate's own policy: none unless it is the
    sequential gate, nor for a deterministic target (chat at temperature 0 replays its episode), nor on a split too
    small ever to accept (each task one observation)."""
    return _policy(data, n_tasks).extra_episodes(first_pass, n_tasks)


def target_episode(harness: str, task_chars: int, skill_chars: int, t_out: int) -> tuple[Spend, Spend]:
    """(as planned, at most) of one target episode: a chat call; or an agent's calls, AGENT_CALLS as planned and
    its call limit at most, each with the CLI's own request, the task, and the turns before it (the first of
    which reads the skill)."""
    if harness == "chat":
        one = Spend(1, _tokens(TARGET_FRAME_CHARS + skill_chars + task_chars), t_out)
        return one, one
    base = AGENT_REQUEST_CHARS.get(harness, max(AGENT_REQUEST_CHARS.values())) + task_chars

    def calls(n: int) -> Spend:
        grown = sum(i * AGENT_TURN_CHARS + (skill_chars if i else 0) for i in range(n))
        return Spend(n, _tokens(n * base + grown), n * t_out)

    return calls(AGENT_CALLS), calls(MAX_AGENT_CALLS)


def _tokens(chars: float, cap: int = 0) -> int:
    t = math.ceil(chars / 4)
    return min(t, cap) if cap else t


def _optimizer_spend(
    o: dict[str, Any], step_batches: list[int], calls: tuple[Spend, Spend, Spend], mode: str, epochs: int
) -> tuple[Spend, Spend]:
    """(planned, at most) of the optimizer's calls: each step's analysts over its failures and its successes in
    minibatches, their merges, and the epoch boundaries' slow update and meta skill."""
    analyst, merge, ranking = calls
    mb = int(o["minibatch_size"])
    planned_opt, most_opt = Spend(), Spend()
    for e in step_batches:
        if not e:
            continue
        a = min(e, math.ceil(e / mb) + 1)
        fails, wins = math.ceil(a / 2), a - math.ceil(a / 2)
        m = (
            hierarchical_merges(fails, int(o["merge_batch_size"]))
            + hierarchical_merges(wins, int(o["merge_batch_size"]))
            + (1 if wins else 0)
        )
        m_most = max(0, a - 1)  # each merge call joins at least two patches into one
        planned_opt += analyst.times(a) + merge.times(m)
        most_opt += analyst.times(a) + merge.times(m_most) + ranking
        if mode != "patch":
            planned_opt += merge
            most_opt += merge
    epoch_calls = (int(bool(o["slow_update"])) + int(bool(o["meta_skill"]))) * max(0, epochs - 1)
    return planned_opt + merge.times(epoch_calls), most_opt + merge.times(epoch_calls)


def _cost(prices: dict[str, Any], *parts: tuple[Any, Spend]) -> float:
    """Dollars of (model, spend) parts at `llm.prices` (0 for a model without prices)."""
    total = 0.0
    for model, part in parts:
        p = prices.get(model) or {}
        total += part.prompt_tokens * float(p.get("input_per_mtok") or 0) / 1e6
        total += part.completion_tokens * float(p.get("output_per_mtok") or 0) / 1e6
    return total


@dataclass(frozen=True)
class Judged:
    """A split's tasks as the judge sees them: rubric-only tasks (the judge scores every episode and compares their
    gate pairs), rubric tasks with rule checks (their evaluations' episodes judged too), and the split's size."""

    only: int = 0
    checked: int = 0
    n: int = 0
    rubric_chars: int = 0  # the rubrics' mean length

    def share(self, evaluation: bool) -> float:
        """The share of the split's episodes the judge scores (training episodes: rubric-only tasks alone)."""
        return ((self.only + (self.checked if evaluation else 0)) / self.n) if self.n else 0.0


def judged_tasks(folder: Path, ids: list[str]) -> Judged:
    """Which of `ids` carry a rubric, with and without a rule check (their task.json's metadata)."""
    only, checked, sizes = 0, 0, []
    for t in ids:
        try:
            md = json.loads((folder / t / "task.json").read_text(encoding="utf-8")).get("metadata") or {}
        except (OSError, ValueError, AttributeError):
            continue
        rubric = md.get("rubric") if isinstance(md, dict) else None
        if not isinstance(rubric, str) or not rubric.strip():
            continue
        sizes.append(len(rubric.strip()))
        if md.get("checks"):
            checked += 1
        else:
            only += 1
    return Judged(only, checked, len(ids), round(sum(sizes) / len(sizes)) if sizes else 0)


@dataclass(frozen=True)
class Episodes:
    """A night's target episodes by what they are, for the judge's share: (first pass, planned, at most) on the
    selection split and on test, the training episodes, the gates' looks and their extra episodes at most."""

    selection: tuple[int, int, int]
    test: tuple[int, int, int]
    train: int
    train_first: int
    steps: int
    first_look: int  # samples a gate's first look pairs per selection task (1 for a deterministic target)
    extra: int  # a gate's extra episodes at most


def judge_spend(
    data: PlainConfig, splits: dict[str, list[str]], tasks: Path, eps: Episodes, call: tuple[int, int]
) -> tuple[Spend, Spend, Spend]:
    """(first pass, planned, at most) of the judge's calls: a score per judged episode, and both orders of each
    pair the sequential gate compares on a rubric-only selection task (at most, each pair in every round
    `optimizer.gate_judge_reask` allows: a tied round is judged again). `call`: (the task's request in characters,
    a target reply's budget in tokens)."""
    sel_ids = splits["val"] or splits["train"]
    sel, test = judged_tasks(tasks, sel_ids), judged_tasks(tasks, splits["test"] or sel_ids)
    train = judged_tasks(tasks, splits["train"])
    if not (sel.only + sel.checked + test.only + test.checked + train.only):
        return Spend(), Spend(), Spend()
    llm = data["llm"]
    role = llm["judge"] if (llm.get("judge") or {}).get("model") else llm["optimizer"]
    j_out, j_cap = int(role.get("max_tokens") or 0), int(role.get("context_tokens") or 0)
    task_chars, t_out = call
    reply = min(4 * t_out, judge_stage.MAX_CHARS) if t_out else judge_stage.MAX_CHARS
    rubric = max(sel.rubric_chars, test.rubric_chars, train.rubric_chars)
    quoted = JUDGE_FRAME_CHARS + task_chars + rubric
    score = Spend(1, _tokens(len(judge_stage.SCORE_SYSTEM) + quoted + reply, j_cap), j_out)
    pair = Spend(2, 2 * _tokens(len(judge_stage.PAIR_SYSTEM) + quoted + 2 * reply, j_cap), 2 * j_out)

    def scores(i: int) -> int:
        return math.ceil(
            eps.selection[i] * sel.share(True) + eps.test[i] * test.share(True)
            + (eps.train_first if i == 0 else eps.train) * train.share(False)
        )  # fmt: skip

    pairs = eps.steps * eps.first_look * sel.only
    pairs_most = pairs + math.ceil(eps.steps * eps.extra * sel.share(False))
    extra_scores = math.ceil(eps.steps * eps.extra * sel.share(False))
    rounds = 1 + max(0, int(data["optimizer"].get("gate_judge_reask", 1) or 0))  # a tied round is judged again
    return (
        Spend(scores(0), score.prompt_tokens * scores(0), 0),
        score.times(scores(1)) + pair.times(pairs),
        score.times(scores(2) + extra_scores) + pair.times(pairs_most * rounds),
    )


def optimizer_calls(data: PlainConfig, skill_chars: int, task_chars: int, t_out: int) -> tuple[Spend, Spend, Spend]:
    """One analyst, merge and ranking call: the prompt (system, skill, what it reads) and the reply's budget."""
    o, opt, env = data["optimizer"], data["llm"]["optimizer"], data["env"]
    o_out, o_cap = int(opt.get("max_tokens") or 0), int(opt.get("context_tokens") or 0)
    mode, mb = str(o.get("update_mode") or "patch"), int(o["minibatch_size"])
    trajectory = task_chars + 4 * t_out + TRAJECTORY_FRAME_CHARS
    analyst_sys = len(prompts.analyst_system("failure", mode, str(env.get("name") or ""), False, "both"))
    analyst = Spend(1, _tokens(analyst_sys + skill_chars + mb * trajectory, o_cap), o_out)
    merge_sys = len(prompts.system_prompt(f"merge_final{prompts.MODE_SUFFIX[mode]}"))
    merge = Spend(1, _tokens(merge_sys + skill_chars + 2 * 4 * o_out, o_cap), o_out)
    ranking = Spend(1, _tokens(len(prompts.system_prompt("ranking")) + skill_chars + 4 * o_out, o_cap), o_out)
    return analyst, merge, ranking


def estimate(data: PlainConfig, splits: dict[str, list[str]], tasks: Path, skill_chars: int = 0) -> Estimate:
    """The night's estimate from its composed config (`data`), its task ids per split and its task folder."""
    o, llm, env = data["optimizer"], data["llm"], data["env"]
    sel = splits["val"] or splits["train"]  # nothing held out: the gate borrows the train split
    test = splits["test"] or sel
    r = int(o.get("rollouts_per_task") or 1)
    n_tr, n_sel, n_te = len(splits["train"]), r * len(sel), r * len(test)
    b = int(o["batch_size"])
    per_epoch = max(1, math.ceil(n_tr / b))
    batches = [r * max(0, min(b, n_tr - i * b)) for i in range(per_epoch)]
    epochs, steps = int(o["epochs"]), int(o["epochs"]) * per_epoch
    boundary_pairs = 2 * min(int(o.get("slow_update_samples") or 0), n_tr) if o["slow_update"] or o["meta_skill"] else 0
    boundary = boundary_pairs + (n_sel if o["slow_update"] else 0)

    # the run evaluates a skill on a split once: a test split borrowed from the selection split (a night without
    # test tasks) replays nothing new, and the final skill is the best one unless a later step was rejected
    n_te = 0 if not splits["test"] else n_te
    eps_first = n_sel + epochs * sum(batches) + n_te
    core = n_sel + epochs * (sum(batches) + per_epoch * n_sel) + max(0, epochs - 1) * boundary
    eps_planned = core + 2 * n_te  # the initial and the best skill on test
    tgt, opt = llm["target"], llm["optimizer"]
    extra = gate_extra(data, len(sel), n_sel)
    eps_most = core + n_sel + 3 * n_te + steps * extra  # and a final skill other than the best: selection and test

    t_out = as_int(as_object(env.get("options")).get("max_tokens")) or int(tgt.get("max_tokens") or 0)
    task_chars = mean_task_chars(tasks, splits["train"] + splits["val"] + splits["test"])
    harness = str(tgt.get("harness") or "chat")
    episode, episode_most = target_episode(harness, task_chars, skill_chars, t_out)

    mode = str(o.get("update_mode") or "patch")
    calls = optimizer_calls(data, skill_chars, task_chars, t_out)
    planned_opt, most_opt = _optimizer_spend(o, batches * epochs, calls, mode, epochs)
    reask = Spend(most_opt.calls, most_opt.tokens + _tokens(SCHEMA_CHARS) * most_opt.calls, most_opt.completion_tokens)

    sel_boundary = max(0, epochs - 1) * (n_sel if o["slow_update"] else 0)
    sel_eps = n_sel + steps * n_sel + sel_boundary
    judged = Episodes(
        (n_sel, sel_eps, sel_eps + n_sel), (n_te, 2 * n_te, 3 * n_te),
        epochs * sum(batches) + max(0, epochs - 1) * boundary_pairs, epochs * sum(batches),
        steps if _pairs_judged(data, len(sel)) else 0, 1 if _deterministic(data) else r, extra,
    )  # fmt: skip
    j_first, j_planned, j_most = judge_spend(data, splits, tasks, judged, (task_chars, t_out))

    first = Spend(episode.calls * eps_first, episode.prompt_tokens * eps_first, 0) + j_first  # prompts only
    planned = episode.times(eps_planned) + planned_opt + j_planned
    most = episode_most.times(eps_most) + most_opt + reask + j_most
    prices = llm.get("prices") or {}
    j_model = ((llm.get("judge") or {}).get("model")) or opt.get("model")

    def cost(target_part: Spend, opt_part: Spend, judge_part: Spend) -> float:
        return _cost(prices, (tgt.get("model"), target_part), (opt.get("model"), opt_part), (j_model, judge_part))

    return Estimate(
        first, planned, most, (eps_first, eps_planned, eps_most),
        cost(episode.times(eps_planned), planned_opt, j_planned),
        cost(episode_most.times(eps_most), most_opt + reask, j_most),
        agent_target=harness != "chat", agent_call_tokens=_tokens(AGENT_REQUEST_CHARS.get(harness, 0) + task_chars),
        judge=(j_planned, j_most),
    )  # fmt: skip


def _policy(data: PlainConfig, n_tasks: int) -> GatePolicy:
    cfg = from_container(data)
    target = cfg.llm.target
    return GatePolicy.from_config(cfg.optimizer, n_tasks, deterministic_target(target.harness, target.temperature))


def _pairs_judged(data: PlainConfig, n_tasks: int) -> bool:
    """The step gate compares pairs (the sequential gate): the judge compares a rubric-only task's."""
    return _policy(data, n_tasks).sequential


def _deterministic(data: PlainConfig) -> bool:
    return _policy(data, 1).rule.deterministic


def compare(est: Estimate, ledger_totals: Mapping[str, float]) -> str:
    """The estimate beside what the night's ledger counted, for the night's report."""
    calls, tokens = int(ledger_totals.get("calls") or 0), int(ledger_totals.get("tokens") or 0)
    inside = est.first_pass.calls <= calls <= est.at_most.calls and tokens <= est.at_most.tokens
    return (
        f"spent {calls} calls, {tokens:,} tokens (estimated: planned {est.planned.calls} calls ~{est.planned.tokens:,}"
        f" tokens, at most {est.at_most.calls} ~{est.at_most.tokens:,}){'' if inside else ': OUTSIDE the estimate'}"
    )


def dumps(est: Estimate) -> str:
    return json.dumps(est.as_dict(), indent=1, sort_keys=True)
