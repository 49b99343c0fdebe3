"""A night says what it may spend before its first model call (skillopt_ray.sleep.night.estimate): calls and tokens from
the task counts, the `+experiment=sleep` schedule and the models' budgets. The slow demo test compares the figures
with a real night's ledger (tests/sleep/test_sleep_demo.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sleep_fixtures import rubric_folder, task_folder

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.night import estimate
from skillopt_ray.sleep.night import runner as night


def planned(tmp_path: Path, *overrides: str, n_val: int = 2, folder: Any = task_folder) -> night.Plan:
    project = tmp_path / "proj"
    project.mkdir()
    tasks = folder(project, n_val=n_val)  # 2 train, n_val val, 1 test chat tasks
    opts = night.NightOptions(project=project, tasks=tasks, overrides=list(overrides))
    return night.plan(opts, tasks, "night-20261129T010000Z", False)


SAMPLING = "optimizer.gate_seq_deterministic='false'"  # a sampling target: the gate may play extra pairs


def test_the_estimate_counts_the_schedule_by_hand(tmp_path):
    """6 validation tasks: enough for the sleep gate (task_p 0.05 needs 5), so its extra pairs are counted."""
    p = planned(tmp_path, SAMPLING, n_val=6)
    assert estimate.gate_extra(p.data, 6, 6) == 240  # the preset's gate_seq_min_extra, above 3x the first pass (18)
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    # baseline on 6 val + 2 train episodes + 1 test = 9; planned adds the gate's first pass (6) and the best skill on
    # test (1): 16 (the final skill is the best); at most also a final skill other than the best, on selection (6)
    # and test (1), and the one gate's 240 extra episodes: 23 + 240
    assert e.episodes == (9, 16, 23 + 240)
    # one step of 2 train episodes: 2 analysts (a failure and a success minibatch of 2), 1 final merge
    assert e.planned.calls == 16 + 3
    # at most: a merge per analyst pair and a ranking call, every JSON reply re-asked once
    assert e.at_most.calls == 263 + 2 * (2 + 1 + 1)
    assert 0 < e.first_pass.tokens < e.planned.tokens < e.at_most.tokens
    # every planned call pays at least its completion budget's worth in the planned figure
    budget = 16 * p.data["llm"]["target"]["max_tokens"] + 3 * p.data["llm"]["optimizer"]["max_tokens"]
    assert e.planned.completion_tokens == budget
    assert "up to 247 more where the gate's decision is close" in e.lines()[0]
    # without the floor the budget is 3x the first pass: 18 extra episodes
    data = {**p.data, "optimizer": {**p.data["optimizer"], "gate_seq_min_extra": 0}}
    assert estimate.estimate(data, p.splits, p.tasks, 0).episodes == (9, 16, 23 + 18)
    # the same folder with 4 validation tasks can never accept (2^-4 > 0.05): no extra pair
    four = {**p.splits, "val": p.splits["val"][:4]}
    assert estimate.estimate(p.data, four, p.tasks, 0).episodes == (7, 12, 17)
    more = estimate.estimate(p.data, {**p.splits, "train": p.splits["train"] * 4}, p.tasks, 0)
    assert more.planned.calls > e.planned.calls and more.at_most.tokens > e.at_most.tokens
    longer = estimate.estimate(p.data, p.splits, p.tasks, 4000)  # a long starting skill is in every prompt
    assert longer.planned.prompt_tokens >= e.planned.prompt_tokens + 1000 * e.planned.calls


def test_a_deterministic_target_gets_no_extra_gate_pairs(tmp_path):
    p = planned(tmp_path, n_val=6)  # the embedded model at temperature 0: the gate plays its first pass only
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    assert e.episodes == (9, 16, 23) and e.at_most.calls == 23 + 2 * (2 + 1 + 1)
    none = estimate.estimate({**p.data, "optimizer": {**p.data["optimizer"], "use_gate": False}}, p.splits, p.tasks)
    assert none.episodes == e.episodes  # no gate: no extra pairs either


def test_the_estimate_counts_extra_gate_pairs_by_the_gates_own_rule(tmp_path):
    """No budget for extra pairs means none, as the gate plays them (the estimate once counted gate_seq_min_extra)."""
    p = planned(tmp_path, SAMPLING, "optimizer.gate_seq_budget=0", n_val=6)
    assert estimate.estimate(p.data, p.splits, p.tasks, 0).episodes == (9, 16, 23)
    strict = {**p.data, "optimizer": {**p.data["optimizer"], "gate_test": "none", "gate_seq_budget": 2.0}}
    assert estimate.estimate(strict, p.splits, p.tasks, 0).episodes == (9, 16, 23)  # not the sequential gate


def test_prices_give_a_cost_and_low_caps_are_named(tmp_path):
    p = planned(tmp_path, "llm.prices.smollm2-135m.input_per_mtok=1", "llm.prices.smollm2-135m.output_per_mtok=2")
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    want = (e.planned.prompt_tokens + 2 * e.planned.completion_tokens) / 1e6
    assert e.cost_planned == pytest.approx(want) and e.cost_at_most > e.cost_planned
    lines = e.lines(max_tokens=100, max_cost=1e-9)
    assert "--max-tokens cap (100) is below the planned spend" in lines[1]
    assert "--max-cost cap" in lines[2]


@pytest.mark.parametrize(("k", "batch", "calls"), [(0, 2, 0), (1, 2, 0), (2, 2, 1), (3, 2, 2), (5, 2, 4), (4, 8, 1)])
def test_hierarchical_merges(k, batch, calls):
    assert estimate.hierarchical_merges(k, batch) == calls


def test_dry_run_prints_the_estimate_before_any_model_call(tmp_path, capsys, monkeypatch):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project, n_val=2)
    seen: list[str] = []

    class Launched(Exception):
        pass

    def execute(*_a, **_k):  # the run's launch: every model call comes after it
        seen.append(capsys.readouterr().err)
        raise Launched

    monkeypatch.setattr("skillopt_ray.cli.execute", execute)
    argv = ["dry-run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks")]
    with pytest.raises(Launched):
        sleep_cli.main([*argv, "--max-tokens", "500"])
    (err,) = seen
    assert "estimate (before any model call): first pass 5 calls" in err and "as planned 11 calls" in err, err
    assert "--max-tokens cap (500) is below the planned spend" in err


def test_an_agent_episode_is_counted_as_the_clis_own_calls(tmp_path):
    """Issue 47: a jailed Codex night estimated "at most ~56,836 tokens" spent 354,765: each of its episodes was
    counted as one chat-sized call. Now an episode is AGENT_CALLS calls (at most the call limit), each carrying the
    CLI's own measured request; tests/sleep/test_sleep_agent_night.py checks the figure against real-CLI nights."""
    chat = planned(tmp_path)
    codex = estimate.estimate(
        {**chat.data, "llm": {**chat.data["llm"], "target": {**chat.data["llm"]["target"], "harness": "codex"}}},
        chat.splits, chat.tasks, 0,
    )  # fmt: skip
    plain = estimate.estimate(chat.data, chat.splits, chat.tasks, 0)
    eps = codex.episodes[1]
    assert codex.episodes[:2] == plain.episodes[:2]  # (an agent is not deterministic: more gate pairs at most)
    assert codex.planned.calls - plain.planned.calls == eps * (estimate.AGENT_CALLS - 1)
    # every planned agent call carries Codex's own request (~7,000 tokens)
    per_call = estimate.AGENT_REQUEST_CHARS["codex"] // 4
    assert codex.planned.prompt_tokens >= eps * estimate.AGENT_CALLS * per_call
    assert codex.at_most.tokens >= codex.episodes[2] * 60 * per_call
    assert any("agent episode is counted as 2 calls" in ln for ln in codex.lines())


