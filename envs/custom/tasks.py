"""A user's tasks from `env.data_dir`: a JSONL file, a folder with train/val/test.jsonl, or a folder of agent tasks.

One task a line: `id`, `prompt`, `answer` (a string or a list of accepted strings), and optionally `split`
(train|val|test), `choices`, `system` and `metadata`. An agent task is a sub-folder with `task.md` (the prompt), an
optional `task.json` (the same fields, `prompt` and `id` excepted), an optional `workspace/` and its `check`. Broken
input is a DataError naming the file and line and the fix, raised before any cluster starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import DataError
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import SPLIT_ALIASES, SPLITS

KEYS = ("id", "prompt", "answer", "split", "choices", "system", "metadata")
_FIX = (
    "each line of a task file is one JSON object with an id, a prompt and an answer (a string or a list of strings), "
    "optionally split, choices, system and metadata"
)
CHECK_NAMES = ("check", "check.py")


@dataclass(frozen=True)
class UserTask:
    """One task as given: its line (`raw`, what task.json holds), the accepted answers and, for an agent task, its
    folder."""

    id: str
    prompt: str
    golds: list[str]
    split: Optional[str]
    raw: JSONObject
    folder: Optional[str] = None
    where: str = ""  # the file and line (or task.json) it came from, for errors found later


def parse_task(raw: Any, where: str) -> UserTask:
    """One task checked field by field; DataError naming `where` (file and line) otherwise."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: a task is a JSON object, found {type(raw).__name__}; {_FIX}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise DataError(f"{where}: unknown field(s) {', '.join(unknown)}; put extra data under metadata ({_FIX})")
    tid = raw.get("id")
    if isinstance(tid, bool) or not isinstance(tid, (str, int)) or str(tid).strip() == "":
        raise DataError(f"{where}: the task has no id (a non-empty string or number); {_FIX}")
    prompt = raw.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(f"{where}: task {tid!r} has no prompt (a non-empty string); {_FIX}")
    return UserTask(str(tid), prompt, _golds(raw.get("answer"), where), _split(raw, where), raw, where=where)


def _golds(answer: Any, where: str) -> list[str]:
    if answer is None:
        return []
    if isinstance(answer, (str, int, float)) and not isinstance(answer, bool):
        return [str(answer)]
    if isinstance(answer, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in answer):
        return [str(a) for a in answer]
    raise DataError(f"{where}: answer must be a string or a list of strings, found {json.dumps(answer)[:80]}")


def _split(raw: JSONObject, where: str) -> Optional[str]:
    value = raw.get("split")
    if value is None:
        _optional_types(raw, where)
        return None
    if value not in SPLIT_ALIASES:
        raise DataError(f"{where}: split {value!r} is not one of train, val, test")
    _optional_types(raw, where)
    return SPLIT_ALIASES[value]


def _optional_types(raw: JSONObject, where: str) -> None:
    if "system" in raw and not isinstance(raw["system"], str):
        raise DataError(f"{where}: system must be a string (an extra system message for this task)")
    if "metadata" in raw and not isinstance(raw["metadata"], dict):
        raise DataError(f"{where}: metadata must be a JSON object")
    if "choices" in raw and not (isinstance(raw["choices"], (list, dict)) and raw["choices"]):
        raise DataError(f"{where}: choices must be a non-empty list of strings or an object of label: text")


def read_jsonl(path: Path) -> list[UserTask]:
    """Every task of a JSONL file (blank lines skipped); an id used twice is an error naming both lines."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark (Windows editors) is dropped
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror}); give a readable tasks.jsonl") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    out: list[UserTask] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno}); {_FIX}") from None
        task = parse_task(raw, f"{path}:{n}")
        if task.id in seen:
            raise DataError(f"{path}:{n}: id {task.id!r} is used again (first on line {seen[task.id]}); ids are unique")
        seen[task.id] = n
        out.append(task)
    if not out:
        raise DataError(f"{path} holds no tasks; {_FIX}")
    return out


def read_agent_task(folder: Path, shared_check: Optional[Path]) -> UserTask:
    """One agent task folder: task.md, optional task.json, optional workspace/, a check (its own or the shared one)."""
    md = folder / "task.md"
    if not md.is_file():
        raise DataError(f"{folder} has no task.md; an agent task folder holds task.md, optional workspace/ and check")
    raw: JSONObject = {}
    if (folder / "task.json").is_file():
        try:
            raw = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:
            raise DataError(f"{folder / 'task.json'}: not valid JSON ({e}); fix or remove it") from None
        if not isinstance(raw, dict):
            raise DataError(f"{folder / 'task.json'}: must hold a JSON object")
    if (folder / "workspace").is_symlink():
        raise DataError(f"{folder / 'workspace'} is a link; make it a real folder (links are never copied through)")
    raw = {**raw, "id": raw.get("id", folder.name), "prompt": md.read_text(encoding="utf-8")}
    task = parse_task(raw, str(folder / "task.json"))
    if shared_check is None and not any((folder / c).is_file() for c in CHECK_NAMES):
        raise DataError(f"{folder} has no check; add an executable `check` (or check.py) or set env.options.check")
    return UserTask(task.id, task.prompt, task.golds, task.split, raw, str(folder), task.where)


def task_check(task: UserTask, shared_check: Optional[Path]) -> Optional[Path]:
    """The check of an agent task: its folder's own check, else the shared env.options.check."""
    if task.folder:
        for name in CHECK_NAMES:
            if (Path(task.folder) / name).is_file():
                return Path(task.folder) / name
    return shared_check


def read_source(
    root: Path, shared_check: Optional[Path], exclude: frozenset[str] = frozenset()
) -> tuple[str, list[UserTask] | dict[str, list[UserTask]]]:
    """What `root` holds: ("jsonl", tasks), ("split_files", {split: tasks}) or ("agent", tasks), less the tasks
    `exclude` names (an agent task by its folder's name, never read: a broken one is left out whole)."""
    if root.is_file():
        return "jsonl", [t for t in read_jsonl(root) if t.id not in exclude]
    if not root.is_dir():
        raise DataError(f"env.data_dir={root} does not exist; give a tasks.jsonl file or a folder of tasks")
    files = {s: root / f"{s}.jsonl" for s in SPLITS}
    if any(p.is_file() for p in files.values()):
        missing = [p.name for p in files.values() if not p.is_file()]
        if missing:
            raise DataError(f"{root} has some split files but not {', '.join(missing)}; give all three or one JSONL")
        return "split_files", {
            s: [t for t in _in_split(read_jsonl(p), s, p) if t.id not in exclude] for s, p in files.items()
        }
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in exclude)
    if not folders:
        raise DataError(
            f"{root} holds no train.jsonl/val.jsonl/test.jsonl and no task folders; give a tasks.jsonl, such a folder, "
            "or a folder of agent tasks (one sub-folder each with task.md and check)"
        )
    return "agent", [read_agent_task(f, shared_check) for f in folders]


def _in_split(tasks: list[UserTask], split: str, path: Path) -> list[UserTask]:
    wrong = next((t for t in tasks if t.split not in (None, split)), None)
    if wrong is not None:
        raise DataError(f"{path}: task {wrong.id!r} says split {wrong.split!r} but sits in {path.name}; drop its split")
    return tasks
