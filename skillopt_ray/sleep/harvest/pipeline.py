"""One harvest: the stores read, sessions mined into tasks, the task folder and the project's state written."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.io import atomic_write_text
from skillopt_ray.sleep.harvest import heuristic_miner as heuristic
from skillopt_ray.sleep.harvest import model_miner, recipe, splits, state, verify
from skillopt_ray.sleep.harvest.digest import SessionDigest
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.harvest.scope import Scope, Window
from skillopt_ray.sleep.harvest.stores import HarvestCounts, Stores, collect
from skillopt_ray.sleep.harvest.task_folder import Written, write_tasks
from skillopt_ray.sleep.harvest.tasks import MAX_PROMPT, MAX_RUBRIC, MinedTask
from skillopt_ray.sleep.harvest.timeutil import stamp, utc_now

DEFAULT_LOOKBACK = timedelta(hours=72)
REPORT_FILE = "harvest-report.json"


@dataclass
class HarvestOptions:
    project: Path
    stores: Stores = field(default_factory=Stores)
    scope: str = "invoked"
    lookback: Optional[timedelta] = None  # None with lookback_given: all of history
    lookback_given: bool = False
    output: Optional[Path] = None
    max_sessions: int = 120
    max_tasks: int = 40
    val_fraction: float = 0.34
    test_fraction: float = 0.2
    digest_host: str = ""  # a remote optimizer the user allowed this time (--send-digests): remembered
    min_selection: int = splits.VAL_FLOOR  # the fewest selection tasks the night's gate can accept on
    check_runner: Optional[verify.ReplyRunner] = None  # how reply checks are tried (None: the check sandbox)


def window_for(opts: HarvestOptions, st: state.HarvestState) -> tuple[Window, str]:
    """An explicit --lookback, else since the project's last harvest, else the last 72 hours; and which it is."""
    now = utc_now()
    if opts.lookback_given:
        return Window(now - opts.lookback if opts.lookback is not None else None, now), "--lookback"
    if st.last_harvest is not None:
        return Window(st.last_harvest, now), "since the last harvest (--lookback to choose)"
    return Window(now - DEFAULT_LOOKBACK, now), "the default 72h (first harvest)"


def dedup(tasks: list[MinedTask]) -> list[MinedTask]:
    """One task per normalised prompt, with the union of its source sessions (the first one's fields)."""
    by_id: dict[str, MinedTask] = {}
    for t in tasks:
        if t.id in by_id:
            have = by_id[t.id]
            have.sessions += [s for s in t.sessions if s not in have.sessions]
            if have.outcome == "unknown":
                have.outcome = t.outcome
        else:
            by_id[t.id] = t
    return list(by_id.values())


