"""Rebuilds the demo's session logs and its reviewed task folder (run from the repository's root:
`python examples/sleep-demo/make_demo.py`). The logs are the committed real-CLI fixtures (tests/data/sessions/:
Codex CLI 0.171 and Claude Code 2.1.197 recorded in the jail) with the request and the final reply swapped for the
demo's, every other record kept as those CLIs wrote it; the working folder is a placeholder, so the demo runs with
`--scope all`. The task folder is what a reviewer makes of the harvest: the same task ids, each given rule checks."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from skillopt_ray.sleep.harvest.splits import assign
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "tests" / "data" / "sessions"
CWD = "/home/you/notes"  # where the sessions were "recorded"; not a path on this machine
FIXTURE_REPLY = "Done: the change is in place and the tests pass."
CODEX_PROMPTS = ("Add a --verbose flag to the command line tool and explain what it prints.",
                 "Summarise what the demo skill asks for in two sentences.")  # fmt: skip
CLAUDE_PROMPT = "Summarise what the demo skill asks for in two sentences."

# (source, request, final reply, rule checks the reviewer wrote)
SESSIONS = [
    ("codex", "Write a one-line commit message for adding a --verbose flag to the notes CLI.",
     "Add --verbose flag that prints each SQL statement", [("contains", "verbose"), ("max_chars", 120)]),
    ("codex", "The notes tool keeps every note in notes.db. In one sentence, say where the notes are stored.",
     "They are stored in notes.db, a SQLite file next to the tool.", [("contains", "notes.db"), ("max_chars", 300)]),
    ("codex", "The README says the notes tool needs Python 3.10 or newer. Reply with the minimum Python version only.",
     "3.10", [("contains", "3.10"), ("max_chars", 40)]),
    ("claude", "List the notes tool's three commands (add, list, delete), one per line and nothing else.",
     "add\nlist\ndelete", [("contains", "add"), ("contains", "delete"), ("max_chars", 80)]),
    ("claude", "In two sentences, explain that the notes tool keeps short notes in a local SQLite file and runs no server.",
     "The notes tool stores short notes in a local SQLite file. It runs no server.",
     [("contains", "SQLite"), ("not_contains", "I cannot"), ("max_chars", 400)]),
    ("claude", "Which flag makes the notes CLI print every SQL statement it runs? It is --verbose. Reply with the flag.",
     "--verbose", [("contains", "--verbose"), ("max_chars", 60)]),
    ("codex", "Name the file that holds the notes tool's tests. Reply with the file name only: test_notes.py.",
     "test_notes.py", [("contains", "test_notes.py"), ("max_chars", 60)]),
    ("codex", "Give the one shell command that lists every note with the notes CLI (notes list), and nothing else.",
     "notes list", [("contains", "notes list"), ("max_chars", 60)]),
    ("claude", "Say in one sentence what `notes delete 3` does to the notes database.",
     "It deletes the note whose id is 3 from notes.db.", [("contains", "3"), ("contains", "delete"), ("max_chars", 200)]),
    ("claude", "Reply with the notes tool's licence name only; the LICENSE file says MIT.",
     "MIT", [("contains", "MIT"), ("max_chars", 20)]),
]  # fmt: skip


def swap(text: str, old_prompts: tuple[str, ...], prompt: str, reply: str, sid_old: str, sid_new: str) -> str:
    for old in old_prompts:
        text = text.replace(json.dumps(old)[1:-1], json.dumps(prompt)[1:-1])
    return text.replace(FIXTURE_REPLY, json.dumps(reply)[1:-1]).replace(sid_old, sid_new).replace("{PROJECT}", CWD)


def sessions(out: Path) -> list[MinedTask]:
    shutil.rmtree(out, ignore_errors=True)
    codex = sorted((REAL / "codex").rglob("*.jsonl"))
    claude = sorted((REAL / "claude").rglob("*.jsonl"))
    tasks = []
    for i, (src, prompt, reply, checks) in enumerate(SESSIONS):
        sid = str(uuid.UUID(int=0x5EED0000 + i))
        if src == "codex":
            f = codex[i % len(codex)]
            old_sid = f.stem[-36:]
            stamp = f"2026-11-2{i}T09-1{i}-00"
            dest = out / "codex" / "sessions" / "2026" / "11" / f"2{i}" / f"rollout-{stamp}-{sid}.jsonl"
            text = swap(f.read_text("utf-8"), CODEX_PROMPTS, prompt, reply, old_sid, sid)
            text = text.replace("2026-11-28T04:06", f"2026-11-2{i}T09:1{i}")
        else:
            f = claude[i % len(claude)]
            old_sid = f.stem
            dest = out / "claude" / "projects" / "-home-you-notes" / f"{sid}.jsonl"
            # Claude Code's request names the task file; the demo's sessions carry the request itself
            lines = []
            for line in f.read_text("utf-8").splitlines():
                r = json.loads(line)
                if r.get("type") == "user" and isinstance(r["message"]["content"], str):
                    r["message"]["content"] = prompt
                if r.get("type") == "queue-operation" and "content" in r:
                    r["content"] = prompt
                lines.append(json.dumps(r))
            text = swap("\n".join(lines) + "\n", (CLAUDE_PROMPT,), prompt, reply, old_sid, sid)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
        t = MinedTask(prompt, "chat", [{"op": op, "arg": arg} for op, arg in checks])
        t.sessions = [{"source": "codex" if src == "codex" else "claude_code", "id": sid}]
        t.outcome, t.miner = "satisfied", "reviewed by hand"
        tasks.append(t)
    return tasks


def main() -> None:
    tasks = sessions(HERE / "sessions")
    out = HERE / "tasks"
    shutil.rmtree(out, ignore_errors=True)
    splits = assign([t.id for t in tasks], {}, 0.34, 0.2)
    write_tasks(out, tasks, splits, HERE, {"project": "examples/sleep-demo", "harvested": "2026-11-28T12:00:00Z"})
    review = json.loads((out / "review.json").read_text())
    review.update(reviewed=True, reviewed_by="the demo's author: checks written by hand")
    (out / "review.json").write_text(json.dumps(review, indent=1) + "\n")
    print(f"{len(tasks)} sessions in {HERE / 'sessions'}, task folder {out}: {splits}")


if __name__ == "__main__":
    main()
