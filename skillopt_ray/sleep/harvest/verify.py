"""Checks that are checked: a mined rule check is kept as `verified` only when it passes on the outcome the session
shows the user accepted and fails on one the user corrected. A check that a correct outcome fails, or that passes
on a corrected one, says nothing about the task and is dropped; one the session gives no evidence for either way is
kept and marked `unverified`. Each verdict, with its reason, goes into the task and the folder's review.json.

Reply checks run through the task's own check program in the same sandbox the night scores with (no network,
limits, no keys). A command check runs there too, on the workspace the user accepted and on one they corrected,
each rebuilt from the session's commit plus its edits up to that moment (replay.py); where that cannot be rebuilt
(no commit, an edit that cannot be replayed), it is judged by the session's own runs of that command."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_ray.sleep.harvest import recipe, replay
from skillopt_ray.sleep.harvest.digest import CommandRun, SessionDigest
from skillopt_ray.sleep.harvest.replay import FileEdit
from skillopt_ray.sleep.harvest.tasks import GENERIC_RUBRIC, TEXT_OPS, MinedTask, RuleCheck

REPLY_OPS = (*TEXT_OPS, "max_chars")
_LINE = re.compile(r"^(PASS|FAIL): check (\d+) ", re.M)


class CheckReview(TypedDict):
    """One mined check's verdict: verified, unverified (kept) or dropped, and why."""

    op: str
    arg: Any
    status: str
    reason: str


@dataclass
class Evidence:
    """What a session recorded of its outcomes: the reply the user accepted ("" when none), the replies they
    corrected, and the commands' exit statuses with the user turns that corrected."""

    accepted: str = ""
    corrected: list[str] = field(default_factory=list)
    runs: list[CommandRun] = field(default_factory=list)
    correction_turns: list[int] = field(default_factory=list)
    satisfied: bool = False
    accepted_turn: int = 0  # the user turn that thanked (0: none)
    edits: list[FileEdit] = field(default_factory=list)
    edits_whole: bool = False

    @staticmethod
    def of(d: SessionDigest) -> Evidence:
        return Evidence(
            d.accepted_reply, list(d.corrected_replies), list(d.runs), list(d.correction_turns), d.positive > 0,
            d.accepted_turn, list(d.edits), d.edits_whole,
        )  # fmt: skip


# runs the check program on a reply or a workspace: the checks -> one pass/fail per check, or why none could be had
ReplyRunner = Callable[[list[RuleCheck], Optional[str], Optional[Path]], "tuple[Optional[list[bool]], str]"]


def sandbox_runner(isolation: str = "bwrap", timeout_s: float = 150.0) -> ReplyRunner:
    """The task folder's check program run in the night's sandbox, on a reply or a workspace (a command check has
    up to 120 s): its PASS/FAIL line per check."""
    from skillopt_envs.custom.check import make_sandbox, run_check

    from skillopt_ray.sleep.harvest.task_folder import CHECK_PROGRAM

    sandbox = make_sandbox(isolation, timeout_s)

    def run(checks: list[RuleCheck], reply: Optional[str], ws: Optional[Path]) -> tuple[Optional[list[bool]], str]:
        out = run_check(sandbox, CHECK_PROGRAM, {"metadata": {"checks": checks}}, reply, ws)
        if out.infra or out.broken:
            return None, out.reason
        got = {int(n): verdict == "PASS" for verdict, n in _LINE.findall(out.output)}
        if sorted(got) != list(range(1, len(checks) + 1)):
            return None, "the check program's output did not name every check"
        return [got[n] for n in range(1, len(checks) + 1)], ""

    return run


def review_task(t: MinedTask, run: ReplyRunner, project: Path) -> list[CheckReview]:
    """Each of the task's checks judged on its session's evidence; dropped ones leave the task (a task left with
    no check is judged by its rubric)."""
    ev = t.evidence or Evidence()
    reply_checks = [c for c in t.checks if c["op"] in REPLY_OPS]
    verdicts = _reply_verdicts(reply_checks, ev, run)
    reviews: list[CheckReview] = []
    for c in t.checks:
        if c["op"] in REPLY_OPS:
            status, reason = verdicts[reply_checks.index(c)]
        elif c["op"] == "command_succeeds":
            status, reason = replay_verdict(c, t, project, run) or command_verdict(str(c["arg"]), ev)
        else:
            status, reason = "unverified", "a tool call is not replayed from the session"
        reviews.append({"op": c["op"], "arg": c["arg"], "status": status, "reason": reason})
    t.checks = [c for c, r in zip(t.checks, reviews) if r["status"] != "dropped"]
    if not t.checks and not t.rubric:
        t.rubric = GENERIC_RUBRIC
    return reviews


