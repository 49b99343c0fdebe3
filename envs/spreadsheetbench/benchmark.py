"""SpreadsheetBench: the target writes one Python script per turn; it runs in the sandbox on every test case.

Turn loop: an exception (bounded) is fed back; in training rollouts only, wrong cells are fed
back with the values the code produced (never the expected ones); at evaluation the episode
ends at the first script that runs. Scores follow the official rule (scoring.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import openpyxl

from envs.base import LLM, Benchmark, DataError, EpisodeContext, EpisodeResult, Task, parse_options
from envs.sandbox import ISOLATIONS, Limits, Sandbox, SandboxUnavailable, head_and_tail
from envs.spreadsheetbench import data as sb_data
from envs.spreadsheetbench import readcells
from envs.spreadsheetbench.scoring import Area, CaseVerdict, PositionError, SheetValues, compare, parse_position
from skillopt_ray.llm.types import ChatRequest

SEED_SKILL = """# Spreadsheet manipulation skill

## Goal
Write one Python script that opens the workbook at INPUT_PATH, makes the requested change and saves it to OUTPUT_PATH.

## How to work
- Use openpyxl; keep every sheet that is not part of the answer unchanged.
- Write values (not only formulas) into the answer cells when you can compute them in Python.
"""

_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_READER = Path(readcells.__file__).read_text(encoding="utf-8")


@dataclass
class SheetOptions:
    sandbox: str = "bwrap"  # bwrap | none (explicit opt-out: model code runs without isolation)
    cpu_s: int = 60
    wall_s: float = 90.0
    memory_mb: int = 2048
    processes: int = 32
    file_mb: int = 64
    env_allow: tuple[str, ...] = ()  # extra environment variables the script may see (never keys)
    preview_rows: int = 12
    preview_cols: int = 12
    preview_chars: int = 4000
    feedback_chars: int = 1500
    wrong_cells_shown: int = 20
    skip_missing_tasks: bool = False
    sample_dir: Optional[str] = None

    @staticmethod
    def parse(raw: dict[str, Any]) -> "SheetOptions":
        opts = parse_options(SheetOptions, raw, "spreadsheetbench")
        opts.env_allow = tuple(opts.env_allow or ())
        if opts.sandbox not in ISOLATIONS:
            raise DataError(f"env.options.sandbox must be one of {', '.join(ISOLATIONS)}, got {opts.sandbox!r}")
        return opts


def extract_code(reply: str) -> Optional[str]:
    """The last fenced code block (models often show a sketch before the final script)."""
    blocks = _CODE.findall(reply or "")
    return blocks[-1].strip() + "\n" if blocks and blocks[-1].strip() else None


def preview_workbook(path: str, rows: int, cols: int, limit: int) -> str:
    """A bounded text view of every sheet: size, then the top-left cells as a grid."""
    wb = openpyxl.load_workbook(path, data_only=True, read_only=True)
    parts = []
    for ws in wb.worksheets:
        parts.append(f"Sheet '{ws.title}' (dimensions {ws.calculate_dimension() if hasattr(ws, 'calculate_dimension') else '?'}):")
        for r_idx, row in enumerate(ws.iter_rows(max_row=rows, max_col=cols, values_only=True), start=1):
            cells = ["" if v is None else str(v)[:30] for v in row]
            if any(cells):
                parts.append(f"  {r_idx}: " + " | ".join(cells))
    wb.close()
    text = "\n".join(parts)
    return text if len(text) <= limit else text[:limit] + "\n  ... (preview truncated)"


def build_messages(skill: str, task: Task, preview: str) -> list[dict[str, str]]:
    p = task.payload
    system = ("You are an expert at automating spreadsheets with Python. Read the skill below and follow it.\n\n"
              "=== SKILL ===\n" + skill.strip() + "\n=== END SKILL ===")
    user = (f"Instruction: {p['instruction']}\nInstruction type: {p['instruction_type']}\nAnswer position: {p['answer_position']}\n\n"
            f"Preview of the input workbook:\n{preview}\n\n"
            "Write one Python script (openpyxl and pandas are available) that reads the workbook at the path in the "
            "environment variable INPUT_PATH and saves the result to the path in OUTPUT_PATH. The same script is run on "
            "several workbooks with this layout. Reply with the script in a ```python code block.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass
class Attempt:
    """One script run on every test case."""

    error: str = ""  # the script failed on some case (fed back)
    verdicts: Optional[list[CaseVerdict]] = None
    fail_reason: str = ""

    @property
    def passed(self) -> int:
        return sum(v.passed for v in self.verdicts or [])


def _user_frames(traceback: str) -> str:
    """Drop the sandbox launcher's frames (they have no source lines) so the model sees its own script's."""
    return "\n".join(l for l in traceback.splitlines() if not l.strip().startswith(('File "<string>"', 'File "<frozen runpy>"')))


def _load_expected(path: str, areas: list[Area]) -> tuple[SheetValues, str]:
    wb = openpyxl.load_workbook(path, data_only=True)
    first = wb.sheetnames[0]
    values: SheetValues = {}
    for a in areas:
        sheet = a.sheet if a.sheet is not None else first
        if sheet not in wb.sheetnames:
            raise DataError(f"answer_position names sheet {sheet!r}, which {Path(path).name} lacks")
        ws = wb[sheet]
        values.setdefault(sheet, {}).update({c: ws[c].value for c in a.cells})
    return values, first


class SpreadsheetBenchmark(Benchmark):
    name = "spreadsheetbench"

    def __init__(self, env_cfg: dict[str, Any]):
        super().__init__(env_cfg)
        self.options = SheetOptions.parse(dict(env_cfg.get("options") or {}))
        o = self.options
        try:
            self.sandbox = Sandbox(o.sandbox, Limits(o.cpu_s, o.wall_s, o.memory_mb, o.file_mb, o.processes, o.feedback_chars), o.env_allow)
        except SandboxUnavailable as e:
            raise DataError(str(e)) from None
        self._root = sb_data.resolve_root(env_cfg.get("data_dir"))
        self._manifest = env_cfg.get("manifest_dir")
        self._using_samples = self._root is None
        if self._using_samples:
            from envs.spreadsheetbench.samples import ensure_sample_tasks

            self._root = ensure_sample_tasks(o.sample_dir)
            self._manifest = self._manifest or str(self._root / "manifest")

    def data_note(self) -> str:
        iso = "bubblewrap sandbox" if self.options.sandbox == "bwrap" else "NO sandbox isolation (env.options.sandbox=none)"
        if self._using_samples:
            return f"SpreadsheetBench: no data configured (env.data_dir / SPREADSHEETBENCH_DATA) - using built-in sample tasks in {self._root}; {iso}"
        return f"SpreadsheetBench: tasks from {self._root}; {iso}"

    def load_split(self, split: str) -> list[Task]:
        assert self._root is not None
        return sb_data.load_split(self._root, self._manifest, split, self.options.skip_missing_tasks)

    def seed_skill(self) -> str:
        return SEED_SKILL

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        try:
            if p.get("problem"):
                raise DataError(p["problem"])
            areas = parse_position(p["answer_position"])
            expected = [_load_expected(ans, areas) for _, ans in p["cases"]]
            preview = preview_workbook(p["cases"][0][0], self.options.preview_rows, self.options.preview_cols, self.options.preview_chars)
        except (DataError, PositionError, OSError, KeyError, ValueError) as e:
            return EpisodeResult(task.task_id, task.task_type, fail_reason="data_error", error=f"data: {str(e)[:300]}")
        except Exception as e:  # noqa: BLE001 - corrupt workbooks raise zipfile/XML errors of many kinds
            return EpisodeResult(task.task_id, task.task_type, fail_reason="data_error", error=f"data: {type(e).__name__}: {str(e)[:300]}")
        messages = build_messages(skill, task, preview)
        trajectory: list[dict[str, Any]] = []
        scored: Optional[Attempt] = None  # the latest attempt whose script ran on every case
        last = Attempt(fail_reason="max_turns")
        turns = 0
        for turn in range(ctx.max_turns):
            turns = turn + 1
            reply = await llm.chat(ChatRequest("target", "rollout", messages, f"{ctx.key}/{task.task_id}/t{turn}"))
            code = extract_code(reply.content)
            if code is None:
                last = Attempt(error="no ```python code block found in the reply", fail_reason="no_code")
            else:
                last = await asyncio.to_thread(self._attempt, code, p["cases"], areas, expected)
            feedback = self._feedback(last, ctx.training)
            trajectory.append({"turn": turn, "code": (code or reply.content)[:3000], "error": last.error[:1000],
                               "passed": last.passed, "cases": len(p["cases"]), "feedback": feedback[:2000]})
            if last.verdicts is not None:
                scored = last
                if not ctx.training or last.passed == len(p["cases"]):
                    break
            messages = messages + [{"role": "assistant", "content": reply.content}, {"role": "user", "content": feedback}]
        n = len(p["cases"])
        soft = scored.passed / n if scored is not None else 0.0
        hard = 1.0 if scored is not None and scored.passed == n else 0.0
        reason = "" if hard else (scored or last).fail_reason
        return EpisodeResult(task.task_id, task.task_type, hard=hard, soft=soft, fail_reason=reason, n_turns=turns,
                             trajectory=[{"instruction": p["instruction"][:1500], "answer_position": p["answer_position"]}] + trajectory)

    def _attempt(self, code: str, cases: list[list[str]], areas: list[Area], expected: list[tuple[SheetValues, str]]) -> Attempt:
        """Run the script on every case, then read all outputs in one more fresh sandbox."""
        verdicts: list[CaseVerdict] = []
        scratch = Path(tempfile.mkdtemp(prefix="skillopt-sheet-"))
        try:
            outputs: list[Path] = []
            for k, (inp, _) in enumerate(cases, start=1):
                run = self.sandbox.run(code, {"input.xlsx": Path(inp)}, scratch / f"case{k}",
                                       env={"INPUT_PATH": "{dir}/input.xlsx", "OUTPUT_PATH": "{dir}/output.xlsx"}, keep=("output.xlsx",))
                if not run.ok:
                    reason = "timeout" if run.timed_out else "code_error"
                    tail = _user_frames(run.stderr.strip() or run.stdout.strip())
                    return Attempt(error=f"test case {k}: {run.describe()}\n{tail}", fail_reason=reason)
                if "output.xlsx" not in run.files:
                    return Attempt(error=f"test case {k}: the script ran but wrote nothing to OUTPUT_PATH", fail_reason="no_output")
                outputs.append(run.files["output.xlsx"])
            read = self._read_outputs(outputs, areas, [first for _, first in expected], scratch / "read")
            for k, ((actual, problem), (exp, first)) in enumerate(zip(read, expected), start=1):
                if problem:
                    return Attempt(error=f"test case {k}: {problem}", fail_reason="bad_output")
                verdicts.append(compare(exp, first, actual, areas))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        ok = all(v.passed for v in verdicts)
        return Attempt(verdicts=verdicts, fail_reason="" if ok else "wrong_values")

    def _read_outputs(self, workbooks: list[Path], areas: list[Area], firsts: list[str], out_dir: Path) -> list[tuple[SheetValues, str]]:
        """(values, problem) per workbook; cells a failed recalculation left empty show up as wrong cells."""
        request: dict[str, dict[str, list[str]]] = {}
        for k, first in enumerate(firsts, start=1):
            cells: dict[str, list[str]] = {}
            for a in areas:
                cells.setdefault(a.sheet if a.sheet is not None else first, []).extend(a.cells)
            request[f"case{k}.xlsx"] = cells
        req = out_dir.parent / f"{out_dir.name}-request.json"
        req.write_text(json.dumps(request))
        inputs = {f"case{k}.xlsx": wb for k, wb in enumerate(workbooks, start=1)}
        run = self.sandbox.run(_READER, {**inputs, "request.json": req}, out_dir, keep=("values.json",),
                               env={"SKILLOPT_ARGS": "request.json values.json"})
        if not run.ok or "values.json" not in run.files:
            problem = f"could not read the output workbook ({run.describe()}): {run.stderr.strip()[-300:]}"
            return [({}, problem)] * len(workbooks)
        data = json.loads(run.files["values.json"].read_text())
        out = []
        for name in inputs:
            d = data[name]
            if d.get("error"):
                out.append(({}, d["error"]))
                continue
            values = {s: {c: readcells.decode(v) for c, v in cells.items()} for s, cells in d["sheets"].items()}
            for sheet in d["sheetnames"]:
                values.setdefault(sheet, {})
            out.append((values, ""))
        return out

    def _feedback(self, a: Attempt, training: bool) -> str:
        limit = self.options.feedback_chars
        if a.verdicts is None:
            return f"Your script failed.\n{head_and_tail(a.error, limit)}\nFix it and reply with the whole corrected script in a ```python block."
        n, passed = len(a.verdicts), a.passed
        if passed == n or not training:
            return f"Your script ran on all {n} test cases."
        lines = [f"Your script ran, but {n - passed} of {n} test cases have wrong values in the answer cells."]
        shown = 0
        for k, v in enumerate(a.verdicts, start=1):
            if v.passed:
                continue
            if v.problem:
                lines.append(f"Test case {k}: {v.problem}.")
            for cell, _expected, actual in v.wrong:
                if shown >= self.options.wrong_cells_shown:
                    break
                lines.append(f"Test case {k}: {cell} is wrong; your script produced {actual!r}.")
                shown += 1
        lines.append("Fix the script and reply with the whole corrected script in a ```python block.")
        return "\n".join(lines)
