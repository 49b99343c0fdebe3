"""One night: the night's task folder (a fresh harvest, or --tasks) trained on by the runner's own loop with the
`+experiment=sleep` preset (one run, one MLflow run, its gate), then the best skill written as a real agent skill
and handed to staging. No second optimizer: the night is a run, and resumes after a kill like any run."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.base.io import atomic_write_text
from skillopt_ray.cli import review_gate as review
from skillopt_ray.cli.preflight import Checked
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.runs.rundir import RunDir
from skillopt_ray.sleep.harvest.state import STATE_DIR
from skillopt_ray.sleep.night import scorable, settings
from skillopt_ray.sleep.night import state as night_state
from skillopt_ray.sleep.night.estimate import Estimate
from skillopt_ray.sleep.night.report import NightReport, build_report, write_report
from skillopt_ray.sleep.night.scorable import FolderTasks
from skillopt_ray.sleep.proposal import skill_home

# a budget's config key -> the flag that sets it, to say which cap stopped a night
CAP_FLAGS = {
    "llm.budget.max_tokens": "--max-tokens",
    "llm.budget.max_cost_usd": "--max-cost",
    "llm.budget.max_minutes": "--max-minutes",
    "llm.budget.max_calls": "llm.budget.max_calls",
}


@dataclass
class NightOptions:
    project: Path
    tasks: Optional[Path] = None  # a reviewed task folder; None: harvest one now
    target: str = "chat"
    skill: Optional[Path] = None  # a hand-written SKILL.md to start from
    name: str = skill_home.DEFAULT_NAME
    install_to: str = "project"
    max_tokens: int = 0
    max_cost: float = 0.0
    max_minutes: float = 0.0
    i_reviewed: bool = False
    dry_run: bool = False
    val_looks_max: int = 5
    overrides: list[str] = field(default_factory=list)
    memory: bool = False  # also propose the rules as a marked block of AGENTS.md / CLAUDE.md
    argv: list[str] = field(default_factory=list)  # `run`'s arguments, kept for `schedule` (settings.py)
    auto_adopt: bool = False  # adopt a night the gate accepted on its own validation tasks


@dataclass
class Plan:
    """A night's run before it starts: its name, task folder, composed config and what it will play."""

    run_name: str
    tasks: Path
    overrides: list[str]
    checked: Checked  # the night's run config after every check (cli.preflight), the review gate included
    splits: dict[str, list[str]]
    resumed: bool
    estimate: Optional[Estimate] = None
    left_out: dict[str, str] = field(default_factory=dict)  # task id -> "<split>: why it cannot be scored"

    @property
    def data(self) -> PlainConfig:
        return self.checked.data


def check_scorable(tasks: Path, found: FolderTasks) -> None:
    """Tasks that cannot be scored are left out, one line each; a night with no scorable train or val task spends
    nothing (every episode would be a data error, never a real 0)."""
    for tid, why in sorted(found.left_out.items()):
        split, _, reason = why.partition(": ")
        print(f"left out {tid} ({split}): {reason}", file=sys.stderr)
    if not found.splits["train"] and not found.splits["val"]:
        fix = "mine with a model (e.g. llm=local) or add checks to the tasks' task.json" if found.left_out else (
            "harvest more sessions or give another --tasks folder"
        )  # fmt: skip
        raise ValueError(
            f"{tasks} holds no train or val task that can be scored ({len(found.left_out)} left out); {fix}"
        )


def quoted(value: str) -> str:
    """A Hydra override value taken literally: spaces, commas, brackets, `=` and quotes in a project's path."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides_for(
    opts: NightOptions, run_name: str, tasks: Path, splits: dict[str, list[str]], init: Optional[Path],
    left_out: Optional[list[str]] = None,
) -> list[str]:  # fmt: skip
    """The run's Hydra overrides: the preset, the folder (less the tasks left out), the night's name, the project's
    MLflow experiment, the budgets, the target; the user's own model settings last (they win)."""
    out = [
        "+experiment=sleep",
        f"env.data_dir={quoted(str(tasks))}",
        f"run_name={run_name}",
        f"output_dir={quoted(str(opts.project / STATE_DIR / 'nights'))}",
        f"tracking.experiment_name={quoted('sleep-' + opts.project.resolve().name)}",
        f"llm.budget.max_tokens={opts.max_tokens}",
        f"llm.budget.max_cost_usd={opts.max_cost}",
        f"llm.budget.max_minutes={opts.max_minutes}",
        "debug.progress=off",
    ]
    if left_out:
        out.append(f"env.options.exclude=[{','.join(quoted(t) for t in left_out)}]")
    if not splits["val"]:  # nothing held out: the gate borrows the train split, and the night is unverified
        out.append("env.selection_split=train")
    if not splits["test"]:  # the run's closing test needs tasks: the selection's (its score says nothing new)
        out.append(f"env.test_split={'val' if splits['val'] else 'train'}")
    if opts.target != "chat":
        out.append(f"llm.target.harness={opts.target}")
    if init is not None:
        out.append(f"skill_init={quoted(str(init))}")
    return out + list(opts.overrides)


