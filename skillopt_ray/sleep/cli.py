"""`python -m skillopt_ray.sleep VERB`: the reference's verbs: `harvest`, and a night (`run`, `dry-run`); and
`install-shells`, the Codex skill and Claude Code plugin that run these verbs from inside the agents."""

from __future__ import annotations

import argparse
import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.review_gate import ReviewRefused
from skillopt_ray.sleep import proposal_verbs as adopt_cli
from skillopt_ray.sleep.harvest import pipeline, state
from skillopt_ray.sleep.harvest.llm_setup import MinerRefused
from skillopt_ray.sleep.harvest.scope import SCOPES
from skillopt_ray.sleep.harvest.stores import SOURCES, Stores
from skillopt_ray.sleep.harvest.timeutil import parse_lookback
from skillopt_ray.sleep.proposal.lock import Busy

if TYPE_CHECKING:
    from skillopt_ray.config.schema import Config

NIGHT = ("run", "dry-run")


def harvest_flags(h: argparse.ArgumentParser) -> None:
    """The harvest's flags, also a night's (a night without --tasks harvests first)."""
    h.add_argument("--project", type=Path, help="the project (default: the current repository's root)")
    h.add_argument("--source", choices=SOURCES, default="all")
    h.add_argument("--codex-home", type=Path, help="default $CODEX_HOME, else ~/.codex")
    h.add_argument("--claude-home", type=Path, help="default $CLAUDE_CONFIG_DIR, else ~/.claude")
    h.add_argument("--lookback", help="72h, 3d, all (default: since the last harvest, else 72h)")
    h.add_argument("--scope", choices=SCOPES, default="invoked")
    h.add_argument("--no-model", action="store_true", help="mine without a model (the heuristic miner)")
    h.add_argument("--output", type=Path, help="the task folder (default <project>/.skillopt/tasks)")
    h.add_argument("--max-sessions", type=int, default=120)
    h.add_argument("--max-tasks", type=int, default=40)
    h.add_argument("--max-calls", type=int, default=0, help="call cap of the mining calls (0: two per session)")
    h.add_argument("--val-fraction", type=float, default=0.34)
    h.add_argument("--test-fraction", type=float, default=0.2)
    h.add_argument("--send-digests", action="store_true", help="allow digests to reach a non-local optimizer")
    h.add_argument("overrides", nargs="*", help="model settings as for a run, e.g. llm=openai")


