"""What a night may spend, said before its first model call: calls and tokens from the night's task counts, its
schedule (`+experiment=sleep` and any overrides) and the models' token budgets, as three figures:

- **first pass**: what the night spends whatever happens (the baseline on the selection split, every train
  episode, the initial skill on test), prompts only: a floor (a skill is evaluated on a split once: a night without
  test tasks, whose test split is the selection split, plays no test episode of its own);
- **as planned**: every episode the schedule plans and the optimizer calls of a step whose analysts all have
  something to say, each reply as long as its budget allows;
- **at most**: that, plus every extra pair the sequential gate may play on a close decision, a re-ask of every
  JSON reply, a ranking call per step: a ceiling the night does not pass.

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

    def as_dict(self) -> JSONObject:
        out: JSONObject = {"episodes": dict(zip(("first_pass", "planned", "at_most"), self.episodes))}
        for name in ("first_pass", "planned", "at_most"):
            s: Spend = getattr(self, name)
            out[name] = {"calls": s.calls, "tokens": s.tokens, "prompt_tokens": s.prompt_tokens}
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
    cfg = from_container(data)
    target = cfg.llm.target
    policy = GatePolicy.from_config(cfg.optimizer, n_tasks, deterministic_target(target.harness, target.temperature))
    return policy.extra_episodes(first_pass, n_tasks)


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
    o_out = int(opt.get("max_tokens") or 0)
    o_cap = int(opt.get("context_tokens") or 0)
    task_chars = mean_task_chars(tasks, splits["train"] + splits["val"] + splits["test"])
    harness = str(tgt.get("harness") or "chat")
    episode, episode_most = target_episode(harness, task_chars, skill_chars, t_out)

    mode, mb = str(o.get("update_mode") or "patch"), int(o["minibatch_size"])
    trajectory = task_chars + 4 * t_out + TRAJECTORY_FRAME_CHARS
    analyst_sys = len(prompts.analyst_system("failure", mode, str(env.get("name") or ""), False, "both"))
    analyst = Spend(1, _tokens(analyst_sys + skill_chars + mb * trajectory, o_cap), o_out)
    merge_sys = len(prompts.system_prompt(f"merge_final{prompts.MODE_SUFFIX[mode]}"))
    merge = Spend(1, _tokens(merge_sys + skill_chars + 2 * 4 * o_out, o_cap), o_out)
    ranking = Spend(1, _tokens(len(prompts.system_prompt("ranking")) + skill_chars + 4 * o_out, o_cap), o_out)

    planned_opt, most_opt = _optimizer_spend(o, batches * epochs, (analyst, merge, ranking), mode, epochs)
    reask = Spend(most_opt.calls, most_opt.tokens + _tokens(SCHEMA_CHARS) * most_opt.calls, most_opt.completion_tokens)

    first = Spend(episode.calls * eps_first, episode.prompt_tokens * eps_first, 0)  # prompts only: replies may be short
    planned = episode.times(eps_planned) + planned_opt
    most = episode_most.times(eps_most) + most_opt + reask
    prices = llm.get("prices") or {}

    def cost(target_part: Spend, opt_part: Spend) -> float:
        return _cost(prices, (tgt.get("model"), target_part), (opt.get("model"), opt_part))

    return Estimate(
        first, planned, most, (eps_first, eps_planned, eps_most),
        cost(episode.times(eps_planned), planned_opt), cost(episode_most.times(eps_most), most_opt + reask),
        agent_target=harness != "chat", agent_call_tokens=_tokens(AGENT_REQUEST_CHARS.get(harness, 0) + task_chars),
    )  # fmt: skip


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
