"""SpreadsheetBench episodes with the reference's protocol: a scripted target over real HTTP writes scripts that
run in the sandbox; what the target and the analyst see is checked against the reference's layout."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shutil
from pathlib import Path

import openpyxl
import pytest
from conftest import SHARED, need_shared_data
from scripted_server import ScriptedServer
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.spreadsheetbench.benchmark import SpreadsheetBenchmark, extract_code
from skillopt_envs.spreadsheetbench.samples import FORMULA_SOLUTIONS, SOLUTIONS, template_of

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway, LLMHandle
from skillopt_ray.stages.rollout import summarize

pytestmark = pytest.mark.usefixtures("needs_bwrap")  # skips locally, fails under CI=true
SHEETS = SHARED / "spreadsheetbench"
VERIFY = "[POST-EXECUTION VERIFICATION]"

# Hand-written correct scripts for three real tasks (each must pass all three test cases).
REAL_SOLUTIONS = {
    "37609": """import os, openpyxl
wb = openpyxl.load_workbook(os.environ['INPUT_PATH']); ws = wb.active
def high(v): return isinstance(v, (int, float)) and v >= 7
for r in range(2, 12):
    ws.cell(r, 3, 'e' if high(ws.cell(r, 1).value) or high(ws.cell(r, 2).value) else '-')
wb.save(os.environ['OUTPUT_PATH'])
""",
    "39604": """import openpyxl
wb = openpyxl.load_workbook(INPUT_PATH); ws = wb.active
cached = openpyxl.load_workbook(INPUT_PATH, data_only=True).active
b3, b4 = cached['B3'].value, cached['B4'].value
ws['C4'] = 0 if b4 <= 20 else (b4 - 20 if b3 * 1000 < 22000 else b4 - 30)
wb.save(OUTPUT_PATH)
""",
    "17251": """import os, openpyxl
wb = openpyxl.load_workbook(os.environ['INPUT_PATH']); ws = wb.active
rows = [(ws.cell(r, 1).value, ws.cell(r, 2).value) for r in range(2, 12)]
for i, (part, price) in enumerate(rows, start=2):
    ws.cell(i, 3, 1 + sum(1 for p, q in rows if p == part and q < price))
