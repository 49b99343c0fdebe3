"""`+experiment=docvqa` end to end through the driver on the built-in sample pages, with a rule-gated scripted
target: it answers right only once the optimizer has written the rule for the question's type into the skill.
The target's requests carry each page as the second content part of the user message."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from scripted_server import Policies, ScriptedServer
from skillopt_envs.docvqa import data as dv
from skillopt_envs.docvqa.samples import ensure_samples

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def test_docvqa_experiment_learns_and_sends_the_page_image(ray_cluster, tmp_path):
    root = ensure_samples(str(tmp_path / "samples"))
    answers, images = {}, {}
    for split in dv.SPLITS:
        for it in dv.load_split_items(root, split, root):
            answers[it["id"]] = (it["task_type"], f"<answer>{it['answers'][0]}</answer>", "<answer>unknown</answer>")
            images.setdefault(it["question"], set()).add(Path(it["image_path"]).read_bytes())
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        overrides = [
            "+experiment=docvqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.options.sample_dir={root}",
            "env.limit_test=4",
        ]
        _obj, data = cli.typed(cli.compose(overrides))
        data = cli.resolve_paths(data)
        code = cli.run_one(data)
        rd = cli.run_dir_for(data)
        targets = [
            b for b in srv.state.bodies if len(b["messages"]) >= 2 and isinstance(b["messages"][1]["content"], list)
        ]
    assert code == 0
    assert targets, "no target request reached the server"
    for body in targets:
        text, image = body["messages"][1]["content"]
        assert text["type"] == "text" and image["type"] == "image_url"
        url = image["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        question = text["text"].split("\n\n")[0]
        assert base64.b64decode(url.split(",", 1)[1]) in images[question]  # a page this question is asked of
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] < 1.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-" in (rd / "best_skill.md").read_text()
    step = rd / "steps" / "e01_s001"
    gate = [p.name for p in step.iterdir()]
    assert any("gate" in n for n in gate), gate  # the first training step reached the validation gate
    analyst_prompts = (rd / "steps").rglob("*.json")
    assert not any("base64," in p.read_text(errors="ignore") for p in analyst_prompts)  # no image in run records
