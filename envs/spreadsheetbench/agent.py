"""SpreadsheetBench in an agent harness (the reference's single mode): one agent run per task in a workspace
holding the first case's `input.xlsx` and `run_solution.py`; the agent writes `solution.py`, which is then run on
every case in the benchmark's own sandbox and scored as a chat target's final script is."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from skillopt_envs.base import AgentRunner, AgentTask, EpisodeBase, EpisodeContext, EpisodeResult, Task
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.spreadsheetbench.prompts import extract_code

DESCRIPTION = "Write solution.py that carries out the spreadsheet task in task.md on input.xlsx"
PREAMBLE = (
    "Use this skill for the current spreadsheet task.\n"
    "Write solution.py in the workspace, run it with `python run_solution.py`, and check the output workbook."
)
PROMPT = (
    "Use the `skillopt-target` skill in this workspace.\n"
    "Read task.md, inspect input.xlsx, and write solution.py that performs the task; test it with `python run_solution.py`.\n"
    "When solution.py works, reply with a short note that it is done."
)
# runs the agent's solution.py the way the benchmark will: INPUT_PATH and OUTPUT_PATH set, as variables too
RUN_SOLUTION = """import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
inp = os.environ.setdefault("INPUT_PATH", os.path.join(here, "input.xlsx"))
out = os.environ.setdefault("OUTPUT_PATH", os.path.join(here, "output.xlsx"))
if not os.path.exists(os.path.join(here, "solution.py")):
    sys.exit("solution.py does not exist yet")
runpy.run_path(os.path.join(here, "solution.py"), init_globals={"INPUT_PATH": inp, "OUTPUT_PATH": out}, run_name="__main__")
print("solution.py ran; output written to", out if os.path.exists(out) else "(nothing: OUTPUT_PATH was not saved)")
"""
DELIVERABLE = (
    "\n\n# Deliverable\nWrite the script to `solution.py` in this workspace. It reads the workbook at INPUT_PATH and "
    "saves the result to OUTPUT_PATH (both are defined when it runs). `python run_solution.py` runs it on "
    "`input.xlsx` and writes `output.xlsx` so you can check it; your script will also be run on other inputs."
)
TIMEOUT_S = 600.0  # the benchmark's whole-task deadline


async def agent_episode(
    bench: Any, task: Task, skill: str, agent: AgentRunner, ctx: EpisodeContext, user: str,
    info: dict[str, Any], base: EpisodeBase, areas: Any, expected: Any,
) -> EpisodeResult:  # fmt: skip
    """One agent run writes solution.py (else the reply's code block), then every case is scored with it."""
    p = task.payload
    at = AgentTask(
        skill, DESCRIPTION, PREAMBLE, user + DELIVERABLE, PROMPT, TIMEOUT_S, files={"input.xlsx": p["cases"][0][0]},
        allow_file_edits=True, task_id=task.task_id, extra_files={"run_solution.py": RUN_SOLUTION},
        collect=("solution.py",),
    )  # fmt: skip
    out = await agent.run(at, f"{ctx.key}/{task.task_id}")
    info = {**info, "target_system_prompt": out.skill_md, "target_user_prompt": at.task_md}
    if not out.ok:
        return EpisodeResult(
            task.task_id, task.task_type, fail_reason="infra_error", infra_error=True, error_kind=out.error_kind,
            error=out.error, n_turns=1, info=info, **base,
        )  # fmt: skip
    info.update(out.info)
    blocks = [b for b in info.get("analyst_blocks", []) if b[0] != "Spreadsheet Preview"]
    info["analyst_blocks"] = [["Spreadsheet Preview", info.get("spreadsheet_preview", "")], *blocks]
    solution = out.files.get("solution.py")
    code = solution.decode("utf-8", "replace") if solution is not None else extract_code(out.reply)
    trajectory: list[JSONObject] = [{"type": "message", "turn": 1, "content": out.reply}]
    if not code.strip():
        return EpisodeResult(
            task.task_id, task.task_type, fail_reason="empty-code-block", n_turns=1, trajectory=trajectory,
            info={**info, "n_cases": len(p["cases"]), "n_pass": 0}, **base,
        )  # fmt: skip
    return await _scored(bench, task, code, trajectory, info, base, areas, expected, solution is not None)


async def _scored(
    bench: Any, task: Task, code: str, trajectory: list[JSONObject], info: dict[str, Any],
    base: EpisodeBase, areas: Any, expected: Any, from_file: bool,
) -> EpisodeResult:  # fmt: skip
    """The script run on every case in the benchmark's sandbox: hard = all passed, soft = the share passed."""
    cases = task.payload["cases"]
    scratch = Path(tempfile.mkdtemp(prefix="skillopt-sheet-"))
    try:
        n_pass, reason, report = await asyncio.to_thread(bench._score_all, code, None, cases, areas, expected, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n = len(cases)
    hard = 1.0 if n and n_pass == n else 0.0
    trajectory.append({"role": "system", "content": report})
    info.update(n_cases=n, n_pass=n_pass, solution_file=from_file)
    return EpisodeResult(
        task.task_id, task.task_type, hard=hard, soft=n_pass / n if n else 0.0, fail_reason="" if hard else reason,
        n_turns=1, trajectory=trajectory, info=info, **base,
    )  # fmt: skip
