"""SpreadsheetBench episodes: the target (scripted server over real HTTP) writes scripts that run in the sandbox."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from envs.base import DataError, EpisodeContext
from envs.spreadsheetbench.benchmark import SpreadsheetBenchmark, extract_code
from envs.spreadsheetbench.samples import SOLUTIONS, template_of
from skillopt_ray.llm.gateway import LLMHandle
from skillopt_ray.stages.rollout import summarize
from skillopt_ray.testing.scripted_server import ScriptedServer

from conftest import SHARED, need_shared_data
from test_alfworld import _gateway

pytestmark = pytest.mark.usefixtures("needs_bwrap")
SHEETS = SHARED / "spreadsheetbench"

# Hand-written correct scripts for three real tasks (each must pass all three test cases).
REAL_SOLUTIONS = {
    "37609": """import os, openpyxl
wb = openpyxl.load_workbook(os.environ['INPUT_PATH']); ws = wb.active
def high(v): return isinstance(v, (int, float)) and v >= 7
for r in range(2, 12):
    ws.cell(r, 3, 'e' if high(ws.cell(r, 1).value) or high(ws.cell(r, 2).value) else '-')
wb.save(os.environ['OUTPUT_PATH'])
""",
    "39604": """import os, openpyxl
wb = openpyxl.load_workbook(os.environ['INPUT_PATH']); ws = wb.active
ws['C4'] = '=IF(B4<=20,0,IF((B3*1000)<22000,B4-20,B4-30))'
wb.save(os.environ['OUTPUT_PATH'])
""",
    "17251": """import os, openpyxl
wb = openpyxl.load_workbook(os.environ['INPUT_PATH']); ws = wb.active
rows = [(ws.cell(r, 1).value, ws.cell(r, 2).value) for r in range(2, 12)]
for i, (part, price) in enumerate(rows, start=2):
    ws.cell(i, 3, 1 + sum(1 for p, q in rows if p == part and q < price))
