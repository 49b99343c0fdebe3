#!/usr/bin/env python3
"""The check of a harvested task, copied into each task folder as check.py (it runs in the sandbox, stdlib only).

Run as `check.py <task.json> <workspace or reply.txt>`. It runs the task's rule checks (metadata.checks) on the reply
(reply.txt) and the workspace, prints each failure in words (never a check's pattern: what the analysts read must
not be something a rule could copy), then the share passed. A task with no rule check it can run (a rubric only,
judged by the optimizer) prints why and no score, so it counts as a data error, never as a 0 that looks real."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

COMMAND_TIMEOUT_S = 120
SAID = {
    "contains": "the reply must contain a phrase the task requires",
    "not_contains": "the reply must not contain a phrase the task forbids",
    "regex": "the reply must have a form the task requires",
    "section_present": "the reply must have a section the task requires",
    "max_chars": "the reply must be short enough",
}


def _section(reply: str, name: str) -> bool:
    """A markdown heading, bold line or `Name:` label with that name."""
    want = name.strip().strip("#*: ").lower()
    for line in reply.splitlines():
        s = line.strip().lstrip("#").strip().strip("*").strip().rstrip(":").strip().lower()
        if s == want:
            return True
    return False


def _text_check(op: str, arg, reply: str) -> bool:
    if op == "contains":
        return arg.lower() in reply.lower()
    if op == "not_contains":
        return arg.lower() not in reply.lower()
    if op == "regex":
        try:
            return re.search(arg, reply, re.MULTILINE) is not None
        except re.error:
            return False
    if op == "section_present":
        return _section(reply, arg)
    return len(reply) <= int(arg)  # max_chars


def _command(cmd: str, workspace: Path) -> tuple[bool, str]:
    try:
        p = subprocess.run(
            ["sh", "-c", cmd], cwd=workspace, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"did not finish in {COMMAND_TIMEOUT_S} s"
    tail = (p.stdout + p.stderr).strip()[-1200:]
    return p.returncode == 0, f"exit status {p.returncode}\n{tail}"


def main(argv: list[str]) -> int:
    task = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    where = Path(argv[2])
    workspace = where if where.is_dir() else where.parent
    reply_file = where / "reply.txt" if where.is_dir() else where
    reply = reply_file.read_text(encoding="utf-8", errors="replace") if reply_file.is_file() else None
    checks = (task.get("metadata") or {}).get("checks") or []
    passed = total = 0
    for n, c in enumerate(checks, start=1):
        op, arg = c.get("op"), c.get("arg")
        if op == "command_succeeds":
            ok, said = _command(str(arg), workspace)
            print(("PASS" if ok else "FAIL") + f": check {n} (the command `{arg}` must succeed): {said}")
        elif op in SAID:
            if reply is None:
                print(f"FAIL: check {n} ({SAID[op]}): there is no reply.txt to read")
                ok = False
            else:
                ok = _text_check(op, arg, reply)
                print(("PASS" if ok else "FAIL") + f": check {n} ({SAID[op]})")
        else:
            print(f"note: check {n} ({op}) is judged by the runner, not here")
            continue
        total += 1
        passed += ok
    if total == 0:
        print("no rule check to run here: this task is judged by its rubric (skillopt_ray.sleep run)")
        return 0
    print(f"{passed / total:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