def test_the_estimate_counts_the_judges_calls_by_hand(tmp_path):
    """Issue 47: the estimate left the judge out (the demo night's 20 calls held 9 of the judge's). Rubric-only tasks,
    2 train, 6 val, 1 test, a sampling target, an extra-episode budget of 3x the first pass (18)."""
    p = planned(tmp_path, SAMPLING, "optimizer.gate_seq_min_extra=0", n_val=6, folder=rubric_folder)
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    assert e.episodes == (9, 16, 23 + 18)
    # a judge_score call per episode (every task is rubric-only); both orders of each pair the gate compares: the
    # first look's 6 pairs as planned, and at most one more per extra episode, each judged in up to 2 rounds (a tied
    # round is judged again: optimizer.gate_judge_reask=1)
    scores, pairs = (9, 16, 41), (0, 6, (6 + 18) * 2)
    j_planned, j_most = e.judge
    assert (j_planned.calls, j_most.calls) == (scores[1] + 2 * pairs[1], scores[2] + 2 * pairs[2])
    assert e.first_pass.calls == 9 + scores[0]
    assert e.planned.calls == 16 + 3 + scores[1] + 2 * pairs[1]
    assert e.at_most.calls == 41 + 2 * (2 + 1 + 1) + scores[2] + 2 * pairs[2]
    j_out = p.data["llm"]["optimizer"]["max_tokens"]  # the judge is the optimizer's endpoint
    assert j_planned.completion_tokens == (scores[1] + 2 * pairs[1]) * j_out
    assert any("the judge's calls are in these figures: 28 as planned" in ln for ln in e.lines())
    assert e.as_dict()["judge"]["at_most"]["calls"] == 41 + 2 * 48