wb.save(os.environ['OUTPUT_PATH'])
""",
}


def fenced(code: str) -> str:
    return f"Here is the script.\n```python\n{code}```"


def play(bench, tasks, replies, training: bool, max_turns: int = 3):
    """replies(task_id, turn, messages) -> reply text, served over HTTP by the scripted server."""

    def policy(body, headers):
        m = re.search(r"/([^/]+)/t(\d+)$", headers.get("x-skillopt-key", ""))
        return replies(m.group(1), int(m.group(2)), body["messages"])

    srv = ScriptedServer(policy=policy)
    srv.start()
    try:
        gw = _gateway(srv.base_url)

        async def go():
            llm = LLMHandle(gw)
            ctx = EpisodeContext("test", training, max_turns, 0)
            out = await asyncio.gather(*(bench.run_episode(t, "# skill", llm, ctx) for t in tasks))
            await gw.close()
            return out

        return asyncio.run(go())
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def real_bench():
    need_shared_data(SHEETS / "dataset.json", "SpreadsheetBench")
    return SpreadsheetBenchmark({"data_dir": str(SHEETS), "options": {"wall_s": 60}})


@pytest.fixture(scope="module")
def sample_bench(tmp_path_factory):
    return SpreadsheetBenchmark({"options": {"sample_dir": str(tmp_path_factory.mktemp("sheets") / "samples")}})


def test_correct_scripts_score_one_on_real_tasks(real_bench):
    tasks = [t for t in real_bench.load_split("all") if t.task_id in REAL_SOLUTIONS]
    results = play(real_bench, tasks, lambda tid, turn, msgs: fenced(REAL_SOLUTIONS[tid]), training=False)
    assert [(r.hard, r.soft, r.n_turns) for r in results] == [(1.0, 1.0, 1)] * 3, [r.trajectory[-1] for r in results]


def test_a_bug_gets_its_error_back_and_is_fixed_next_turn(real_bench):
    task = next(t for t in real_bench.load_split("all") if t.task_id == "37609")
    seen: list[str] = []

    def replies(tid, turn, msgs):
        seen.append(msgs[-1]["content"])
        return fenced("import os\nraise KeyError('no column U')\n") if turn == 0 else fenced(REAL_SOLUTIONS[tid])

    (r,) = play(real_bench, [task], replies, training=False)
    assert r.hard == 1.0 and r.n_turns == 2
    assert "KeyError: 'no column U'" in seen[1] and "main.py" in seen[1] and "runpy" not in seen[1]


def test_training_feedback_shows_produced_values_never_expected_ones(real_bench):
    task = next(t for t in real_bench.load_split("all") if t.task_id == "37609")
    wrong = REAL_SOLUTIONS["37609"].replace("v >= 7", "v >= 6")
    seen: list[str] = []

    def replies(tid, turn, msgs):
        seen.append(msgs[-1]["content"])
        return fenced(wrong)

    (r,) = play(real_bench, [task], replies, training=True, max_turns=2)
    assert r.hard == 0.0 and r.n_turns == 2 and r.fail_reason == "wrong_values"
    feedback = seen[1]
    assert "Sheet2!C2 is wrong; your script produced 'e'" in feedback
    assert "'-'" not in feedback.split("your script produced", 1)[0]  # the expected '-' is not revealed
    (r,) = play(real_bench, [task], lambda *a: fenced(wrong), training=False, max_turns=3)
    assert r.n_turns == 1 and r.hard == 0.0  # evaluation ends at the first script that runs


def test_sample_tasks_are_solved_by_their_reference_scripts(sample_bench):
    tasks = sample_bench.load_split("val")
    assert len(tasks) == 8 and {t.task_type for t in tasks} == {"cell", "sheet"}
    results = play(sample_bench, tasks, lambda tid, turn, msgs: fenced(SOLUTIONS[template_of(tid)]), training=False)
    assert all(r.hard == 1.0 for r in results), [(r.task_id, r.trajectory[-1]) for r in results if not r.hard]
    assert "built-in sample tasks" in sample_bench.data_note()


def test_replies_without_code_and_scripts_without_output_are_reported(sample_bench):
    task = sample_bench.load_split("val")[0]
    (r,) = play(sample_bench, [task], lambda *a: "I cannot write code.", training=False, max_turns=2)
    assert r.hard == 0.0 and r.fail_reason == "no_code" and r.n_turns == 2
    (r,) = play(sample_bench, [task], lambda *a: fenced("print('x' * 2_000_000)\n"), training=False, max_turns=1)
    assert r.fail_reason == "no_output" and "wrote nothing to OUTPUT_PATH" in r.trajectory[-1]["error"]


def test_broken_tasks_are_per_task_errors_and_the_rest_still_run(tmp_path):
    root = tmp_path / "bench"
    shutil.copytree(SHEETS / "spreadsheet" / "37609", root / "spreadsheet" / "37609")
    shutil.copytree(SHEETS / "spreadsheet" / "39604", root / "spreadsheet" / "39604")
    rows = json.loads((SHEETS / "dataset.json").read_text())
    keep = [dict(r) for r in rows if str(r["id"]) in ("37609", "39604")]
    corrupt = dict(keep[0], id="corrupt", spreadsheet_path="spreadsheet/corrupt")
    (root / "spreadsheet" / "corrupt").mkdir()
    for k in (1, 2, 3):
        (root / "spreadsheet" / "corrupt" / f"{k}_corrupt_input.xlsx").write_bytes(b"not a zip file")
        (root / "spreadsheet" / "corrupt" / f"{k}_corrupt_answer.xlsx").write_bytes(b"not a zip file")
    missing_sheet = dict(keep[1], id="39604", answer_position="'NoSuchSheet'!C4")
    absent = dict(keep[0], id="absent", spreadsheet_path="spreadsheet/absent")
    (root / "dataset.json").write_text(json.dumps([keep[0], corrupt, missing_sheet, absent]))
    bench = SpreadsheetBenchmark({"data_dir": str(root)})
    tasks = bench.load_split("all")
    results = play(bench, tasks, lambda tid, turn, msgs: fenced(REAL_SOLUTIONS.get(tid, "pass\n")), training=False)
    by_id = {r.task_id: r for r in results}
    assert by_id["37609"].hard == 1.0
    for tid, words in (("corrupt", "data:"), ("39604", "NoSuchSheet"), ("absent", "no input/answer workbooks")):
        assert by_id[tid].fail_reason == "data_error" and words in by_id[tid].error and not by_id[tid].infra_error, by_id[tid]
    stats = summarize(results)
    assert stats.data_errors == 3 and stats.infra_errors == 0


def test_empty_dataset_and_bad_options_are_clear_errors(tmp_path):
    (tmp_path / "dataset.json").write_text("[]")
    with pytest.raises(DataError, match="holds no tasks"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path)}).load_split("all")
    with pytest.raises(DataError, match="dataset.json not found"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match="unknown env.options key"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path), "options": {"sandbx": "none"}})


def test_code_extraction_takes_the_last_python_block():
    assert extract_code("sketch:\n```python\nx = 1\n```\nfinal:\n```python\nx = 2\n```") == "x = 2\n"
    assert extract_code("no code") is None
