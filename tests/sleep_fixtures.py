"""Hand-made session stores for the harvest's tests, in the record formats of the committed real-CLI fixtures
(tests/data/sessions/): Codex rollouts and Claude Code project logs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Optional

REAL = Path(__file__).parent / "data" / "sessions"


def jsonl(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return path


def codex_session(
    home: Path,
    cwd: str,
    users: list[str],
    start: str = "2020-01-01T10:00:00.000Z",
    end: Optional[str] = None,
    sid: Optional[str] = None,
    archived: bool = False,
    replies: tuple[str, ...] = ("Done.",),
    commit: str = "",
    extra: tuple[dict[str, Any], ...] = (),
    tail: bytes = b"",
) -> Path:
    sid = sid or str(uuid.uuid4())
    meta: dict[str, Any] = {"id": sid, "timestamp": start, "cwd": cwd, "originator": "codex_exec"}
    if commit:
        meta["git"] = {"commit_hash": commit, "branch": "main"}
    recs: list[dict[str, Any]] = [{"timestamp": start, "type": "session_meta", "payload": meta}]
    for u in users:
        recs.append({"timestamp": start, "type": "event_msg", "payload": {"type": "user_message", "message": u}})
        recs.append(
            {
                "timestamp": start,
                "type": "response_item",
                "payload": {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"cat a.py"}'},
            }
        )
    for r in replies:
        recs.append(
            {"timestamp": end or start, "type": "event_msg", "payload": {"type": "agent_message", "message": r}}
        )
    recs += list(extra)
    name = f"rollout-{start[:19].replace(':', '-')}-{sid}.jsonl"
    day = start[:10].replace("-", "/")
    path = home / "archived_sessions" / name if archived else home / "sessions" / day / name
    return jsonl(path, recs, tail)


def claude_session(
    home: Path,
    cwd: str,
    users: list[str],
    start: str = "2020-01-01T10:00:00.000Z",
    end: Optional[str] = None,
    sid: Optional[str] = None,
    replies: tuple[str, ...] = ("Done.",),
    name: Optional[str] = None,
    extra: tuple[dict[str, Any], ...] = (),
    tail: bytes = b"",
) -> Path:
    sid = sid or str(uuid.uuid4())
    base = {"sessionId": sid, "cwd": cwd, "gitBranch": "main", "isSidechain": False, "version": "2.1.0"}
    recs: list[dict[str, Any]] = [{"type": "summary", "summary": "s"}]
    for u in users:
        recs.append({**base, "type": "user", "timestamp": start, "message": {"role": "user", "content": u}})
        tool = {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}}
        recs.append(
            {**base, "type": "assistant", "timestamp": start, "message": {"role": "assistant", "content": [tool]}}
        )
    for r in replies:
        block = {"type": "text", "text": r}
        recs.append(
            {
                **base,
                "type": "assistant",
                "timestamp": end or start,
                "message": {"role": "assistant", "content": [block]},
            }
        )
    recs += list(extra)
    folder = home / "projects" / cwd.replace("/", "-")
    return jsonl(folder / f"{name or sid}.jsonl", recs, tail)


def real_fixtures(project: Path, codex_home: Path, claude_home: Path) -> list[Path]:
    """The committed real-CLI session logs copied into private stores, their working folder set to `project`."""
    out = []
    for sub, home in (("codex", codex_home), ("claude", claude_home)):
        for f in sorted((REAL / sub).rglob("*.jsonl")):
            dest = home / f.relative_to(REAL / sub)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.read_text("utf-8").replace("{PROJECT}", str(project)), encoding="utf-8")
            out.append(dest)
    return out


def task_folder(project: Path, n_val: int = 14) -> Path:
    """A night's task folder as the harvest writes it: chat tasks whose check.py wants DONE-OK in the reply; 2 train,
    n_val val, 1 test."""
    from skillopt_ray.sleep.harvest.task_folder import write_tasks
    from skillopt_ray.sleep.harvest.tasks import MinedTask

    tasks = [
        MinedTask(f"Please tidy the notes file, part {i}.", "chat", [{"op": "contains", "arg": "DONE-OK"}])
        for i in range(n_val + 3)
    ]
    splits = {t.id: "train" if i < 2 else "test" if i == n_val + 2 else "val" for i, t in enumerate(tasks)}
    out = project / ".skillopt" / "tasks"
    write_tasks(out, tasks, splits, project, {"project": str(project)})
    return out
