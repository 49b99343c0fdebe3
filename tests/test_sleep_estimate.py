"""A night says what it may spend before its first model call (skillopt_ray.sleep.night.estimate): calls and tokens from
the task counts, the `+experiment=sleep` schedule and the models' budgets. The slow demo test compares the figures
with a real night's ledger (tests/test_sleep_demo.py)."""

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
    # baseline on 2 val + 2 train episodes + 1 test = 5; planned adds the gate's first pass (2), the final selection
    # (2) and the best and final skills on test (2): 11; the sequential gate may add max(24, 2 x 2) = 24 more
    assert e.episodes == (5, 11, 35)
    # one step of 2 train episodes: 2 analysts (a failure and a success minibatch of 2), 1 final merge
    assert e.planned.calls == 11 + 3
    # at most: a merge per analyst pair and a ranking call, every JSON reply re-asked once
    assert e.at_most.calls == 35 + 2 * (2 + 1 + 1)
    assert 0 < e.first_pass.tokens < e.planned.tokens < e.at_most.tokens
    # every planned call pays at least its completion budget's worth in the planned figure
    budget = 11 * p.data["llm"]["target"]["max_tokens"] + 3 * p.data["llm"]["optimizer"]["max_tokens"]
    assert e.planned.completion_tokens == budget
    more = estimate.estimate(p.data, {**p.splits, "train": p.splits["train"] * 4}, p.tasks, 0)
    assert more.planned.calls > e.planned.calls and more.at_most.tokens > e.at_most.tokens
    longer = estimate.estimate(p.data, p.splits, p.tasks, 4000)  # a long starting skill is in every prompt
    assert longer.planned.prompt_tokens >= e.planned.prompt_tokens + 1000 * e.planned.calls


def test_a_deterministic_target_gets_no_extra_gate_pairs(tmp_path):
    p = planned(tmp_path)  # the embedded model at temperature 0: the gate plays its first pass only
    e = estimate.estimate(p.data, p.splits, p.tasks, 0)
    assert e.episodes == (5, 11, 11) and e.at_most.calls == 11 + 2 * (2 + 1 + 1)
    none = estimate.estimate({**p.data, "optimizer": {**p.data["optimizer"], "use_gate": False}}, p.splits, p.tasks)
    assert none.episodes[2] == none.episodes[1]


def test_the_estimate_counts_extra_gate_pairs_by_the_gates_own_rule(tmp_path):
    """No budget for extra pairs means none, as the gate plays them (the estimate once counted gate_seq_min_extra)."""
    p = planned(tmp_path, "optimizer.gate_seq_deterministic='false'", "optimizer.gate_seq_budget=0")
    assert estimate.estimate(p.data, p.splits, p.tasks, 0).episodes == (5, 11, 11)
    strict = {**p.data, "optimizer": {**p.data["optimizer"], "gate_test": "none", "gate_seq_budget": 2.0}}
    assert estimate.estimate(strict, p.splits, p.tasks, 0).episodes == (5, 11, 11)  # not the sequential gate


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
    assert "estimate (before any model call): first pass 5 calls" in err and "as planned 14 calls" in err, err
    assert "--max-tokens cap (500) is below the planned spend" in err
