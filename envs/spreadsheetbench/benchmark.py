"""SpreadsheetBench: the target writes a Python script per turn; it runs in the sandbox.

The reference's episode protocol: each turn's script runs on test case 1
only; an error is fed back (its first 3000 characters); in training rollouts a script that ran
is scored on case 1 and its wrong cells are fed back with the values it produced (never the
expected ones); evaluation rollouts stop at the first script that runs. After the loop the last
script is scored on every case - case 1 from the last prediction a turn wrote (quirk: case1-last-written) - by the
official rule (scoring.py), and a verification block closes the conversation for the analyst.
Unlike the reference, every script (and the reading of its output) runs in the bubblewrap sandbox.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import openpyxl
from skillopt_envs.base import (
    LLM,
    Benchmark,
    DataError,
    EnvSettings,
    EpisodeBase,
    EpisodeContext,
    EpisodeResult,
    Task,
    parse_options,
)
from skillopt_envs.chat import ChatMessage
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import chat, infra_episode
from skillopt_envs.sandbox import ISOLATIONS, Limits, Sandbox, SandboxStartError, SandboxUnavailable
from skillopt_envs.spreadsheetbench import data as sb_data
from skillopt_envs.spreadsheetbench import prompts, readcells
from skillopt_envs.spreadsheetbench.prompts import extract_code
from skillopt_envs.spreadsheetbench.scoring import (
    Area,
    PositionError,
    SheetValues,
    case_report,
    cell_lines,
    compare,
    exec_error_report,
    parse_position,
    verification_message,
    wrong_cells_from_report,
)

SEED_SKILL = prompts.SEED_SKILL
_READER = Path(readcells.__file__).read_text(encoding="utf-8")
_PATH_ASSIGN = re.compile(r"^(INPUT_PATH|OUTPUT_PATH)\s*(?::[^=]*)?=(?!=).*$", re.M)
_HEADER = 'import os as _skillopt_os; INPUT_PATH = _skillopt_os.environ["INPUT_PATH"]; OUTPUT_PATH = _skillopt_os.environ["OUTPUT_PATH"]'
_FUTURE = re.compile(r"^from __future__ import[^\n]*$", re.M)

warnings.filterwarnings("ignore", category=UserWarning, module="openpyxl")


@dataclass
class SheetOptions:
    sandbox: str = "bwrap"  # bwrap | none (explicit opt-out: model code runs without isolation)
    cpu_s: int = 120
    wall_s: float = 120.0  # the reference's per-run timeout
    memory_mb: int = 2048
    processes: int = 32
    file_mb: int = 64
    env_allow: tuple[str, ...] = ()  # extra environment variables the script may see (never keys)
    recalculate: bool = (
        False  # compute formulas the script wrote (no cached value) with the `formulas` engine; off = official rule
    )
    max_completion_tokens: Optional[int] = 16384  # per target turn (the reference's); null = the role's llm max_tokens
    deadline_s: float = 600.0  # whole-task deadline: no new turn starts with less than 10 s left
    preview_rows: int = 5
    preview_cols: int = 20
    preview_value_chars: int = 40
    error_chars: int = 3000  # of an execution error fed back to the target
    skip_missing_tasks: bool = False
    sample_dir: Optional[str] = None

    @staticmethod
    def parse(raw: JSONObject) -> SheetOptions:
        opts = parse_options(SheetOptions, raw, "spreadsheetbench")
        opts.env_allow = tuple(opts.env_allow or ())
        if opts.sandbox not in ISOLATIONS:
            raise DataError(f"env.options.sandbox must be one of {', '.join(ISOLATIONS)}, got {opts.sandbox!r}")
        return opts


def prepare_script(code: str) -> str:
    """The reference strips the script's own INPUT_PATH/OUTPUT_PATH assignments and injects the real
    paths; here they come from the sandbox's environment (one header line; __future__ imports stay first).
    The reference runs the script's code inside a try block, so a script indented as a whole still runs:
    its common indentation is removed here to the same effect."""
    body = _PATH_ASSIGN.sub("", textwrap.dedent(code))
    futures = _FUTURE.findall(body)
    body = _FUTURE.sub("", body)
    return "\n".join(futures + [_HEADER, body])


def preview_workbook(path: str, rows: int = 5, cols: int = 20, width: int = 40) -> str:
    return prompts.preview_workbook(path, rows, cols, width)


@dataclass
class Run:
    """One script run on one input."""

    ok: bool
    error: str = ""  # stdout + stderr (or why it failed), for feedback and reports
    output: Optional[Path] = None  # the written workbook, kept even when the script failed after saving


def _user_frames(traceback: str) -> str:
    """Drop the sandbox launcher's frames (they have no source lines) so the model sees its own script's."""
    return "\n".join(
        line
        for line in traceback.splitlines()
        if not line.strip().startswith(('File "<string>"', 'File "<frozen runpy>"'))
    )


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


class FormulaEngineError(RuntimeError):
    """Recalculation (env.options.recalculate=true) failed on an output workbook: the cells' true values are
    unknown, so the episode is not scored (an infrastructure error of its own kind, not a wrong answer)."""

    kind = "formula_engine"  # skillopt_envs.base.INFRA_KINDS


class SpreadsheetBenchmark(Benchmark):
    name = "spreadsheetbench"
    options_class = SheetOptions
    agent_harness = True  # llm.target.harness=codex|claude_code: one agent run writes solution.py (single mode)

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = SheetOptions.parse(dict(env_cfg.get("options") or {}))
        o = self.options
        try:
            limits = Limits(o.cpu_s, o.wall_s, o.memory_mb, o.file_mb, o.processes, max(8000, 2 * o.error_chars))
            self.sandbox = Sandbox(o.sandbox, limits, o.env_allow)
        except SandboxUnavailable as e:
            raise DataError(str(e)) from None
        self._root = sb_data.resolve_root(env_cfg.get("data_dir"))
        self._manifest = env_cfg.get("manifest_dir")
        self._using_samples = self._root is None
        if self._using_samples:
            from skillopt_envs.spreadsheetbench.samples import ensure_sample_tasks

            self._root = ensure_sample_tasks(o.sample_dir)
            self._manifest = self._manifest or str(self._root / "manifest")
        self._loaded: Optional[tuple[list[Task], sb_data.SplitPlan]] = None

    def _data(self) -> tuple[list[Task], sb_data.SplitPlan]:
        if self._loaded is None:
            assert self._root is not None
            tasks = sb_data.load_dataset(self._root)
            self._loaded = (
                tasks,
                sb_data.plan_splits(self._root, tasks, self._manifest, self.options.skip_missing_tasks),
            )
        return self._loaded

    def data_note(self) -> str:
        from skillopt_envs.spreadsheetbench.check import summary_note

        iso = (
            "bubblewrap sandbox"
            if self.options.sandbox == "bwrap"
            else "NO sandbox isolation (env.options.sandbox=none)"
        )
        recalc = (
            "formulas recalculated (env.options.recalculate=true)"
            if self.options.recalculate
            else "formulas scored by cached values"
        )
        assert self._root is not None
        if self._using_samples:
            return (
                f"SpreadsheetBench: no data configured (env.data_dir / SPREADSHEETBENCH_DATA) - using built-in sample tasks in "
                f"{self._root}; {iso}; {recalc}"
            )
        try:
            tasks, plan = self._data()
            split_note = plan.describe()
            defects = summary_note(self._root, tasks, plan)
        except DataError as e:  # load_split reports it properly
            split_note, defects = f"split: {e}", ""
        return "; ".join(
            x for x in (f"SpreadsheetBench: tasks from {self._root}", split_note, defects, iso, recalc) if x
        )

    def load_split(self, split: str) -> list[Task]:
        assert self._root is not None
        tasks, plan = self._data()
        return sb_data.select(self._root, tasks, plan, split)

    def seed_skill(self) -> str:
        return SEED_SKILL

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        base = EpisodeBase(task_description=p["instruction"])
        loaded = self._load_inputs(task, base)
        if isinstance(loaded, EpisodeResult):
            return loaded
        areas, expected, preview = loaded
        system, user = prompts.system_prompt(skill), prompts.user_message(p, preview)
        info: JSONObject = {
            "target_system_prompt": system,
            "target_user_prompt": user,
            "spreadsheet_preview": preview,
            "analyst_blocks": [["Spreadsheet Preview", preview]],
            "instruction_type": p["instruction_type"],
            "answer_position": p["position"],
        }
        if ctx.agent is not None:
            from skillopt_envs.spreadsheetbench.agent import agent_episode

            return await agent_episode(self, task, skill, ctx.agent, ctx, user, info, base, areas, expected)
        return await self._chat_episode(task, system, user, info, base, areas, expected, llm, ctx)

    def _load_inputs(
        self, task: Task, base: EpisodeBase
    ) -> tuple[list[Area], list[tuple[SheetValues, str]], str] | EpisodeResult:
        """The answer areas, each case's expected values and the first workbook's preview; a data_error
        result when the task's files or answer position cannot be read (the model is never called)."""
        p = task.payload
        o = self.options
        try:
            if p.get("problem"):
                raise DataError(p["problem"])
            areas = parse_position(p["position"])
            expected = [_load_expected(ans, areas) for _, ans in p["cases"]]
            preview = preview_workbook(p["cases"][0][0], o.preview_rows, o.preview_cols, o.preview_value_chars)
        except (DataError, PositionError, OSError, KeyError, ValueError) as e:
            return EpisodeResult(
                task.task_id, task.task_type, fail_reason="data_error", error=f"data: {str(e)[:300]}", **base
            )
        except Exception as e:  # noqa: BLE001 - corrupt workbooks raise zipfile/XML errors of many kinds
            return EpisodeResult(
                task.task_id,
                task.task_type,
                fail_reason="data_error",
                error=f"data: {type(e).__name__}: {str(e)[:300]}",
                **base,
            )
        return areas, expected, preview

    async def _chat_episode(
        self,
        task: Task,
        system: str,
        user: str,
        info: JSONObject,
        base: EpisodeBase,
        areas: list[Area],
        expected: list[tuple[SheetValues, str]],
        llm: LLM,
        ctx: EpisodeContext,
    ) -> EpisodeResult:
        """The chat protocol: the turn loop in a scratch folder, then the last script scored on every case."""
        p = task.payload
        messages: list[ChatMessage] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        trajectory: list[JSONObject] = []
        scratch = Path(tempfile.mkdtemp(prefix="skillopt-sheet-"))
        try:
            code, case1_pred, turns = await self._turns(task, messages, trajectory, areas, expected, scratch, llm, ctx)
            if not code.strip():
                return EpisodeResult(
                    task.task_id,
                    task.task_type,
                    fail_reason="empty-code-block",
                    n_turns=turns,
                    trajectory=trajectory,
                    info={**info, "n_cases": len(p["cases"]), "n_pass": 0},
                    **base,
                )
            score = await asyncio.to_thread(self._score_all, code, case1_pred, p["cases"], areas, expected, scratch)
        except FormulaEngineError as e:  # deterministic: not retried, not scored, counted as its own kind
            return infra_episode(task, f"formula engine: {e}", e.kind, trajectory=trajectory, info=info, **base)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        n_pass, reason, report = score
        n = len(p["cases"])
        hard = 1.0 if n and n_pass == n else 0.0
        trajectory.append({"role": "system", "content": report})
        info.update(n_cases=n, n_pass=n_pass)
        return EpisodeResult(
            task.task_id,
            task.task_type,
            hard=hard,
            soft=n_pass / n if n else 0.0,
            fail_reason="" if hard else reason,
            n_turns=turns,
            trajectory=trajectory,
            info=info,
            **base,
        )

    async def _turns(
        self,
        task: Task,
        messages: list[ChatMessage],
        trajectory: list[JSONObject],
        areas: list[Area],
        expected: list[tuple[SheetValues, str]],
        scratch: Path,
        llm: LLM,
        ctx: EpisodeContext,
    ) -> tuple[str, Optional[Path], int]:
        """The turn loop; returns (the last script, case 1's latest prediction, turns)."""
        o = self.options
        first_input = task.payload["cases"][0][0]
        deadline = time.monotonic() + o.deadline_s
        code, case1_pred, turns = "", None, 0
        for turn in range(ctx.max_turns):
            turns = turn + 1  # a turn abandoned at the deadline still counts (quirk: spreadsheet-feedback-details)
            if deadline - time.monotonic() < 10:
                break
            content = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t{turn}", o.max_completion_tokens, ctx.stage)
            code = extract_code(content)
            trajectory.append({"role": "assistant", "content": content})
            if not code.strip():
                feedback = prompts.NO_CODE
            else:
                run = await asyncio.to_thread(self._run_script, code, first_input, scratch / f"turn{turn}")
                if run.output is not None:
                    # the last workbook written, even by a script that failed later (quirk: case1-last-written)
                    case1_pred = run.output
                if not run.ok:
                    feedback = prompts.exec_error_feedback(run.error, o.error_chars)
                elif not ctx.training:
                    break  # evaluation: the first script that runs ends the episode
                else:
                    assert run.output is not None  # a script that ran ok saved its workbook (_run_script)
                    ((values, problem),) = await asyncio.to_thread(
                        self._read, [run.output], [expected[0][1]], areas, scratch / f"read{turn}"
                    )
                    if problem:
                        feedback = prompts.exec_error_feedback(problem, o.error_chars)
                    else:
                        verdict = compare(expected[0][0], expected[0][1], values, areas)
                        if verdict.passed:
                            break
                        feedback = prompts.wrong_cells_feedback(*wrong_cells_from_report(cell_lines(verdict)))
            messages.append({"role": "assistant", "content": content})
            messages.append({"role": "user", "content": feedback})
            trajectory.append({"role": "user", "content": feedback})
        return code, case1_pred, turns

    def _run_script(self, code: str, input_path: str, out_dir: Path) -> Run:
        r = self.sandbox.run(
            prepare_script(code),
            {"input.xlsx": Path(input_path)},
            out_dir,
            env={"INPUT_PATH": "{dir}/input.xlsx", "OUTPUT_PATH": "{dir}/output.xlsx"},
            keep=("output.xlsx",),
        )
        if (
            not r.started
        ):  # the episode is retried on the pool, then counted as an infra error: never the model's code error
            raise SandboxStartError(r.describe())
        output = r.files.get("output.xlsx")
        text = (r.stdout.strip() + "\n" + _user_frames(r.stderr).strip()).strip()
        if r.timed_out or r.returncode < 0:
            return Run(False, r.describe() + ("\n" + text if text else ""), output)
        if r.returncode != 0:
            return Run(False, text or r.describe(), output)
        if output is None:
            return Run(False, "The script finished but saved no workbook at OUTPUT_PATH.", None)
        return Run(True, "", output)

    def _score_all(
        self,
        code: str,
        case1_pred: Optional[Path],
        cases: list[list[str]],
        areas: list[Area],
        expected: list[tuple[SheetValues, str]],
        scratch: Path,
    ) -> tuple[int, str, str]:
        """The final script on every case (case 1: the latest prediction, if any): (passed, fail_reason, verification)."""
        preds: list[Optional[Path]] = []
        errors: list[tuple[str, str]] = []  # (fail_reason, report part) of cases whose script failed
        for k, (inp, _ans) in enumerate(cases):
            if k == 0 and case1_pred is not None:
                preds.append(case1_pred)
                errors.append(("", ""))
                continue
            run = self._run_script(code, inp, scratch / f"final{k}")
            no = sb_data.case_number(inp)
            if run.ok:
                preds.append(run.output)
                errors.append(("", ""))
            elif run.output is None and run.error.startswith("The script finished"):
                preds.append(None)
                errors.append(("output-not-found", exec_error_report(no, run.error)))
            else:
                preds.append(None)
                last = (run.error.strip().splitlines() or [""])[-1][:200]
                errors.append((f"exec-error: {last}", exec_error_report(no, run.error)))
        written = [(k, p) for k, p in enumerate(preds) if p is not None]
        read = (
            self._read([p for _, p in written], [expected[k][1] for k, _ in written], areas, scratch / "read-final")
            if written
            else []
        )
        values = {k: r for (k, _), r in zip(written, read)}
        passed, reason, parts = 0, "", []
        for k, (inp, _ans) in enumerate(cases):
            no = sb_data.case_number(inp)
            if k not in values:
                reason = reason or errors[k][0]
                parts.append(errors[k][1])
                continue
            got, problem = values[k]
            if problem:
                reason = reason or f"output-unreadable: {problem[:200]}"
                parts.append(f"## Eval Result (case {no}): FAIL\n{problem}")
                continue
            verdict = compare(expected[k][0], expected[k][1], got, areas)
            passed += verdict.passed
            if not verdict.passed:
                reason = reason or f"eval-mismatch: {verdict.reason[:200]}"
            parts.append(case_report(int(no) if no.isdigit() else k + 1, verdict))
        return passed, reason, verification_message(parts)

    def _read(
        self, workbooks: list[Path], firsts: list[str], areas: list[Area], out_dir: Path
    ) -> list[tuple[SheetValues, str]]:
        """(values, problem) per workbook, read in one fresh sandbox."""
        request: dict[str, dict[str, list[str]]] = {}
        for k, first in enumerate(firsts, start=1):
            cells: dict[str, list[str]] = {}
            for a in areas:
                cells.setdefault(a.sheet if a.sheet is not None else first, []).extend(a.cells)
            request[f"case{k}.xlsx"] = cells
        out_dir.mkdir(parents=True, exist_ok=True)
        req = out_dir.parent / f"{out_dir.name}-request.json"
        req.write_text(json.dumps(request))
        inputs = {f"case{k}.xlsx": wb for k, wb in enumerate(workbooks, start=1)}
        args = "request.json values.json" + (" --recalculate" if self.options.recalculate else "")
        run = self.sandbox.run(
            _READER, {**inputs, "request.json": req}, out_dir, keep=("values.json",), env={"SKILLOPT_ARGS": args}
        )
        if not run.started:
            raise SandboxStartError(run.describe())
        if not run.ok or "values.json" not in run.files:
            problem = f"could not read the output workbook ({run.describe()}): {run.stderr.strip()[-300:]}"
            return [({}, problem)] * len(workbooks)
        data = json.loads(run.files["values.json"].read_text())
        out: list[tuple[dict[str, Any], str]] = []
        for name in inputs:
            d = data[name]
            if d.get("error"):
                out.append(({}, d["error"]))
                continue
            if d.get("recalc_error"):
                raise FormulaEngineError(
                    f"could not recalculate {d.get('recalculated', 0)} formula cell(s) of an output workbook "
                    f"({d['recalc_error'][:200]}); the episode is not scored: set env.options.recalculate=false "
                    "to score cached values as the official rule does"
                )
            values = {s: {c: readcells.decode(v) for c, v in cells.items()} for s, cells in d["sheets"].items()}
            for sheet in d["sheetnames"]:
                values.setdefault(sheet, {})
            out.append((values, ""))
        return out
