"""A night over the skills you already use: each installed skill the harvested tasks exercised is trained on its own
tasks with its own run and gate (starting from its live SKILL.md, proposed back into its own folder), tasks that
exercised none train the learned skill, and all are staged as one night (staging_skills.py: one manifest, adopted
or undone per skill or all at once; with --memory, a memory file with a block per changed skill, an entry of its
own). The night's caps hold for all its runs together: each run gets what the earlier ones left."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK
from skillopt_ray.cli import review_gate as review
from skillopt_ray.runs.rundir import RunDir
from skillopt_ray.sleep.harvest.state import STATE_DIR
from skillopt_ray.sleep.night import runner
from skillopt_ray.sleep.night import state as night_state
from skillopt_ray.sleep.night.runner import Concluded, NightOptions, conclude, plan, proposal_of, train
from skillopt_ray.sleep.night.skill_routes import Route, routes_of


def night(opts: NightOptions, harvest: Any) -> int:
    """`run` / `dry-run`: without --skill, tasks whose sessions used an installed skill train that skill (each on
    its own tasks and gate, staged as one night); with --skill, or when no task used one, runner.py's night of one
    skill on every task."""
    tasks, run_name, resumed = runner.start(opts, harvest)
    routes = routes_of(opts.project, opts.target, tasks, opts.name) if opts.skill is None else []
    if routes:
        return run(opts, tasks, run_name, resumed, routes)
    return runner.run_started(opts, tasks, run_name, resumed)


def task_folder(opts: NightOptions, tasks: Path, run_name: str, route: Route) -> Path:
    """The route's tasks as a task folder of their own (copies of the night's task folders and its review.json: the
    custom-task loader and the review gate read it as they read the whole folder). Copies, not hard links: a file
    with a second name is refused by the careful reader, and a write into one would change the night's own tasks."""
    out = opts.project / STATE_DIR / "nights" / f"{run_name}.skills" / route.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for tid in route.tasks:
        shutil.copytree(tasks / tid, out / tid, symlinks=True)
    if (tasks / review.REVIEW_FILE).is_file():
        shutil.copyfile(tasks / review.REVIEW_FILE, out / review.REVIEW_FILE)
    return out


def options_for(opts: NightOptions, route: Route, sub: Path, spent: dict[str, float], t0: float) -> NightOptions:
    """The route's night: its skill (the live one it starts from and is proposed back to) and the caps' remainder."""
    tokens = int(max(1, opts.max_tokens - spent["tokens"])) if opts.max_tokens else 0
    cost = max(1e-9, opts.max_cost - spent["cost_usd"]) if opts.max_cost else 0.0
    minutes = max(1e-3, opts.max_minutes - (time.monotonic() - t0) / 60) if opts.max_minutes else 0.0
    skill = route.live if route.live is not None else opts.skill
    name = route.name if route.live is not None else opts.name
    return dataclasses.replace(
        opts, tasks=sub, skill=skill, name=name, memory=False, max_tokens=tokens, max_cost=cost, max_minutes=minutes
    )


def run(opts: NightOptions, tasks: Path, run_name: str, resumed: bool, routes: list[Route]) -> int:
    """Every route's run in turn, then one staged night; a budget stop keeps the night current to be resumed."""
    if opts.i_reviewed and review.read(tasks).get("reviewed") is False:
        review.write(tasks, {**review.read(tasks), "reviewed": True, "reviewed_by": "--i-reviewed"})
    print(f"night {run_name}: {len(routes)} skills, each on its own tasks and gate: "
          + ", ".join(f"{r.name} ({len(r.tasks)} tasks{', from ' + str(r.live) if r.live else ''})" for r in routes),
          file=sys.stderr)  # fmt: skip
    remember(opts, run_name, tasks, resumed)
    spent = {"tokens": 0.0, "cost_usd": 0.0}
    t0 = time.monotonic()
    done: list[tuple[NightOptions, Concluded]] = []
    for route in routes:
        sub = task_folder(opts, tasks, run_name, route)
        ropts = options_for(opts, route, sub, spent, t0)
        try:
            p = plan(ropts, sub, f"{run_name}-{route.name}", resumed)
        except ValueError as e:
            print(f"skill {route.name}: left out of the night: {e}", file=sys.stderr)
            continue
        code, run_dir = train(ropts, p)
        if run_dir is None:
            return code
        totals = (RunDir(run_dir).read_ledger() or {}).get("totals") or {}
        spent["tokens"] += float(totals.get("tokens") or 0)
        spent["cost_usd"] += float(totals.get("cost_usd") or 0.0)
        c = conclude(ropts, p, run_dir)
        if c is None:
            print(f"skill {route.name}: left out of the night (none of its episodes was scored)", file=sys.stderr)
        else:
            done.append((ropts, c))
    return finish(opts, run_name, done)