def too_few_note(opts: HarvestOptions, sessions: int, out: Path) -> Optional[str]:
    """Said before the model miner's first call, where the counts already tell: the task folder after this harvest
    holds at most the tasks already in it plus MAX_PER_SESSION per session (the night's selection split is part of
    it), and below the gate's floor no night on it can ever accept."""
    have = sum(1 for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")) if out.is_dir() else 0
    most = have + min(opts.max_tasks, model_miner.MAX_PER_SESSION * sessions)
    if most >= opts.min_selection:
        return None
    return (
        f"note: {sessions} session(s) and {have} task(s) already in {out} make at most {most} task(s), so a night "
        f"on them can never pass the gate (at least {opts.min_selection} validation tasks are needed, each counted "
        "once) and can only report: mining anyway, the tasks are kept for later nights (harvest more sessions, "
        "e.g. a longer --lookback)"
    )


def redact_task(t: MinedTask, redact: Redactor) -> MinedTask:
    """The model's reply is redacted again before it is written: it may repeat what it was never shown. Redacted
    whole, then cut (a cut first leaves part of a secret no pattern recognises)."""
    t.prompt, t.rubric = redact(t.prompt)[:MAX_PROMPT], redact(t.rubric)[:MAX_RUBRIC]
    t.checks = [{**c, "arg": redact(c["arg"])} if isinstance(c["arg"], str) else c for c in t.checks]
    return t


class HarvestReport(TypedDict):
    """What a harvest reports (numbers and paths only, never transcript text), written beside the state."""

    window: dict[str, Optional[str]]
    scope: str
    missing_stores: dict[str, str]
    files: dict[str, int]
    sessions: dict[str, int]
    sleep_sessions: int  # sessions whose every command was this tool's own (skipped)
    out_of_scope: int
    out_of_window: int
    duplicates: int
    unreadable: int
    unknown_kinds: dict[str, int]
    skipped_lines: dict[str, int]
    redactions: dict[str, int]
    mining: JSONObject
    output: str
    tasks_new: int
    tasks_kept: int
    splits: dict[str, int]
    empty_workspaces: dict[str, str]
    checks: dict[str, int]  # mined checks verified / unverified / dropped on their sessions' evidence


def mine(digests: list[SessionDigest], project: Path, llm: Any) -> tuple[list[MinedTask], JSONObject]:
    """The model miner when `llm` is given, else the heuristic one."""
    if llm is None:
        return [t for d in digests for t in heuristic.mine(d, project)], {"miner": "heuristic"}
    tasks, counts = asyncio.run(_mine_and_close(llm, digests, project))
    return tasks, {"miner": "model", **asdict(counts)}


async def _mine_and_close(llm: Any, digests: list[SessionDigest], project: Path) -> Any:
    try:
        return await model_miner.mine_all(llm, digests, project)
    finally:
        await llm.close()  # its HTTP clients belong to this event loop


def run(opts: HarvestOptions, llm: Any = None, redactor: Optional[Redactor] = None) -> HarvestReport:
    """The whole harvest; returns the report (numbers only, no transcript text), also written beside the state."""
    project = opts.project.resolve()
    st = state.load(project)
    window, why = window_for(opts, st)
    found = [p for p in opts.stores.homes().values() if p.is_dir()]
    redact = redactor or Redactor.from_environment()
    digests, counts = collect(opts.stores, Scope.of(project, opts.scope), window, redact, opts.max_sessions)
    out = opts.output or project / state.STATE_DIR / "tasks"
    note = too_few_note(opts, len(digests), out) if llm is not None else None
    if note:
        print(note, file=sys.stderr)
    tasks, miner = mine(digests, project, llm)
    tasks = dedup([redact_task(t, redact) for t in tasks])[: opts.max_tasks]
    recipe.verified(project, [t.workspace for t in tasks])
    reviews = verify.review_all(tasks, opts.check_runner, project)
    floor = opts.min_selection or splits.VAL_FLOOR  # no floor of the gate's own: the preset's
    assigned = splits.assign([t.id for t in tasks], st.splits, opts.val_fraction, opts.test_fraction, floor)
    header = {"project": str(project), "harvested": stamp(window.until), "sessions": len(digests)}
    written = write_tasks(out, tasks, assigned, project, header, reviews)
    st.splits.update(assigned)
    if found:  # a harvest that read no store leaves the next window where it was
        st.last_harvest = window.until
    st.harvests += 1
    if opts.digest_host and opts.digest_host not in st.digest_hosts:
        st.digest_hosts.append(opts.digest_host)
    state.save(project, st)
    report = _report(opts, window, counts, redact, miner, out, written, assigned)
    report["window"]["from"] = why if found else why + "; no session store found: window not moved"
    report["checks"] = {
        s: sum(1 for rs in reviews.values() for r in rs if r["status"] == s)
        for s in ("verified", "unverified", "dropped")
    }
    path = project / state.STATE_DIR / REPORT_FILE
    atomic_write_text(path, json.dumps(report, indent=1, sort_keys=True) + "\n")  # never into a planted hard link
    return report


def _report(
    opts: HarvestOptions,
    window: Window,
    counts: HarvestCounts,
    redact: Redactor,
    miner: JSONObject,
    out: Path,
    written: Written,
    assigned: dict[str, str],
) -> HarvestReport:
    return {
        "window": {"since": stamp(window.since) if window.since else None, "until": stamp(window.until)},
        "scope": opts.scope,
        "missing_stores": {s: str(p) for s, p in opts.stores.homes().items() if not p.is_dir()},
        "files": dict(counts.files),
        "sessions": dict(counts.sessions),
        "out_of_scope": counts.out_of_scope,
        "out_of_window": counts.out_of_window,
        "duplicates": counts.duplicates,
        "sleep_sessions": counts.sleep_sessions,
        "unreadable": counts.unreadable,
        "unknown_kinds": dict(counts.unknown_kinds),
        "skipped_lines": dict(counts.skipped_lines),
        "redactions": dict(redact.counts),
        "mining": miner,
        "output": str(out),
        "tasks_new": len(written.new),
        "tasks_kept": len(written.kept),
        "splits": {s: sum(1 for v in assigned.values() if v == s) for s in ("train", "val", "test")},
        "empty_workspaces": written.empty_workspaces,
        "checks": {},
    }
