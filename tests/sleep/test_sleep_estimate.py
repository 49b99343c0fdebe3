"""A night says what it may spend before its first model call (skillopt_ray.sleep.night.estimate): calls and tokens from
the task counts, the `+experiment=sleep` schedule and the models' budgets. The slow demo test compares the figures
with a real night's ledger (tests/sleep/test_sleep_demo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sleep_fixtures import task_folder

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.night import estimate
from skillopt_ray.sleep.night import runner as night


def planned(tmp_path: Path, *overrides: str) -> night.Plan:
    project = tmp_path / "proj"
    project.mkdir()
    tasks = task_folder(project, n_val=2)  # 2 train, 2 val, 1 test chat tasks
    opts = night.NightOptions(project=project, tasks=tasks, overrides=list(overrides))
    return night.plan(opts, tasks, "night-20261129T010000Z", False)


def test_the_estimate_counts_the_schedule_by_hand(tmp_path):
    p = planned(tmp_path, "optimizer.gate_seq_deterministic='false'")  # a sampling target: more gate pairs
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    # baseline on 2 val + 2 train episodes + 1 test = 5; planned adds the gate's first pass (2) and the best skill on
    # test (1): 8 (the final skill is the best); at most also a final skill other than the best, on selection (2) and
    # test (1): 11; 2 selection tasks can never pass the gate (each task one observation: 2^-2 is above its level),
    # so it plays no extra pair
    assert e.episodes == (5, 8, 11)
    # one step of 2 train episodes: 2 analysts (a failure and a success minibatch of 2), 1 final merge
    assert e.planned.calls == 8 + 3
    # at most: a merge per analyst pair and a ranking call, every JSON reply re-asked once
    assert e.at_most.calls == 11 + 2 * (2 + 1 + 1)
    assert 0 < e.first_pass.tokens < e.planned.tokens < e.at_most.tokens
    # every planned call pays at least its completion budget's worth in the planned figure
    budget = 8 * p.data["llm"]["target"]["max_tokens"] + 3 * p.data["llm"]["optimizer"]["max_tokens"]
    assert e.planned.completion_tokens == budget
    more = estimate.estimate(p.data, {**p.splits, "train": p.splits["train"] * 4}, p.tasks, 0)
    assert more.planned.calls > e.planned.calls and more.at_most.tokens > e.at_most.tokens
    longer = estimate.estimate(p.data, p.splits, p.tasks, 4000)  # a long starting skill is in every prompt
    assert longer.planned.prompt_tokens >= e.planned.prompt_tokens + 1000 * e.planned.calls


def test_a_deterministic_target_gets_no_extra_gate_pairs(tmp_path):
    p = planned(tmp_path)  # the embedded model at temperature 0: the gate plays its first pass only
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    assert e.episodes == (5, 8, 11) and e.at_most.calls == 11 + 2 * (2 + 1 + 1)
    none = estimate.estimate({**p.data, "optimizer": {**p.data["optimizer"], "use_gate": False}}, p.splits, p.tasks)
    assert none.episodes == e.episodes  # no gate: no extra pairs either


def test_the_estimate_counts_extra_gate_pairs_by_the_gates_own_rule(tmp_path):
    """No budget for extra pairs means none, as the gate plays them (the estimate once counted gate_seq_min_extra)."""
    p = planned(tmp_path, "optimizer.gate_seq_deterministic='false'", "optimizer.gate_seq_budget=0")
    assert estimate.estimate(p.data, p.splits, p.tasks, 0).episodes == (5, 8, 11)
    strict = {**p.data, "optimizer": {**p.data["optimizer"], "gate_test": "none", "gate_seq_budget": 2.0}}
    assert estimate.estimate(strict, p.splits, p.tasks, 0).episodes == (5, 8, 11)  # not the sequential gate


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