wb.save(os.environ['OUTPUT_PATH'])
""",
}
COPY = "import shutil\nshutil.copy(INPUT_PATH, OUTPUT_PATH)\n"


def fenced(code: str) -> str:
    return f"Here is the script.\n```python\n{code}```\nDone."


def _gateway(url: str) -> Gateway:
    role = LLMRoleConfig(
        provider="openai", model="scripted", base_url=url, structured_output="none", max_concurrency=16
    )
    return Gateway(LLMConfig(backend="compatible", target=role, optimizer=role), None)


def play(bench, tasks, replies, training: bool, max_turns: int = 3, skill: str = "# skill"):
    """replies(task_id, turn, messages) -> reply text, served over HTTP by the scripted server."""
    bodies: list[dict] = []

    def policy(body, headers):
        bodies.append(body)
        m = re.search(r"/([^/]+)/t(\d+)$", headers.get("x-skillopt-key", ""))
        return replies(m.group(1), int(m.group(2)), body["messages"])

    srv = ScriptedServer(policy=policy)
    srv.start()
    try:
        gw = _gateway(srv.base_url)

        async def go():
            llm = LLMHandle(gw)
            ctx = EpisodeContext("test", training, max_turns, 0)
            out = await asyncio.gather(*(bench.run_episode(t, skill, llm, ctx) for t in tasks))
            await gw.close()
            return out

        results = asyncio.run(go())
    finally:
        srv.stop()
    play.bodies = bodies
    return results


def roles(r) -> list[str]:
    return [m["role"] for m in r.trajectory]


@pytest.fixture(scope="module")
def real_bench():
    need_shared_data(SHEETS / "dataset.json", "SpreadsheetBench")
    return SpreadsheetBenchmark({"data_dir": str(SHEETS), "options": {"wall_s": 60}})


@pytest.fixture(scope="module")
def sample_bench(tmp_path_factory):
    return SpreadsheetBenchmark({"options": {"sample_dir": str(tmp_path_factory.mktemp("sheets") / "samples")}})


def real_task(bench, tid):
    return next(t for t in bench.load_split("all") if t.task_id == tid)


def test_correct_scripts_score_one_and_the_conversation_is_the_references(real_bench):
    tasks = [real_task(real_bench, tid) for tid in REAL_SOLUTIONS]
    results = play(
        real_bench,
        tasks,
        lambda tid, turn, msgs: fenced(REAL_SOLUTIONS[tid]),
        training=False,
        skill="RULE-X: be careful",
    )
    assert [(r.hard, r.soft, r.n_turns, r.fail_reason) for r in results] == [(1.0, 1.0, 1, "")] * 3, [
        r.trajectory[-1] for r in results
    ]
    r, t = results[0], tasks[0]
    assert r.task_type == "cell_level" and r.task_description == t.payload["instruction"]
    assert roles(r) == ["assistant", "system"] and r.trajectory[0]["content"] == fenced(
        REAL_SOLUTIONS["37609"]
    )  # reply untruncated
    report = r.trajectory[-1]["content"]
    assert report.startswith(VERIFY + "\n## Eval Result (case 1): PASS\n## Output Verification\n")
    assert report.count("## Eval Result (case ") == 3 and "\n\n---\n\n## Eval Result (case 2): PASS" in report
    assert "  Sheet2!C2: got='e', expected='e' ✓" in report
    # what the target was sent, and what the analyst will be shown
    system, user = next(
        b["messages"][:2] for b in play.bodies if t.payload["instruction"] in b["messages"][1]["content"]
    )
    assert system["content"] == r.info["target_system_prompt"] and user["content"] == r.info["target_user_prompt"]
    assert system["content"].endswith("\n\n## Skill\nRULE-X: be careful")
    u = user["content"]
    assert u.startswith(
        "# Instruction\n" + t.payload["instruction"] + "\nInstruction type: Cell-Level Manipulation\n"
        "Expected answer position: C2:C11\n\n# Input spreadsheet preview\n## Sheet: "
    )
    assert (
        r.info["spreadsheet_preview"] in u
        and "\n# Task\n" in u
        and u.index("# Input spreadsheet preview") < u.index("# Task")
    )
    b = play.bodies[0]
    assert (
        b.get("max_completion_tokens") or b.get("max_tokens")
    ) == 16384  # a completion budget that does not cut scripts


def test_an_error_is_fed_back_and_the_fixed_script_wins(real_bench):
    task = real_task(real_bench, "37609")

    def replies(tid, turn, msgs):
        return (
            fenced("import os\nraise KeyError('no column U' + 'x' * 5000)\n")
            if turn == 0
            else fenced(REAL_SOLUTIONS[tid])
        )

    (r,) = play(real_bench, [task], replies, training=False)
    assert r.hard == 1.0 and r.n_turns == 2 and roles(r) == ["assistant", "user", "assistant", "system"]
    feedback = r.trajectory[1]["content"]
    assert "KeyError: 'no column U" in feedback and "main.py" in feedback and "runpy" not in feedback
    body = feedback.split("```\n", 1)[1].split("\n```", 1)[0]
    assert len(body) == 3000  # the first 3000 characters of the error text, in a plain fence
    assert play.bodies[1]["messages"][2:] == [
        {"role": "assistant", "content": r.trajectory[0]["content"]},
        {"role": "user", "content": feedback},
    ]


def test_training_feedback_names_wrong_cells_with_produced_values_only(real_bench):
    task = real_task(real_bench, "37609")
    wrong = REAL_SOLUTIONS["37609"].replace("v >= 7", "v >= 6")
    (r,) = play(real_bench, [task], lambda *a: fenced(wrong), training=True, max_turns=2)
    assert r.hard == 0.0 and r.n_turns == 2 and roles(r) == ["assistant", "user", "assistant", "user", "system"]
    feedback = r.trajectory[1]["content"]
    lines = feedback.splitlines()
    wrong_lines = [line for line in lines if line.endswith("(WRONG)")]
    assert "  Sheet2!C2: your output = 'e' (WRONG)" in wrong_lines
    assert all("'-'" not in line for line in lines)  # the expected '-' is never revealed
    assert re.search(r"^  \((\d+) other cells are correct\.\)$", feedback, re.M)
    assert r.fail_reason.startswith("eval-mismatch: value@Sheet2!C2: gt='-' pred='e'")
    # evaluation rollouts end at the first script that runs, right or wrong
    (r,) = play(real_bench, [task], lambda *a: fenced(wrong), training=False, max_turns=3)
    assert r.n_turns == 1 and r.hard == 0.0 and roles(r) == ["assistant", "system"]
    assert (
        "## Eval Result (case 1): FAIL\nvalue@Sheet2!C2: gt='-' pred='e'\n## Output Verification"
        in r.trajectory[-1]["content"]
    )
    assert "  Sheet2!C2: got='e', expected='-' ✗" in r.trajectory[-1]["content"]


def test_turns_run_case_one_only_and_the_last_script_is_scored_on_every_case(real_bench):
    """A script that fails on any input but case 1's passes every turn check, but fails cases 2 and 3 when the
    final script is scored on them."""
    task = real_task(real_bench, "37609")
    grid = [[c.value for c in openpyxl.load_workbook(i).active["A2:B11"] for c in c] for i, _ in task.payload["cases"]]
    k = next(k for k in range(20) if grid[0][k] != grid[1][k] and grid[0][k] != grid[2][k])
    cell = ["A", "B"][k % 2] + str(2 + k // 2)
    picky = (
        f"import openpyxl\nif openpyxl.load_workbook(INPUT_PATH).active[{cell!r}].value != {grid[0][k]!r}:\n"
        "    raise ValueError('not the first case')\n"
    ) + REAL_SOLUTIONS["37609"]
    (r,) = play(real_bench, [task], lambda *a: fenced(picky), training=True, max_turns=3)
    assert r.n_turns == 1 and r.soft == pytest.approx(1 / 3) and r.hard == 0.0
    assert r.fail_reason == "exec-error: ValueError: not the first case"
    assert "## Execution (case 2)\nERROR: " in r.trajectory[-1]["content"]


def test_case_one_is_scored_from_the_last_written_prediction(real_bench):
    """quirk: case1-last-written - turn 1 saves a right workbook and then crashes; turn 2 crashes before
    saving. The last script fails everywhere, yet case 1 passes from turn 1's file."""
    task = real_task(real_bench, "37609")

    def replies(tid, turn, msgs):
        if turn == 0:
            return fenced(REAL_SOLUTIONS["37609"] + "raise RuntimeError('after saving')\n")
        return fenced("raise RuntimeError('before saving')\n")

    (r,) = play(real_bench, [task], replies, training=True, max_turns=2)
    assert r.n_turns == 2 and r.soft == pytest.approx(1 / 3)
    assert r.fail_reason == "exec-error: RuntimeError: before saving"
    report = r.trajectory[-1]["content"]
    assert "## Eval Result (case 1): PASS" in report and "## Execution (case 3)" in report