def night_flags(n: argparse.ArgumentParser) -> None:
    from skillopt_ray.sleep.proposal.skill_home import DEFAULT_NAME, INSTALL_TO, TARGETS

    harvest_flags(n)
    n.add_argument(
        "--max-tokens",
        type=int,
        default=0,
        help="the night's token cap (0: none); a harvest before it gets the same cap",
    )
    n.add_argument("--tasks", type=Path, help="a reviewed task folder instead of a fresh harvest")
    n.add_argument("--target", choices=TARGETS, default="chat", help="replay as chat, or as Codex / Claude Code runs")
    n.add_argument("--skill", type=Path, help="a SKILL.md (or an installed skill's name) to train alone on every task")
    n.add_argument("--name", default=DEFAULT_NAME, help="the learned skill's name (its folder)")
    n.add_argument("--install-to", choices=INSTALL_TO, default="project", help="the project's skills or yours")
    n.add_argument("--max-cost", type=float, default=0.0, help="the night's cap in USD (0: none)")
    n.add_argument("--max-minutes", type=float, default=0.0, help="the night's wall-clock cap (0: none)")
    n.add_argument("--val-looks", type=int, default=5, help="nights a validation set may decide before a warning")
    n.add_argument("--memory", action="store_true", help="also propose the rules as a marked AGENTS.md/CLAUDE.md block")
    n.add_argument("--i-reviewed", action="store_true", help="I have read the task folder (review.json)")
    n.add_argument(
        "--auto-adopt", action="store_true", help="adopt the night's skill when its gate accepted it on its own tasks"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillopt_ray.sleep", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    h = sub.add_parser("harvest", help="your Codex and Claude Code sessions become a task folder to review")
    harvest_flags(h)
    h.add_argument("--max-tokens", type=int, default=200_000, help="token cap of the mining calls (the ledger's)")
    h.add_argument("--json", action="store_true", help="print the report as JSON")
    night_flags(sub.add_parser("run", help="one night: train on the night's tasks, stage the best skill"))
    night_flags(sub.add_parser("dry-run", help="a night without staging; says what it may spend first"))
    adopt_cli.add_verbs(sub)
    i = sub.add_parser("install-shells", help="the Codex skill and/or the Claude Code plugin that run these verbs")
    i.add_argument("--codex", action="store_true", help="copy the skill to $CODEX_HOME/skills/skillopt-sleep/")
    i.add_argument("--claude", action="store_true", help="add the plugin with Claude Code's own plugin commands")
    i.add_argument("--print", dest="only_print", action="store_true", help="say what it would do, change nothing")
    i.add_argument("--codex-home", type=Path, help="default $CODEX_HOME, else ~/.codex")
    i.add_argument("--claude-bin", default="claude", help="the Claude Code CLI (default: claude on PATH)")
    i.add_argument("--repo", type=Path, help="the skillopt-ray checkout holding .claude-plugin/ (default: this one)")
    return p


def repo_root() -> Path:
    p = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    return Path(p.stdout.strip()) if p.returncode == 0 and p.stdout.strip() else Path.cwd()


def options(a: argparse.Namespace, cfg: Config) -> pipeline.HarvestOptions:
    """The harvest's options from its flags, the floor from the night's composed config (`night_config`)."""
    project = (a.project or repo_root()).expanduser()
    if not project.is_dir():
        raise ValueError(f"--project {project} is not a folder; give the project's folder")
    if a.output is not None and (a.output.suffix in (".jsonl", ".json") or a.output.is_file()):
        raise ValueError(
            f"--output {a.output} looks like a file; the harvest writes a task folder (one sub-folder per task), "
            "give a folder path such as .skillopt/tasks"
        )
    for name in ("max_sessions", "max_tasks", "max_tokens", "max_calls"):
        if getattr(a, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    return pipeline.HarvestOptions(
        project=project,
        stores=Stores(a.source, a.codex_home, a.claude_home),
        scope=a.scope,
        lookback=parse_lookback(a.lookback) if a.lookback else None,
        lookback_given=a.lookback is not None,
        output=a.output,
        max_sessions=a.max_sessions,
        max_tasks=a.max_tasks,
        val_fraction=a.val_fraction,
        test_fraction=a.test_fraction,
        min_selection=gate_floor(cfg),
    )


def gate_floor(cfg: Config) -> int:
    """The fewest selection tasks a night's gate can accept on, read from the config the night composes (the sleep
    preset and the command's overrides, whatever spells them: a preset, a quoted value, an interpolation); 0 (no floor)
    for a gate that is not the sequential one."""
    from skillopt_ray.stages.sequential_gate import SequentialRule

    o = cfg.optimizer
    if o.gate_test not in ("sequential", "auto"):
        return 0
    return SequentialRule(task_p=float(o.gate_seq_task_p)).min_tasks


def harvest(a: argparse.Namespace) -> int:
    report = harvest_report(a)
    print(json.dumps(report, indent=1, sort_keys=True) if a.json else summary(report))
    return EXIT_OK


def harvest_report(a: argparse.Namespace) -> pipeline.HarvestReport:
    from skillopt_ray.sleep.harvest.llm_setup import digest_host, gateway, night_config

    cfg = night_config(list(a.overrides))  # composed once: the mining model and the gate's floor
    opts = options(a, cfg)
    llm = None
    if not a.no_model:
        calls = a.max_calls or 2 * a.max_sessions  # a reply and, when it is not JSON, one re-ask
        host = digest_host(cfg.llm)
        allowed = a.send_digests or (host and host in state.load(opts.project.resolve()).digest_hosts)
        llm = gateway(cfg.llm, a.max_tokens, calls, bool(allowed))
        opts.digest_host = host if a.send_digests else ""
        if llm is None:
            print(
                "the optimizer is the embedded model, which runs only inside a training run: mining with the "
                "heuristic miner (name a served model, e.g. llm=local or llm=openai, to mine with one)",
                file=sys.stderr,
            )
    return pipeline.run(opts, llm)


def check_memory(project: Path, a: argparse.Namespace) -> None:
    """--memory: the target reads a memory file and its block's markers are editable, said before the night runs."""
    from skillopt_ray.sleep.proposal import memory
    from skillopt_ray.sleep.proposal.skill_home import parse

    name = parse(a.skill.read_text(encoding="utf-8"), a.name).name if a.skill else a.name
    memory.find_block(memory.read_live(memory.memory_path(project, a.target)), name)


def night(a: argparse.Namespace) -> int:
    """`run` / `dry-run`: one night (skillopt_ray.sleep.night.runner)."""
    from skillopt_ray.sleep.night.runner import NightOptions
    from skillopt_ray.sleep.night.skills_night import night as run_night

    project = (a.project or repo_root()).expanduser().resolve()
    for flag in ("max_cost", "max_minutes", "max_tokens"):
        if getattr(a, flag) < 0:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 0 (0: no cap)")
    if a.tasks is not None and not (a.tasks / "review.json").is_file() and not a.tasks.is_dir():
        raise ValueError(f"--tasks {a.tasks} is not a task folder; give the folder `harvest` wrote")
    if a.skill is not None and not a.skill.is_file():
        from skillopt_ray.sleep.night.skill_routes import skill_file

        installed = skill_file(project, a.target, str(a.skill)) if len(a.skill.parts) == 1 else None
        if installed is None:
            raise ValueError(f"--skill {a.skill} is not a file or an installed skill's name; give a SKILL.md")
        a.skill = installed
    if a.memory:
        check_memory(project, a)
    opts = NightOptions(
        project=project, tasks=a.tasks, target=a.target, skill=a.skill, name=a.name, install_to=a.install_to,
        max_tokens=a.max_tokens, max_cost=a.max_cost, max_minutes=a.max_minutes, i_reviewed=a.i_reviewed,
        dry_run=a.verb == "dry-run", val_looks_max=a.val_looks, overrides=list(a.overrides), memory=a.memory,
        argv=run_argv(a, project), auto_adopt=a.auto_adopt,
    )  # fmt: skip

    def fresh() -> Path:
        r = harvest_report(a)
        print(summary(r), file=sys.stderr)
        return Path(r["output"])

    from skillopt_ray.sleep.proposal.lock import night_lock

    with night_lock(project):  # a second night for the same project exits with one line
        return run_night(opts, fresh)


def run_argv(a: argparse.Namespace, project: Optional[Path] = None) -> list[str]:
    """This night's arguments as `schedule` repeats them (skillopt_ray.sleep.night.settings), the project named
    even when it was found from the current folder."""
    from skillopt_ray.sleep.night.settings import run_argv as argv_of

    n = argparse.ArgumentParser()
    night_flags(n)
    return argv_of(argparse.Namespace(**{**vars(a), "project": project or a.project}), n.parse_args([]))


def summary(r: pipeline.HarvestReport) -> str:
    """The report in a few lines."""
    red = ", ".join(f"{k} {v}" for k, v in sorted(r["redactions"].items())) or "none"
    sessions = ", ".join(f"{k} {v}" for k, v in sorted(r["sessions"].items())) or "none"
    return "\n".join(
        [
            f"harvest window {r['window']['since'] or 'all'} .. {r['window']['until']} (scope {r['scope']}; "
            f"{r['window'].get('from') or ''})",
            f"sessions: {sessions}; left out: {r['out_of_scope']} other folders, {r['out_of_window']} outside the "
            f"window, {r['duplicates']} duplicates, {r['sleep_sessions']} that only ran sleep",
            f"redacted: {red}",
            f"tasks: {r['tasks_new']} new, {r['tasks_kept']} already there; splits {r['splits']} ({r['mining'].get('miner')})",
            "mined checks tried on the sessions' outcomes: "
            + ", ".join(f"{v} {k}" for k, v in (r.get("checks") or {}).items())
            + " (review.json says why)",
            f'written to {r["output"]} (review it, then set "reviewed": true in its review.json)',
        ]
        + ([f"model mining stopped: {r['mining'].get('stopped_by')}"] if r["mining"].get("stopped_by") else [])
        + [f"no {s} session store at {p} (give --{s.split('_')[0]}-home)" for s, p in r["missing_stores"].items()]
    )


def install_shells(a: argparse.Namespace) -> int:
    from skillopt_ray.sleep import agent_shells

    opts = agent_shells.ShellOptions(a.codex, a.claude, a.only_print, a.codex_home, a.claude_bin, a.repo)
    try:
        print(agent_shells.install(opts))
    except (agent_shells.ShellRefused, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def os_error_line(e: OSError) -> str:
    """An OSError in one line with what to do, also one a Ray worker raised (its text carries the remote traceback)."""
    text = f"[Errno {e.errno}] {e.strerror}" if e.errno and e.strerror else (str(e).strip().splitlines() or [""])[-1]
    full = e.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text
    head = "the disk is full" if full else "cannot go on"
    return f"{head} ({text[:300]}); {'free space, then ' if full else ''}rerun the same command to resume"


def main(argv: Optional[list[str]] = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.verb in adopt_cli.VERBS:
        return adopt_cli.dispatch(a, (a.project or repo_root()).expanduser())
    if a.verb == "install-shells":
        return install_shells(a)
    try:
        return night(a) if a.verb in NIGHT else harvest(a)
    except (ValueError, MinerRefused, ReviewRefused, UsageError, Busy) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print(f"interrupted: rerun the same command to {'resume the night' if a.verb in NIGHT else 'harvest'}",
              file=sys.stderr)  # fmt: skip
        return EXIT_STOPPED
    except OSError as e:  # a full disk, a folder gone: one line, and what to do
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return EXIT_ERROR
