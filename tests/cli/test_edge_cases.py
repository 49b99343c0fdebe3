"""The reference's edge cases, each matched in the default configuration: SearchQA's verification block prints
exact match as a float, a ranking budget of 0 with an unusable first index keeps nothing, an indented one-line
SpreadsheetBench script runs, and a rewrite with no protected block keeps the model's text."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from skillopt_envs.chat import JsonResult
from skillopt_envs.searchqa.benchmark import evaluation_block
from skillopt_envs.spreadsheetbench.benchmark import prepare_script

from skillopt_ray.skill.document import APPENDIX_END, APPENDIX_HEADING, APPENDIX_START
from skillopt_ray.stages.select import _pick, rank_and_select
from skillopt_ray.stages.update import update


@pytest.mark.parametrize("em,shown", [(0, "0.0"), (1, "1.0")])
def test_searchqa_verification_prints_exact_match_as_a_float(em, shown):
    block = evaluation_block("who?", "x", ["y"], em, 0.25)
    assert block.splitlines()[-2:] == [f"Exact Match: {shown}", "F1: 0.2500"]


@pytest.mark.parametrize(
    "indices,budget,expected",
    [
        ([99, 2], 0, []),  # the reference checks the budget after every entry: an unusable first one ends the walk
        (["a", 2], 0, []),
        ([2, 3], 0, [2]),  # quirk: zero-budget-keeps-one - a usable first entry is kept with a budget of 0
        ([99, 2, 1], 2, [2, 1]),  # with a budget above 0 unusable entries are only skipped
        ([True, 2.0, "3", 3], 2, [1, 3]),
    ],
)
def test_ranking_walk_checks_the_budget_after_every_entry(indices, budget, expected):
    assert _pick({"selected_indices": indices}, 4, budget) == expected


class _Ranker:
    def __init__(self, data):
        self.data = data

    async def chat_json(self, req, schema, name="reply"):
        return JsonResult(self.data, "{}")


def test_ranking_with_budget_zero_and_an_invalid_first_index_selects_nothing():
    items = [{"op": "append", "content": f"c{i}"} for i in range(4)]
    out = asyncio.run(
        rank_and_select(
            _Ranker({"selected_indices": [7, 1]}),
            skill="# S\n",
            merged={"reasoning": "r", "edits": items},
            budget=0,
            mode="patch",
            meta_skill="",
            key="k",
        )
    )
    assert out.ranked and out.selected["edits"] == []
    assert out.selected["reasoning"] == "r [fallback truncated 4->0 edits]"


@pytest.mark.parametrize(
    "code",
    [
        "    open(OUTPUT_PATH, 'w').write(open(INPUT_PATH).read() + '!')",
        "\topen(OUTPUT_PATH, 'w').write(open(INPUT_PATH).read() + '!')",
        "  import os\n  data = open(INPUT_PATH).read()\n  open(OUTPUT_PATH, 'w').write(data + '!')\n",
        "    INPUT_PATH = 'elsewhere.xlsx'\n    open(OUTPUT_PATH, 'w').write(open(INPUT_PATH).read() + '!')",
    ],
    ids=["spaces", "tab", "block", "own-path"],
)
def test_an_indented_script_runs_as_in_the_reference(tmp_path: Path, code):
    (tmp_path / "in.txt").write_text("data")
    env = {**os.environ, "INPUT_PATH": str(tmp_path / "in.txt"), "OUTPUT_PATH": str(tmp_path / "out.txt")}
    p = subprocess.run([sys.executable, "-c", prepare_script(code)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out.txt").read_text() == "data!"


def test_a_script_indented_unevenly_still_fails_as_in_the_reference():
    with pytest.raises(IndentationError):
        compile(prepare_script("    x = 1\ny = 2\n    z = 3\n"), "main.py", "exec")


MODEL_TEXT = "# Skill\n\n\n\n## Rules\n- one\n\n\n- two\n"


@pytest.mark.parametrize("mode", ["full_rewrite_minibatch", "rewrite_from_suggestions"])
def test_a_rewrite_with_no_protected_block_keeps_the_models_blank_lines(mode):
    class _Rewriter:
        async def chat_json(self, req, schema, name="reply"):
            return JsonResult({"new_skill": MODEL_TEXT + "\n\n", "change_summary": ["x"]}, "{}")

    items = (
        [{"new_skill": MODEL_TEXT + "\n\n", "change_summary": ["x"]}]
        if mode == "full_rewrite_minibatch"
        else [{"title": "t", "instruction": "i"}]
    )
    out = asyncio.run(
        update(_Rewriter(), "# Old\n\n\nbody\n", items, mode=mode, step_buffer="", protect_regions=True, key="k")
    )
    assert out.candidate == MODEL_TEXT  # the reference's rstrip + newline, nothing else


def test_a_rewrite_keeps_a_protected_block_of_the_original():
    original = f"# Old\n\n{APPENDIX_START}\n{APPENDIX_HEADING}\n- note\n{APPENDIX_END}\n"
    item = {"new_skill": MODEL_TEXT, "change_summary": []}
    out = asyncio.run(
        update(None, original, [item], mode="full_rewrite_minibatch", step_buffer="", protect_regions=True, key="k")
    )
    assert out.candidate.endswith(f"{APPENDIX_START}\n{APPENDIX_HEADING}\n- note\n{APPENDIX_END}\n")
    assert out.candidate.startswith("# Skill\n\n## Rules")  # around a block, runs of blank lines are collapsed