def _reply_verdicts(checks: list[RuleCheck], ev: Evidence, run: ReplyRunner) -> list[tuple[str, str]]:
    if not checks:
        return []
    if not ev.accepted and not ev.corrected:
        return [("unverified", "the session recorded no reply the user accepted or corrected")] * len(checks)
    on_accepted: Optional[list[bool]] = None
    if ev.accepted:
        on_accepted, why = run(checks, ev.accepted, None)
        if on_accepted is None:
            return [("unverified", f"could not run the check program: {why}")] * len(checks)
    on_corrected: list[list[bool]] = []
    for reply in ev.corrected:
        got, why = run(checks, reply, None)
        if got is None:
            return [("unverified", f"could not run the check program: {why}")] * len(checks)
        on_corrected.append(got)
    return [
        reply_verdict(on_accepted[i] if on_accepted else None, [c[i] for c in on_corrected], on_accepted is not None)
        for i in range(len(checks))
    ]


def reply_verdict(
    passes_accepted: Optional[bool], passes_corrected: list[bool], had_accepted: bool, what: str = "reply"
) -> tuple[str, str]:
    """One check's verdict from its pass/fail on the accepted outcome (a reply, or a workspace) and on each
    corrected one."""
    if had_accepted and not passes_accepted:
        return "dropped", f"it fails on the {what} the user accepted"
    if passes_corrected and all(passes_corrected):
        return "dropped", f"it passes on the {what} the user corrected: it does not tell good from bad"
    if not had_accepted:
        return "unverified", f"it fails on the corrected {what}, but the session recorded none the user accepted"
    if not passes_corrected:
        return "unverified", f"it passes on the accepted {what}, but the session recorded no corrected one"
    return "verified", f"it passes on the {what} the user accepted and fails on one they corrected"


WORKSPACE = "workspace (the session's commit and its edits, replayed)"


def replay_verdict(c: RuleCheck, t: MinedTask, project: Path, run: ReplyRunner) -> Optional[tuple[str, str]]:
    """A command check tried in the sandbox on the workspace the user accepted, on each they corrected and on the
    one before the session's edits (the work not done); None when the session recorded no accepted workspace or it
    cannot be rebuilt (then the session's own runs of the command decide)."""
    ev = t.evidence or Evidence()
    if t.workspace.get("kind") != "git" or not ev.edits_whole or not ev.edits or not ev.accepted_turn:
        return None
    got: list[bool] = []
    for turn in [ev.accepted_turn, *ev.correction_turns, 1]:  # turn 1 is the first request: no edit before it
        res = _on_workspace(c, t, project, ev.edits, turn, run)
        if res is None:
            return None
        got.append(res)
    accepted, corrected, before = got[0], got[1:-1], got[-1]
    status, reason = reply_verdict(accepted, corrected, True, WORKSPACE)
    if status != "unverified":
        return status, reason
    if before:
        return "unverified", "it passes before the session's edits too: it may pass with the work not done"
    return "verified", f"it passes on the {WORKSPACE} the user accepted and fails before the session's edits"


def _on_workspace(
    c: RuleCheck, t: MinedTask, project: Path, edits: list[FileEdit], turn: int, run: ReplyRunner
) -> Optional[bool]:
    """Whether the check passes on the session's workspace as it was when the user typed turn `turn`."""
    with tempfile.TemporaryDirectory(prefix="skillopt-replay-") as tmp:
        ws = Path(tmp) / "workspace"
        try:
            if recipe.materialise(project, t.workspace, ws):
                return None  # too big to rebuild
            replay.replayed(ws, edits, turn)
        except (ValueError, OSError):
            return None
        res, _why = run([c], None, ws)
    return None if res is None else res[0]


def command_verdict(command: str, ev: Evidence) -> tuple[str, str]:
    """A command check judged by the session's runs of that same command: it must have failed on work the user
    then corrected (or before the fix) and passed at the end."""
    want = " ".join(command.split())
    runs = [r for r in ev.runs if " ".join(r["command"].split()) == want]
    if not runs:
        return "unverified", "the session never ran this command"
    for t in ev.correction_turns:
        before = [r for r in runs if r["turn"] == t - 1]
        if before and before[-1]["ok"]:
            return "dropped", "it passed in the session on work the user then corrected"
    if ev.satisfied and not runs[-1]["ok"]:
        return "dropped", "its last run in the session, on the work the user accepted, failed"
    if not runs[-1]["ok"]:
        return "unverified", "its last run in the session failed"
    fixed = any(not r["ok"] for r in runs[:-1])
    if fixed:
        return "verified", "in the session it failed, then passed on the work the user kept"
    return "unverified", "the session never recorded it failing: it may pass before the work is done"


def review_all(tasks: list[MinedTask], run: Optional[ReplyRunner], project: Path) -> dict[str, list[CheckReview]]:
    """Every task's check verdicts (tasks without checks are left out); `run` None: the check sandbox, made once
    it is first needed."""
    out: dict[str, list[CheckReview]] = {}
    made: list[ReplyRunner] = []

    def lazy(checks: list[RuleCheck], reply: Optional[str], ws: Optional[Path]) -> tuple[Optional[list[bool]], str]:
        if not made:
            made.append(run or sandbox_runner())
        return made[0](checks, reply, ws)

    for t in tasks:
        if t.checks:
            out[t.id] = t.check_review = review_task(t, lazy, project)
    return out