def test_rubric_tasks_with_checks_are_judged_on_evaluations_only(tmp_path):
    """A task with rule checks and a rubric: its checks score it, the judge scores its evaluations' episodes (the
    agreement), not its training episodes, and the gate compares its pairs by their scores, not by the judge."""
    p = planned(tmp_path, SAMPLING, "optimizer.gate_seq_min_extra=0", n_val=6, folder=rubric_with_checks)
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    # selection 6 + 6 (planned), 12 + 6 (at most), test 2 and 3: no training episode, no extra one, no pair
    assert (e.judge[0].calls, e.judge[1].calls) == (12 + 2, 18 + 3)
    plain = estimate.estimate(p.data, p.splits, tmp_path / "none", 0)  # (no task.json to read: nothing judged)
    assert plain.judge[1].calls == 0


def rubric_with_checks(project: Path, n_val: int) -> Path:
    return rubric_folder(project, n_val=n_val, checks=True)


@pytest.mark.parametrize(("n_val", "said"), [(2, True), (4, True), (5, False)])
def test_a_night_too_small_ever_to_accept_says_so_in_one_line_before_it_spends(
    tmp_path, capsys, monkeypatch, n_val, said
):
    """Issue 47: the demo night ended with 1 validation task, which can never pass the sleep gate (each task counts
    once; 5 at its level). The night says so in one line before its first model call."""
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project, n_val=n_val)
    seen: list[str] = []

    class Launched(Exception):
        pass

    def execute(*_a, **_k):  # the run's launch: every model call comes after it
        seen.append(capsys.readouterr().err)
        raise Launched

    monkeypatch.setattr("skillopt_ray.cli.execute", execute)
    with pytest.raises(Launched):
        sleep_cli.main(["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks")])
    (err,) = seen
    lines = [ln for ln in err.splitlines() if "can never pass the gate" in ln]
    if not said:
        assert lines == [], err
        return
    assert lines == [
        f"note: {n_val} selection task(s) can never pass the gate (each task counts once: at least 5 are needed); "
        "this night can only report, never change the skill: harvest more sessions or raise --val-fraction"
    ], err


def test_the_spend_line_says_the_gates_own_extra_episodes(tmp_path):
    """The night's first line said "up to 3x the gate's first pass" whatever the gate would play: none for a
    deterministic target or a split too small to accept, and the preset's floor of 240 otherwise."""
    sampling = planned(tmp_path, SAMPLING, n_val=6)
    opts = night.NightOptions(project=tmp_path / "proj")
    assert "plus up to 240 more a gate where its decision is close" in night.spend_line(sampling, opts)
    other = tmp_path / "b"
    other.mkdir()
    deterministic = planned(other, n_val=6)
    assert "plus up to 0 more a gate" in night.spend_line(deterministic, opts)