def starting_skill(opts: NightOptions) -> Optional[Path]:
    """The skill a night trains from: --skill, else the learned skill already installed where this night would
    propose it (a later night builds on the one you adopted), else None (the empty seed)."""
    if opts.skill is not None:
        return opts.skill
    live = skill_home.live_path(opts.project, opts.target, opts.install_to, opts.name)
    return live if live.is_file() and not live.is_symlink() else None


def plan(opts: NightOptions, tasks: Path, run_name: str, resumed: bool) -> Plan:
    from skillopt_ray import cli

    found = scorable.read_folder(tasks)
    check_scorable(tasks, found)
    splits = found.splits
    init = None
    source = starting_skill(opts)
    if source is not None:
        init = opts.project / STATE_DIR / "nights" / f"{run_name}.start.md"
        init.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(init, skill_home.parse(source.read_text(encoding="utf-8"), opts.name).body)
    ov = overrides_for(opts, run_name, tasks, splits, init, sorted(found.left_out))
    config = cli.compose(ov)
    if opts.i_reviewed and review.read(tasks).get("reviewed") is False:  # the person says so: the run's check agrees
        review.write(tasks, {**review.read(tasks), "reviewed": True, "reviewed_by": "--i-reviewed"})
    # the review gate: once, in preflight
    return Plan(run_name, tasks, ov, cli.preflight(config), splits, resumed, left_out=found.left_out)


def spend_line(p: Plan, opts: NightOptions) -> str:
    """What the night will play and the caps on what it may spend, said before anything is spent."""
    o = p.data["optimizer"]
    caps = [
        f"{v} {unit}" for v, unit in ((opts.max_tokens, "tokens"), (opts.max_cost, "USD"), (opts.max_minutes, "minutes"))
        if v
    ]  # fmt: skip
    from skillopt_ray.sleep.night.estimate import gate_extra

    n_sel = len(p.splits["val"] or p.splits["train"])
    first = len(p.splits["train"]) + 2 * n_sel * o["rollouts_per_task"]
    extra = gate_extra(p.data, n_sel, n_sel * o["rollouts_per_task"])  # the gate's own rule: 0 where it plays none
    return (
        f"night {p.run_name}{' (resumed)' if p.resumed else ''}: {len(p.splits['train'])} train, "
        f"{len(p.splits['val'])} val, {len(p.splits['test'])} test tasks from {p.tasks}; at least {first} episodes "
        f"plus up to {extra} more a gate where its decision is close, and a few optimizer calls a step; "
        f"caps: {', '.join(caps) or 'none (give --max-tokens, --max-cost, --max-minutes)'}"
    )


def too_few_line(p: Plan) -> Optional[str]:
    """Said before anything is spent: a selection split too small for the sequential gate ever to accept (each task
    is one observation; stages/sequential_gate.py)."""
    from skillopt_ray.stages.sequential_gate import SequentialRule

    o = p.data["optimizer"]
    if o.get("gate_test") not in ("sequential", "auto"):
        return None
    need = SequentialRule(task_p=float(o.get("gate_seq_task_p", 0.1))).min_tasks
    n = len(p.splits["val"] or p.splits["train"])
    if n >= need:
        return None
    return (
        f"note: {n} selection task(s) can never pass the gate (each task counts once: at least {need} are needed); "
        "this night can only report, never change the skill: harvest more sessions or raise --val-fraction"
    )