def test_code_extraction_follows_the_reference():
    assert extract_code("sketch:\n```python\nx = 1\n```\nfinal:\n```python\nx = 2\n```") == "x = 1\n"  # the first fence
    assert extract_code("x = 3\nprint(x)\n") == "x = 3\nprint(x)"  # no fence: the whole reply
    assert extract_code("```python\nx = 4\n") == "```python\nx = 4"  # unterminated: the whole reply
    assert extract_code("```python\n```") == "" and extract_code("") == ""


def test_a_reply_without_a_fence_runs_as_code_and_an_empty_block_gets_asked_again(sample_bench):
    task = sample_bench.load_split("val")[0]
    bare = SOLUTIONS[template_of(task.task_id)]
    (r,) = play(sample_bench, [task], lambda tid, turn, msgs: "```python\n```" if turn == 0 else bare, training=False)
    assert r.hard == 1.0 and r.n_turns == 2
    assert "python" in r.trajectory[1]["content"] and "Traceback" not in r.trajectory[1]["content"]
    (r,) = play(sample_bench, [task], lambda *a: "```python\n```", training=False, max_turns=2)
    assert r.fail_reason == "empty-code-block" and r.hard == 0.0 and r.n_turns == 2 and VERIFY not in str(r.trajectory)


def test_a_script_that_saves_nothing_is_an_error_fed_back(sample_bench):
    task = sample_bench.load_split("val")[0]
    (r,) = play(sample_bench, [task], lambda *a: fenced("print('x' * 2_000_000)\n"), training=False, max_turns=1)
    assert r.fail_reason == "output-not-found" and "## Execution (case 1)" in r.trajectory[-1]["content"]


def test_sample_tasks_are_solved_by_their_reference_scripts(sample_bench):
    tasks = sample_bench.load_split("valid_seen")
    assert tasks == sample_bench.load_split("val") == sample_bench.load_split("selection")
    assert len(tasks) == 8 and {t.task_type for t in tasks} == {"cell_level", "sheet_level"}
    results = play(sample_bench, tasks, lambda tid, turn, msgs: fenced(SOLUTIONS[template_of(tid)]), training=False)
    assert all(r.hard == 1.0 for r in results), [(r.task_id, r.trajectory[-1]) for r in results if not r.hard]
    assert "built-in sample tasks" in sample_bench.data_note()


def test_formulas_a_script_writes_score_only_with_recalculation(tmp_path):
    """Off (the paper protocol, the official rule): a formula written by openpyxl has no cached value and reads as
    empty, so the cell is wrong. On: the `formulas` engine computes it and the task passes."""
    sample_dir = str(tmp_path / "samples")
    tasks = {t.task_id: t for t in SpreadsheetBenchmark({"options": {"sample_dir": sample_dir}}).load_split("val")}
    chosen = [tasks["sample-count-val0"], tasks["sample-days-val0"]]
    reply = lambda tid, turn, msgs: fenced(FORMULA_SOLUTIONS[template_of(tid)])  # noqa: E731
    off = play(SpreadsheetBenchmark({"options": {"sample_dir": sample_dir}}), chosen, reply, training=False)
    assert [(r.hard, r.n_turns) for r in off] == [(0.0, 1), (0.0, 1)]
    assert off[0].fail_reason.startswith("eval-mismatch: value@Sheet1!E2: gt=") and off[0].fail_reason.endswith(
        "pred=None"
    )
    on_bench = SpreadsheetBenchmark({"options": {"sample_dir": sample_dir, "recalculate": True}})
    assert [r.hard for r in play(on_bench, chosen, reply, training=False)] == [1.0, 1.0]
    assert "formulas recalculated" in on_bench.data_note()


def _book(path: Path, sheets: dict[str, dict[str, object]]) -> None:
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, cells in sheets.items():
        ws = wb.create_sheet(name)
        for ref, v in cells.items():
            ws[ref] = v
    wb.save(path)


def _dataset(root: Path, rows: list[dict], books: dict[str, list[tuple[dict, dict]]]) -> None:
    for tid, cases in books.items():
        folder = root / "spreadsheet" / tid
        folder.mkdir(parents=True, exist_ok=True)
        for k, (inp, ans) in enumerate(cases, start=1):
            _book(folder / f"{k}_{tid}_input.xlsx", inp)
            _book(folder / f"{k}_{tid}_answer.xlsx", ans)
    (root / "dataset.json").write_text(json.dumps(rows))


def test_answer_sheet_is_honoured_and_prefixes_only_the_first_range(tmp_path):
    inp = {"Data": {"A1": 2, "A2": 3}, "Result": {"A1": "sum"}}
    ans = {"Data": {"A1": 2, "A2": 3, "C2": "done"}, "Result": {"A1": "sum", "B2": 5}}
    rows = [
        {
            "id": "as1",
            "instruction": "Put the sum of Data!A1:A2 in Result!B2 and 'done' in C2 of the first sheet.",
            "instruction_type": "Cell-Level Manipulation",
            "answer_position": "B2,C2",
            "answer_sheet": "Result",
        }
    ]
    _dataset(tmp_path, rows, {"as1": [(inp, ans)]})
    bench = SpreadsheetBenchmark({"data_dir": str(tmp_path)})
    (task,) = bench.load_split("all")
    right = (
        "import openpyxl\nwb = openpyxl.load_workbook(INPUT_PATH)\nwb['Result']['B2'] = 5\nwb['Data']['C2'] = 'done'\n"
        "wb.save(OUTPUT_PATH)\n"
    )
    on_result = right.replace("wb['Data']['C2']", "wb['Result']['C2']")
    (r,) = play(bench, [task], lambda *a: fenced(right), training=False)
    assert r.hard == 1.0 and "Expected answer position: Result!B2,C2\n" in r.info["target_user_prompt"]
    assert (
        "  Result!B2: got=5, expected=5 ✓" in r.trajectory[-1]["content"]
        and "  Data!C2: got='done'" in r.trajectory[-1]["content"]
    )
    (r,) = play(bench, [task], lambda *a: fenced(on_result), training=False)
    # quirk: answer-sheet-first-range
    assert r.hard == 0.0 and r.fail_reason == "eval-mismatch: value@Data!C2: gt='done' pred=None"


