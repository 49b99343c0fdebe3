"""A rewrite that copies the optimizer prompt (its headings, a `[...]` placeholder) is no skill: with
optimizer.refuse_echoed_rewrites it is refused before the gate (skipped_echoed_prompt, the step keeps its skill and
spends no selection rollout); by default it is gated, as the reference gates any non-blank rewrite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conformance_helpers import FakeRunner, tasks
from skillopt_envs.chat import JsonResult

from skillopt_ray import cli, prompts
from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.llm.gateway import bounded_schema
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402
from skillopt_ray.skill.echo import prompt_echo
from skillopt_ray.stages.update import ECHOED, update

SKILL = "# Skill\n\nNo rules yet: training adds what it learns about these tasks here.\n"
# what the 1.5B rewriter returned in the house-style round (docs/local-model.md)
ECHO = SKILL + "\n## Selected Revise Suggestions (1 total)\n\n[...]\n"
GOOD = SKILL + "\n## Rules\n- Return None for empty input.\n- Round floats to 2 decimals.\n"
SUGGESTION = {"type": "add_rule", "title": "empty input", "instruction": "return None", "support_count": 1}


class Rewriter:
    """Answers the rewrite call with `new_skill`; records the calls."""

    def __init__(self, new_skill: str):
        self.new_skill, self.calls = new_skill, 0

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        self.calls += 1
        data = {"new_skill": self.new_skill, "change_summary": ["c"]}
        return JsonResult(data, json.dumps(data))


def _rewrite(new_skill: str, refuse: bool) -> Any:
    return asyncio.run(
        update(Rewriter(new_skill), SKILL, [SUGGESTION], mode="rewrite_from_suggestions", step_buffer="",
               protect_regions=True, key="k", refuse_echoes=refuse)
    )  # fmt: skip


def _rendered_prompts() -> list[str]:
    """The user messages the rewriter and the full-rewrite analysts and mergers read."""
    cand = {"title": "t", "change_summary": ["c"], "new_skill": "x"}
    return [
        prompts.rewrite_user(skill=SKILL, suggestions=[SUGGESTION], step_buffer="BUF"),
        prompts.analyst_user(
            skill=SKILL,
            mode="full_rewrite_minibatch",
            max_budget=4,
            step_buffer="BUF",
            meta_skill="M",
            kind="failure",
            trajectories="T",
            k=1,
        ),  # fmt: skip
        prompts.analyst_user(
            skill=SKILL,
            mode="rewrite_from_suggestions",
            max_budget=4,
            step_buffer="",
            meta_skill="",
            kind="success",
            trajectories="T",
            k=1,
        ),  # fmt: skip
        prompts.merge_user(meta_skill="M", skill=SKILL, patches=[{"skill_candidates": [cand]}], level=1),
        prompts.final_merge_user(
            meta_skill="", skill=SKILL, mode="full_rewrite_minibatch", failure={"skill_candidates": [cand]}, success={}
        ),  # fmt: skip
        prompts.final_merge_user(meta_skill="", skill=SKILL, mode="patch", failure={}, success={}),
    ]


def test_every_heading_of_the_optimizer_prompts_is_recognised_as_an_echo():
    headings = {line for text in _rendered_prompts() for line in text.splitlines() if line.startswith("## ")}
    assert len(headings) >= 8
    for heading in headings:
        assert prompt_echo(f"{SKILL}\n{heading}\n- a rule\n", SKILL), heading


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        SKILL + "\n## Current pitfalls\n- check the skill of the current task\n",
        SKILL + "\n```python\nx = arr[...]  # numpy: the whole array\n```\n",
        SKILL + "\n- A list such as [1, 2, ...] is fine to mention.\n",
    ],
)
def test_a_skill_that_reads_as_a_skill_is_not_an_echo(text):
    assert prompt_echo(text, SKILL) is None


def test_an_echo_is_named_and_only_what_the_rewrite_added_counts():
    assert "Selected Revise Suggestions" in str(prompt_echo(ECHO, SKILL))
    assert "placeholder" in str(prompt_echo(SKILL + "\n## Rules\n[...]\n", SKILL))
    assert "placeholder" in str(prompt_echo(SKILL + "\n- Return […] here.\n", SKILL))
    kept = SKILL + "\n## Current Skill notes\n[...]\n"  # the current skill already holds both: its own text
    assert prompt_echo(kept + "- one more rule\n", kept) is None


def test_a_refused_rewrite_leaves_no_candidate_and_a_named_skip():
    out = _rewrite(ECHO, refuse=True)
    assert out.candidate is None
    assert [r["status"] for r in out.reports] == [ECHOED] == ["skipped_echoed_prompt"]
    assert "Selected Revise Suggestions" in out.reports[0]["reason"] and out.note.startswith("rewrite refused: ")
    assert out.summary == {"total": 1, "applied": 0, "skipped": 1, "errors": 0}
    assert _rewrite(GOOD, refuse=True).candidate == GOOD  # a real rewrite goes on to the gate


def test_by_default_an_echoed_rewrite_is_gated_as_the_reference_does():
    assert _rewrite(ECHO, refuse=False).candidate == ECHO
    assert OptimizerConfig().refuse_echoed_rewrites is False


def test_full_rewrites_skip_an_echo_for_the_next_usable_candidate():
    items = [{"new_skill": ECHO, "change_summary": []}, {"new_skill": GOOD, "change_summary": ["rules"]}]
    run = lambda its, refuse: asyncio.run(  # noqa: E731
        update(None, SKILL, its, mode="full_rewrite_minibatch", step_buffer="", protect_regions=True, key="k",
               refuse_echoes=refuse)
    )  # fmt: skip
    out = run(items, True)
    assert out.candidate == GOOD and [r["status"] for r in out.reports] == [ECHOED]
    assert run(items, False).candidate == ECHO
    none = run(items[:1], True)
    assert none.candidate is None and none.note.startswith("every full rewrite refused: ")


class EchoingOptimizer:
    """Analysts suggest one rule; the merge keeps it; the rewrite echoes the prompt."""

    def __init__(self):
        self.calls: list[Any] = []

    async def chat_json(self, req, schema, name="reply"):
        self.calls.append(req)
        data: dict[str, Any] = {
            "analyst": {"batch_size": 1, "failure_summary": [], "patch": {"revise_suggestions": [SUGGESTION]}},
            "merge": {"revise_suggestions": [SUGGESTION]},
            "ranking": {"selected_indices": [0]},
            "rewrite": {"new_skill": ECHO, "change_summary": ["echo"]},
        }[req.stage]
        return JsonResult(data, json.dumps(data))

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def test_a_refused_rewrite_ends_the_step_as_skip_no_rewrite_without_a_gate_rollout(tmp_path):
    cfg = Config(experiment="refusal")
    cfg.optimizer = OptimizerConfig(
        epochs=1, batch_size=2, minibatch_size=1, update_mode="rewrite_from_suggestions", slow_update=False,
        meta_skill=False, refuse_echoed_rewrites=True,
    )  # fmt: skip
    rd, runner, llm = RunDir(tmp_path / "run").ensure(), FakeRunner(), EchoingOptimizer()
    trainer = Trainer(cfg, rd, llm, runner, Tracker(False, None, "refusal", tmp_path),
                      Splits(tasks("tr", 2), tasks("va", 2), tasks("te", 1)), SKILL)  # fmt: skip
    asyncio.run(trainer.run())
    history = json.loads((rd.root / "history.json").read_text())
    assert [h["action"] for h in history] == ["skip_no_rewrite"]
    assert [c.stage for c in llm.calls].count("rewrite") == 1
    selection = [c for c in runner.calls if not c["training"] and c["ids"][0].startswith("va")]
    assert [c["skill"] for c in selection] == [SKILL]  # the baseline only: no rollout of the echo
    assert trainer.state.step_buffer == [] and rd.read_best_skill() == SKILL


def test_the_house_style_run_refuses_echoes_and_its_rewriter_can_write_the_control_skill():
    """llm=local bounds every string under the optimizer's grammar; the house-style experiment must leave the
    rewrite room for a skill as long as the hand-written control (the first round's cap of 300 could not)."""
    obj = cli.compose(["+experiment=local_house_style", "llm=local"])
    assert obj.optimizer.refuse_echoed_rewrites is True
    rc = obj.llm.optimizer
    bounded = bounded_schema(prompts.REWRITE_SCHEMA, rc.schema_max_items, rc.schema_max_chars)
    control = Path(__file__).resolve().parents[2] / "examples" / "house-style" / "control_skill.md"
    assert bounded["properties"]["new_skill"]["maxLength"] >= len(control.read_text())