def say_estimate(opts: NightOptions, p: Plan) -> None:
    """The night's estimated spend (skillopt_ray.sleep.night.estimate), printed before the run makes any model call."""
    from skillopt_ray.sleep.night import estimate

    source = starting_skill(opts)  # its body is in every prompt
    chars = len(skill_home.parse(source.read_text(encoding="utf-8")).body.strip()) if source else 0
    p.estimate = estimate.estimate(p.data, p.splits, p.tasks, chars)
    for line in p.estimate.lines(opts.max_tokens, opts.max_cost):
        print(line, file=sys.stderr)


def stopped_by(message: str) -> str:
    for key, flag in CAP_FLAGS.items():
        if key in message:
            return flag
    return ""


def start(opts: NightOptions, harvest: Any) -> tuple[Path, str, bool]:
    """The night's task folder and run name: the unfinished night's when there is one (a kill resumes it), else
    a new night on --tasks or on a fresh harvest (`harvest()` returns its folder)."""
    st = night_state.load(opts.project)
    if st.current is not None and (opts.tasks is None or Path(st.current.tasks) == opts.tasks.resolve()):
        return Path(st.current.tasks), st.current.run_name, True
    tasks = (opts.tasks or harvest()).resolve()
    return tasks, f"night-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}", False


def remember(opts: NightOptions, p: Plan) -> None:
    """The night in progress, once its config is known to be good: a kill from here on resumes it."""
    if opts.dry_run or p.resumed:
        return
    st = night_state.load(opts.project)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    st.current = night_state.Current(p.run_name, str(p.tasks), now)
    night_state.save(opts.project, st)


def run_night(opts: NightOptions, harvest: Any) -> int:
    """The whole night; returns the exit code. Budget stops (exit 3) keep the night current, to be resumed."""
    return run_started(opts, *start(opts, harvest))


def run_started(opts: NightOptions, tasks: Path, run_name: str, resumed: bool) -> int:
    """The night on its task folder and name (start()): one run training one skill on every task."""
    p = plan(opts, tasks, run_name, resumed)
    remember(opts, p)
    code, run_dir = train(opts, p)
    return finish(opts, p, run_dir) if run_dir is not None else code


def train(opts: NightOptions, p: Plan) -> tuple[int, Optional[Path]]:
    """The night's run, its spend said first: (exit code, its run directory when it finished)."""
    from skillopt_ray.cli import execute
    from skillopt_ray.cli.report import report

    if opts.argv and not opts.dry_run:  # the settings proved good: `schedule` repeats this night
        settings.save(opts.project, opts.argv, Path.cwd(), p.data.get("llm"))
    print(spend_line(p, opts), file=sys.stderr)
    few = too_few_line(p)
    if few:
        print(few, file=sys.stderr)
    say_estimate(opts, p)
    outcome = execute(p.checked, None, {"overrides": p.overrides})
    code = report(outcome)
    if code != EXIT_OK:
        message = str(outcome.get("message") or "")
        flag = stopped_by(message)
        if flag:
            print(
                f"the night stopped at its {flag} cap; nothing staged; rerun the same command to resume",
                file=sys.stderr,
            )
        elif any(w in message for w in ("disk is full", "No space left on device", "Disk quota exceeded")):
            print("the disk is full: free space, then rerun the same command to resume", file=sys.stderr)
        return (code if code != EXIT_OK else EXIT_STOPPED), None
    return EXIT_OK, Path(outcome["run_dir"])


def never_scored(run_dir: Path) -> bool:
    """Every evaluation the run made scored no task (data errors only): its zeros are not results."""
    evals = RunDir(run_dir).scores().values()
    return bool(evals) and all(not e.n_scored for e in evals)


def _judge_errors(run_dir: Path) -> int:
    """Unusable judge replies the run counted (judge.json), 0 without a judge."""
    from skillopt_ray.runs.rundir import RunDir

    j = RunDir(run_dir).read_judge()
    return int(j.get("score_errors") or 0) + int(j.get("pair_errors") or 0)


@dataclass
class Concluded:
    """A finished night's run as a proposal: the SKILL.md folder written, where it would go, its report."""

    folder: Path
    live: Path
    rep: NightReport
    fingerprint: str  # of the validation set that decided it
    looks: int
    flags: list[str] = field(default_factory=list)  # why its added rules need a person's eyes (screen_rules)