def test_durations_written_by_a_script_score_like_the_official_rule(tmp_path):
    """Issue 17: expected cells holding durations (openpyxl reads them as timedelta) must match a script that writes
    the same durations; a different duration, or the duration as a plain number of days, must not."""
    spans = [dt.timedelta(hours=1, minutes=30), dt.timedelta(days=1, hours=3), dt.timedelta(minutes=45, seconds=15)]
    starts = [dt.datetime(2024, 3, 1, 8, 0), dt.datetime(2024, 3, 2, 6, 0), dt.datetime(2024, 3, 3, 12, 0)]
    inp = {
        "Log": {
            "A1": "start",
            "B1": "end",
            "C1": "duration",
            **{f"A{i}": s for i, s in enumerate(starts, 2)},
            **{f"B{i}": s + d for i, (s, d) in enumerate(zip(starts, spans), 2)},
        }
    }
    ans = {"Log": {**inp["Log"], **{f"C{i}": d for i, d in enumerate(spans, 2)}}}
    rows = [
        {
            "id": "dur",
            "instruction": "Fill C2:C4 with the duration end - start.",
            "instruction_type": "Cell-Level Manipulation",
            "answer_position": "Log!C2:C4",
        }
    ]
    _dataset(tmp_path, rows, {"dur": [(inp, ans)]})
    assert isinstance(
        openpyxl.load_workbook(tmp_path / "spreadsheet/dur/1_dur_answer.xlsx", data_only=True)["Log"]["C3"].value,
        dt.timedelta,
    )
    bench = SpreadsheetBenchmark({"data_dir": str(tmp_path)})
    (task,) = bench.load_split("all")
    script = (
        "import openpyxl\nwb = openpyxl.load_workbook(INPUT_PATH); ws = wb['Log']\n"
        "for r in range(2, ws.max_row + 1):\n    ws.cell(r, 3, ws.cell(r, 2).value - ws.cell(r, 1).value)\nwb.save(OUTPUT_PATH)\n"
    )
    (r,) = play(bench, [task], lambda *a: fenced(script), training=False)
    assert r.hard == 1.0, r.trajectory[-1]
    assert (
        "got=datetime.timedelta(days=1, seconds=10800), expected=datetime.timedelta(days=1, seconds=10800) ✓"
        in r.trajectory[-1]["content"]
    )
    off_by_a_second = script.replace(
        "- ws.cell(r, 1).value)", "- ws.cell(r, 1).value + __import__('datetime').timedelta(seconds=1))"
    )
    as_days = script.replace(
        "ws.cell(r, 2).value - ws.cell(r, 1).value",
        "(ws.cell(r, 2).value - ws.cell(r, 1).value).total_seconds() / 86400",
    )
    for wrong in (off_by_a_second, as_days):
        (r,) = play(bench, [task], lambda *a, wrong=wrong: fenced(wrong), training=False)
        assert r.hard == 0.0 and r.fail_reason.startswith("eval-mismatch: value@Log!C2"), r.fail_reason


def test_broken_tasks_are_per_task_errors_and_the_rest_still_run(tmp_path):
    need_shared_data(SHEETS / "dataset.json", "SpreadsheetBench")
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
    for tid, words in (("corrupt", "data:"), ("39604", "NoSuchSheet"), ("absent", "no-test-cases")):
        assert by_id[tid].fail_reason == "data_error" and words in by_id[tid].error and not by_id[tid].infra_error, (
            by_id[tid]
        )
    stats = summarize(results)
    assert stats.data_errors == 3 and stats.infra_errors == 0
    note = bench.data_note()
    assert "stable 20/10/70 hash split" in note and "3 of the 4 tasks in the splits are defective" in note


def test_empty_dataset_and_bad_options_are_clear_errors(tmp_path):
    (tmp_path / "dataset.json").write_text("[]")
    with pytest.raises(DataError, match="holds no tasks"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path)}).load_split("all")
    with pytest.raises(DataError, match="dataset.json not found"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match="unknown env.options key"):
        SpreadsheetBenchmark({"data_dir": str(tmp_path), "options": {"sandbx": "none"}})