def memory_of(opts: NightOptions, done: list[tuple[NightOptions, Concluded]]) -> Optional[tuple[str, Path]]:
    """With --memory, the memory file with a marked block per changed skill holding its learned body (None without
    the flag or a changed skill); a block's markers that cannot be edited safely refuse the staging (ValueError)."""
    from skillopt_ray.sleep.proposal import memory, skill_home

    changed = [c for _, c in done if c.rep.changed]
    if not opts.memory or not changed:
        return None
    path = memory.memory_path(opts.project, opts.target)
    text = memory.read_live(path)
    for c in changed:
        name = c.folder.name
        text = memory.propose(
            text, name, skill_home.parse((c.folder / "SKILL.md").read_text(encoding="utf-8"), name).body
        )
    return text, path


def remember(opts: NightOptions, run_name: str, tasks: Path, resumed: bool) -> None:
    if opts.dry_run or resumed:
        return
    st = night_state.load(opts.project)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    st.current = night_state.Current(run_name, str(tasks), now)
    night_state.save(opts.project, st)


def finish(opts: NightOptions, run_name: str, done: list[tuple[NightOptions, Concluded]]) -> int:
    """The night's skills staged as one (unless a dry run); the state lets the night go."""
    from skillopt_ray.sleep.proposal import staging
    from skillopt_ray.sleep.proposal.staging_skills import stage_skills

    st = night_state.load(opts.project)
    if not done:
        st.current = None
        night_state.save(opts.project, st)
        print("error: no skill of the night could be trained and scored; nothing staged", file=sys.stderr)
        return EXIT_ERROR
    if opts.dry_run:
        print("dry run: nothing staged (the proposals are in " + ", ".join(str(c.folder) for _, c in done) + ")")
        return EXIT_OK
    for _, c in done:
        st.val_looks[c.fingerprint] = c.looks
    st.nights += 1
    st.current = None
    stamp = run_name.removeprefix("night-")
    where = staging.staging_root(opts.project) / stamp
    code = EXIT_OK
    if not (where / staging.MANIFEST).is_file():  # else staged before a kill stopped the night: not twice
        props = [proposal_of(o, stamp, c.folder, c.live, c.rep, c.flags) for o, c in done]
        md = f"# Night {run_name}\n\n" + "\n".join(p.report_md for p in props)
        try:
            stage_skills(opts.project, stamp, props, md, memory_of(opts, done))
        except (ValueError, OSError) as e:
            print(f"error: staging refused the night: {e}", file=sys.stderr)
            code = EXIT_CONFIG
    night_state.save(opts.project, st)
    if code == EXIT_OK:
        changed = [c.folder.name for _, c in done if c.rep.changed]
        print(f"staged in {where} ({', '.join(changed) or 'no skill'} changed); adopt all with: python -m "
              f"skillopt_ray.sleep adopt --project {opts.project}, or one with --skill NAME")  # fmt: skip
        if opts.auto_adopt and changed and any(c.flags for _, c in done):
            print("not adopted: a skill of the night is flagged; read it, then adopt with --allow-flagged",
                  file=sys.stderr)  # fmt: skip
        elif opts.auto_adopt and changed:
            code = runner.auto_adopt(opts, where)
    return code