def conclude(opts: NightOptions, p: Plan, run_dir: Path) -> Optional[Concluded]:
    """The best skill as SKILL.md and the report, printed; None (said in one line) when no episode was scored."""
    st = night_state.load(opts.project)
    if never_scored(run_dir):
        judge = _judge_errors(run_dir)
        why = f"the judge's replies were unusable {judge} times" if judge else "every check a data error"
        print(f"error: no episode of the night could be scored ({why}: {run_dir / 'steps'}); "
              "nothing staged", file=sys.stderr)  # fmt: skip
        return None
    fp = night_state.val_fingerprint(p.splits["val"] or p.splits["train"])
    looks = st.val_looks.get(fp, 0) + 1
    source = starting_skill(opts)
    start_text = source.read_text(encoding="utf-8") if source else ""
    doc = skill_home.parse(start_text, opts.name)
    best = RunDir(run_dir).best_skill_path.read_text(encoding="utf-8")
    live = skill_home.live_path(opts.project, opts.target, opts.install_to, doc.name, opts.skill)
    folder = run_dir / "night" / "skill" / skill_home.check_name(doc.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(doc.text(skill_home.without_seed(best)), encoding="utf-8")
    rep = build_report(run_dir, p.run_name, p.splits, looks, opts.val_looks_max, borrowed=not p.splits["val"])
    rep.left_out = dict(p.left_out)
    rep.live_path, rep.proposed = str(live), str(folder / "SKILL.md")
    write_report(run_dir / "night", rep)
    print(rep.summary())
    say_spent(p, run_dir)
    flags = screen_rules(start_text, folder / "SKILL.md", p.tasks) if rep.changed else []
    return Concluded(folder, live, rep, fp, looks, flags)


def screen_rules(start_text: str, proposed: Path, tasks: Path) -> list[str]:
    """Why the night's added rules need a person's eyes (guard.screen_rules), against the task folder's requests."""
    from skillopt_ray.sleep.harvest import guard

    prompts = [f.read_text(encoding="utf-8", errors="replace")[:20_000] for f in sorted(tasks.glob("*/task.md"))]
    return guard.screen_rules(start_text, proposed.read_text(encoding="utf-8"), guard.suspect_sentences(prompts))


def finish(opts: NightOptions, p: Plan, run_dir: Path) -> int:
    """The best skill as SKILL.md, the report, the state, and (unless a dry run) the staged proposal."""
    c = conclude(opts, p, run_dir)
    st = night_state.load(opts.project)
    if c is None:
        st.current = None  # the night ran to its end: a rerun would only repeat it
        night_state.save(opts.project, st)
        return EXIT_ERROR
    if opts.dry_run:
        print(f"dry run: nothing staged (the proposal is in {c.folder})")
        return EXIT_OK
    from skillopt_ray.sleep.proposal import staging

    # staged before the state lets the night go, so a kill while staging resumes it; a kill after staging and before
    # the save resumes a night already staged (whole, by its manifest), which is not staged twice
    done = staging.staging_root(opts.project) / p.run_name.removeprefix("night-") / staging.MANIFEST
    if done.is_file():
        print(f"staged in {done.parent} before a kill stopped the night; adopt it with: "
              f"python -m skillopt_ray.sleep adopt --project {opts.project}")  # fmt: skip
        code = EXIT_OK
    else:
        try:
            code = stage(opts, p, c)
        except OSError as e:  # a full disk: the night stays current, its run finished, so a rerun pays nothing again
            print(f"error: staging the night failed ({e}); nothing is lost: free the space and rerun the same "
                  "command to resume (the night's calls are not paid again)", file=sys.stderr)  # fmt: skip
            return EXIT_ERROR
    st.val_looks[c.fingerprint] = c.looks
    st.nights += 1
    st.current = None
    night_state.save(opts.project, st)
    return code


def say_spent(p: Plan, run_dir: Path) -> None:
    """What the night spent beside its estimate, printed and kept as night/estimate.json."""
    from skillopt_ray.runs.rundir import RunDir
    from skillopt_ray.sleep.night import estimate

    if p.estimate is None:
        return
    totals = (RunDir(run_dir).read_ledger() or {}).get("totals") or {}
    print(f"  {estimate.compare(p.estimate, totals)}")
    out = p.estimate.as_dict() | {"spent": {k: totals.get(k) for k in ("calls", "tokens", "cost_usd")}}
    atomic_write_text(run_dir / "night" / "estimate.json", json.dumps(out, indent=1, sort_keys=True) + "\n")


def memory_proposal(opts: NightOptions, name: str, skill_md: Path) -> Optional[tuple[str, Path]]:
    """With --memory, the memory file with the learned skill's body in its marked block (None without the flag)."""
    if not opts.memory:
        return None
    from skillopt_ray.sleep.proposal import memory

    body = skill_home.parse(skill_md.read_text(encoding="utf-8"), name).body
    return memory.proposal(opts.project, opts.target, name, body)


def proposal_of(
    opts: NightOptions, stamp: str, folder: Path, live: Path, rep: NightReport, flags: Optional[list[str]] = None
) -> Any:
    """What staging needs of one trained skill (a staging.NightProposal); its skill root is the folder that holds
    the skill's folder: adoption may write only under it."""
    from skillopt_ray.sleep.proposal import staging

    return staging.NightProposal(
        project=opts.project,
        stamp=stamp,
        skill_name=folder.name,
        proposed_skill_dir=folder,
        live_skill_dir=live.parent,
        skill_roots=[live.parent.parent],
        report_md=(folder.parent.parent / "report.md").read_text(encoding="utf-8"),
        report=rep.as_dict(),
        evidence_dir=Path(rep.run_dir) / "steps",
        flags=list(flags or []),
    )


def stage(opts: NightOptions, p: Plan, c: Concluded) -> int:
    """Hand every finished night to staging, also one whose gate accepted nothing (staged `changed: false`, for
    `status` to show and `adopt` to refuse), so each night leaves its report where you look for it. A night whose
    added rules were flagged (c.flags) is staged flagged: adopt then needs --allow-flagged. An OSError (a full disk)
    propagates: the night stays current."""
    from skillopt_ray.sleep.proposal import staging

    folder, live, rep = c.folder, c.live, c.rep

    try:
        mem = memory_proposal(opts, folder.name, folder / "SKILL.md") if rep.changed else None
    except ValueError as e:
        print(f"error: staging refused the night's memory block: {e}", file=sys.stderr)
        return EXIT_CONFIG
    proposal = proposal_of(opts, p.run_name.removeprefix("night-"), folder, live, rep, c.flags)
    proposal.memory = mem
    try:
        where = staging.stage_night(proposal)
    except ValueError as e:
        print(f"error: staging refused the night: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if not rep.changed:
        if staging.first_install(staging.load_manifest(where)):
            print(f"staged in {where} (changed nothing: no candidate skill passed the gate; no skill is live yet, so "
                  f"adopting installs the one it started from: python -m skillopt_ray.sleep adopt --project "
                  f"{opts.project})")  # fmt: skip
        else:
            print(f"staged in {where} (changed nothing: no candidate skill passed the gate; nothing to adopt)")
        return EXIT_OK
    if c.flags:  # never auto-adopted either: adopt refuses it without --allow-flagged
        print(f"staged in {where}, FLAGGED: {'; '.join(c.flags)}. Read its SKILL.md; to adopt it anyway: "
              f"python -m skillopt_ray.sleep adopt --allow-flagged --project {opts.project}")  # fmt: skip
        return EXIT_OK
    if not opts.auto_adopt:
        print(f"staged in {where}; adopt it with: python -m skillopt_ray.sleep adopt --project {opts.project}")
        return EXIT_OK
    print(f"staged in {where}")
    return auto_adopt(opts, where)


def auto_adopt(opts: NightOptions, where: Path) -> int:
    """`run --auto-adopt`: the night just staged is adopted, never one whose gate judged on borrowed tasks
    (unverified, by its manifest: it stays staged, exit 0); a refusal of adoption itself is one line and exit 2,
    the night staged. A night of several skills is adopted whole, as a bare `adopt` does."""
    from skillopt_ray.sleep.proposal import adopt, staging
    from skillopt_ray.sleep.proposal.lock import Busy

    if not staging.load_manifest(where)["verified"]:
        print("not adopted: the night is unverified (its gate judged on borrowed train tasks); --auto-adopt installs "
              f"only a night accepted on its own validation tasks (read its report, then: python -m skillopt_ray.sleep "
              f"adopt --project {opts.project} --allow-unverified)", file=sys.stderr)  # fmt: skip
        return EXIT_OK
    try:
        print(adopt.auto_adopt(opts.project, where.name))
    except (ValueError, OSError, Busy) as e:
        print(f"error: the night is staged but --auto-adopt was refused: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK
