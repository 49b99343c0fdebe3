"""`+experiment=livemathematicianbench` end to end through the driver on the built-in sample items, with a rule-gated
scripted target: it names the right option (by its text, so whatever the order) only once the optimizer has written
the rule for the item's theorem type into the skill. Every target request shows the choices in the order of the
reference's shuffle: the batch seed in training, seed 42 in every evaluation."""

from __future__ import annotations

import json
import re

import pytest
from helpers import checked as checked_run
from scripted_server import Policies, ScriptedServer
from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark
from skillopt_envs.livemathematicianbench.samples import ensure_samples
from skillopt_envs.livemathematicianbench.shuffle import shuffle_choices

from skillopt_ray import cli

pytestmark = pytest.mark.slow


class RecordingPolicies(Policies):
    """The rule-gated policies, remembering each target request's sample key and user message."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, str]] = []

    def target_reply(self, body, key):
        self.seen.append((key, body["messages"][1]["content"]))
        return super().target_reply(body, key)


def _choice_lines(user: str) -> list[str]:
    return user.split("## Choices\n", 1)[1].split("\n\n")[0].splitlines()


def test_livemath_experiment_learns_with_seeded_choice_orders(ray_cluster, tmp_path):
    root = ensure_samples(str(tmp_path / "samples"))
    tasks = {t.task_id: t for t in LiveMathBenchmark({"options": {"sample_dir": str(root)}}).load_split("all")}
    answers = {
        i: (
            t.task_type,
            f"Comparing the options.\n<answer>{t.payload['correct_choice']['text']}</answer>",
            "<answer>E</answer>",
        )
        for i, t in tasks.items()
    }
    policies = RecordingPolicies(target="rule_gated", answers=answers)
    with ScriptedServer(policies) as srv:
        overrides = [
            "+experiment=livemathematicianbench",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.options.sample_dir={root}",
            "env.limit_train=8",
            "env.limit_test=6",
        ]
        data = cli.plain(cli.compose(overrides))
        data = cli.resolve_paths(data)
        code = cli.run_one(checked_run(data))
        rd = cli.run_dir_for(data)
    assert code == 0
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] > 0.0, summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-" in (rd / "best_skill.md").read_text()
    step = rd / "steps" / "e01_s001"
    assert any("gate" in p.name for p in step.iterdir())  # the first training step reached the validation gate
    rollout = json.loads((step / "rollout.json").read_text())
    assert {r["info"]["choice_seed"] for r in rollout} == {42 + 1000 * 1 + 0 + 1}
    assert all(
        r["fail_reason"] == "MCQ=0: predicted 'E' but expected '" + r["info"]["correct_label"] + "'" for r in rollout
    )

    checked = {"eval": 0, "train": 0}
    for key, user in policies.seen:
        m = re.match(r"^(eval|train)/(?:e(\d+)s(\d+)|[^/]+)/(.+)/t0$", key)
        if not m:
            continue
        kind, epoch, step_no, task_id = m.groups()
        seed = 42 if kind == "eval" else 42 + 1000 * int(epoch) + int(step_no)
        p = tasks[task_id].payload
        order, _ = shuffle_choices(task_id, p["choices"], p["correct_choice"], seed)
        assert _choice_lines(user) == [f"{c['label']}. {c['text']}" for c in order], (key, user)
        checked[kind] += 1
    assert checked["eval"] >= 2 and checked["train"] >= 8, checked
