"""What the SpreadsheetBench target reads: system prompt, user message, workbook preview, feedback
messages and the seed skill. The layout follows the reference's; the wording is this project's."""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = """You are a skilled Python programmer who automates spreadsheet work.
You receive a task instruction and a preview of the input workbook. Answer with a single self-contained Python script that opens the workbook at INPUT_PATH, carries out the requested change, and saves the resulting workbook to OUTPUT_PATH.
Rules for the script:
- INPUT_PATH and OUTPUT_PATH are already defined as variables when your script starts (they are also in the environment); use them and never write file paths of your own.
- Use only the Python standard library, openpyxl and pandas.
- Print nothing and never call input().
Your whole reply must be one ```python code block and nothing else."""

TASK_PARAGRAPH = (
    "Write a Python script that loads the workbook at INPUT_PATH, performs the instruction above and saves the "
    "workbook to OUTPUT_PATH. Every cell the instruction does not ask you to change must keep its value. The "
    "preview shows only the first rows and columns: find the real extent of the data in the script and loop over "
    "all of its rows instead of relying on what the preview shows. Reply with the python code block only."
)

SEED_SKILL = """# Spreadsheet task skill

## Overview
Solve spreadsheet tasks with one Python script built on openpyxl and pandas; no other third-party packages are available.

## Common Workflow
1. Explore the input first: list the sheets, their used ranges, header rows and a few data rows, and find the cells the task is about.
2. Write the solution script using the two path variables INPUT_PATH (read) and OUTPUT_PATH (write).
3. Run it.
4. Reopen the saved workbook and confirm that the target cells hold what the task asks for.

## Library Selection
| Need | Use |
|------|-----|
| Keep formulas, formatting, merged cells and named ranges intact | openpyxl |
| Filtering, grouping, sorting or reshaping a whole table | pandas to compute, then write the values back through openpyxl |

Warning: saving with pandas (`DataFrame.to_excel`) rewrites the workbook and loses formulas, formatting and every other sheet. Load and save with openpyxl.

## solution.py template
```python
import openpyxl

wb = openpyxl.load_workbook(INPUT_PATH)
ws = wb.active  # or wb["Sheet name"]

# ... read the data, compute, write the results into the target cells ...

wb.save(OUTPUT_PATH)
```

## Output Requirements
- Save the result to OUTPUT_PATH.
- Never hard-code the number of rows or the column letters of the data; find them from the sheet.
- Leave sheets and cells the task does not mention exactly as they were.
"""

NO_CODE = (
    "I could not find any Python code in your reply. Reply with the complete script in a single ```python code block."
)


def system_prompt(skill: str) -> str:
    return SYSTEM_PROMPT + ("\n\n## Skill\n" + skill.strip() if skill and skill.strip() else "")


def user_message(payload: dict[str, Any], preview: str) -> str:
    lines = ["# Instruction", str(payload["instruction"])]
    if payload.get("instruction_type"):
        lines.append(f"Instruction type: {payload['instruction_type']}")
    if payload.get("position"):
        lines.append(f"Expected answer position: {payload['position']}")
    lines += ["", "# Input spreadsheet preview", preview, "# Task", TASK_PARAGRAPH]
    return "\n".join(lines)


def exec_error_feedback(error: str, limit: int = 3000) -> str:
    return (
        "Running your code failed with this error:\n```\n" + error[:limit] + "\n```\n"
        "Fix the problem and reply with the complete corrected script in a ```python code block."
    )


def wrong_cells_feedback(wrong: list[tuple[str, str]], n_right: int) -> str:
    """Training-only feedback: the cells that are wrong and what the script put there - never the expected values."""
    lines = ["Your code ran without errors, but the result is not correct. These cells are wrong:"]
    lines += [f"  {ref}: your output = {got} (WRONG)" for ref, got in wrong]
    if n_right > 0:
        lines.append(f"  ({n_right} other cells are correct.)")
    lines.append(
        "Work out what the instruction really asks for in these cells and reply with the complete corrected script "
        "in a ```python code block."
    )
    return "\n".join(lines)


def _render(v: Any, width: int) -> str:
    if v is None:
        return ""
    text = str(getattr(v, "text", v))  # array formulas carry their text in .text
    return text if len(text) <= width else text[: width - 3] + "..."


def preview_workbook(path: str, rows: int = 5, cols: int = 20, width: int = 40) -> str:
    """Every sheet of the workbook as formulas and values (not cached results): a header line with the
    size, the top-left `rows` x `cols` cells as `A1=value | B1=... `, and how many rows are not shown."""
    import openpyxl

    wb = openpyxl.load_workbook(path, data_only=False)
    out: list[str] = []
    try:
        for ws in wb.worksheets:
            r, c = ws.max_row, ws.max_column
            out.append(f"## Sheet: {ws.title}  (dim={ws.dimensions}, max_row={r}, max_col={c})")
            for row in ws.iter_rows(min_row=1, max_row=min(rows, r), min_col=1, max_col=min(cols, c)):
                out.append(" | ".join(f"{cell.coordinate}={_render(cell.value, width)}" for cell in row))
            if r > rows:
                out.append(f"... ({r - rows} more rows)")
            out.append("")
    finally:
        wb.close()
    return "\n".join(out)


def extract_code(reply: str) -> str:
    """The reference's rule: the text inside the first fence (its language tag ignored); a reply with no
    fence, an unterminated fence or a fence with no newline after it is taken whole. "" = no code."""
    text = reply or ""
    start = text.find("```")
    if start < 0:
        return text.strip()
    newline = text.find("\n", start + 3)
    if newline < 0:
        return text.strip()
    end = text.find("```", newline + 1)
    if end < 0:
        return text.strip()
    return text[newline + 1 : end]
