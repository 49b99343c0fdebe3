"""`+experiment=spreadsheetbench` and `+experiment=searchqa` end to end through the driver, with a rule-gated scripted target:
it answers right only once the optimizer has written the rule for the task's type into the skill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qa_fixture
from helpers import checked
from scripted_server import Policies, ScriptedServer
from skillopt_envs.spreadsheetbench.samples import SAMPLE_SPLITS, SOLUTIONS, TEMPLATES

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def _run(url: str, out: Path, experiment: str, *extra: str) -> tuple[int, Path]:
    overrides = [
        f"+experiment={experiment}",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        # the sizes these tests were written for (the smoke preset's before it shrank for the quickstart): every task
        # type in the train batch, so the optimizer can write each type's rule
        "env.limit_train=4",
        "env.limit_selection=2",
        "optimizer.batch_size=4",
        "optimizer.minibatch_size=2",
        "optimizer.slow_update_samples=2",
        "optimizer.lr_schedule=cosine",
        *extra,
    ]
    data = cli.plain(cli.compose(overrides))
    data = cli.resolve_paths(data)
    return cli.run_one(checked(data)), cli.run_dir_for(data)


def _check_learned(rd: Path) -> dict:
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-" in (rd / "best_skill.md").read_text()
    return summary


@pytest.mark.usefixtures("needs_bwrap")
def test_spreadsheetbench_experiment_learns_on_sample_tasks(ray_cluster, tmp_path, capsys):
    wrong = "import os, shutil\nshutil.copy(os.environ['INPUT_PATH'], os.environ['OUTPUT_PATH'])\n"
    answers = {}
    for t in TEMPLATES:
        kind = "cell_level" if t.kind.startswith("Cell") else "sheet_level"
        for split, n in SAMPLE_SPLITS.items():
            for i in range(n):
                answers[f"sample-{t.name}-{split}{i}"] = (
                    kind,
                    f"```python\n{SOLUTIONS[t.name]}```",
                    f"```python\n{wrong}```",
                )
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        code, rd = _run(
            srv.base_url,
            tmp_path / "out",
            "spreadsheetbench",
            f"env.options.sample_dir={tmp_path / 'samples'}",
            "env.max_turns=2",
            "env.limit_test=4",
        )
    assert code == 0
    _check_learned(rd)
    rollout = json.loads((rd / "steps/e01_s001/rollout.json").read_text())
    assert all(
        r["fail_reason"].startswith("eval-mismatch: ") and r["n_turns"] == 2 for r in rollout
    )  # training feedback, then max turns
    captured = capsys.readouterr()
    assert "built-in sample tasks" in captured.out + captured.err


def test_searchqa_experiment_learns_on_a_fixture(ray_cluster, tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        code, rd = _run(
            srv.base_url,
            tmp_path / "out",
            "searchqa",
            f"env.data_dir={tmp_path / 'qa'}",
            "env.options.split_source=folders",
        )
    assert code == 0
    summary = _check_learned(rd)
    assert summary["test"]["best"]["soft"] == 1.0


def test_an_already_running_embedded_server_is_used_instead_of_starting_one(ray_cluster, tmp_path):
    """What a sweep's trials do: llm=embedded with llm.embedded.server_url (here the scripted server) starts no llama.cpp."""
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        overrides = [
            "+experiment=searchqa",
            "+smoke=tiny",
            "llm=embedded",
            f"llm.embedded.server_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.data_dir={tmp_path / 'qa'}",
            "env.options.split_source=folders",
        ]  # fixture items, not the paper split's ids
        data = cli.plain(cli.compose(overrides))
        data = cli.resolve_paths(data)
        rd = cli.run_dir_for(data)  # before the run: execute() fills in the roles' base_url
        code = cli.run_one(checked(data))
        assert srv.state.attempts > 0  # every call went to the given server
    assert code == 0
    assert not (rd / "embedded_server.log").exists()
    _check_learned(rd)
