"""`python -m skillopt_ray.sleep VERB`: the reference's verbs; `harvest` is built, the others come with part 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.exit_codes import EXIT_CONFIG, EXIT_OK
from skillopt_ray.sleep import pipeline, state
from skillopt_ray.sleep.harvest import SOURCES, Stores
from skillopt_ray.sleep.llm_setup import MinerRefused
from skillopt_ray.sleep.scope import SCOPES
from skillopt_ray.sleep.timeutil import parse_lookback

LATER = ("dry-run", "run", "status", "adopt", "schedule", "unschedule")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillopt_ray.sleep", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    h = sub.add_parser("harvest", help="your Codex and Claude Code sessions become a task folder to review")
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
    h.add_argument("--max-tokens", type=int, default=200_000, help="token cap of the mining calls (the ledger's)")
    h.add_argument("--max-calls", type=int, default=0, help="call cap of the mining calls (0: two per session)")
    h.add_argument("--val-fraction", type=float, default=0.34)
    h.add_argument("--test-fraction", type=float, default=0.2)
    h.add_argument("--send-digests", action="store_true", help="allow digests to reach a non-local optimizer")
    h.add_argument("--json", action="store_true", help="print the report as JSON")
    h.add_argument("overrides", nargs="*", help="model settings as for a run, e.g. llm=openai")
    for verb in LATER:
        sub.add_parser(verb, help="comes with part 2")
    return p


def repo_root() -> Path:
    p = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    return Path(p.stdout.strip()) if p.returncode == 0 and p.stdout.strip() else Path.cwd()


def options(a: argparse.Namespace) -> pipeline.HarvestOptions:
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
    )


def harvest(a: argparse.Namespace) -> int:
    opts = options(a)
    llm = None
    if not a.no_model:
        from skillopt_ray.sleep.llm_setup import digest_host, gateway, llm_config

        calls = a.max_calls or 2 * a.max_sessions  # a reply and, when it is not JSON, one re-ask
        cfg = llm_config(a.overrides)
        host = digest_host(cfg)
        allowed = a.send_digests or (host and host in state.load(opts.project.resolve()).digest_hosts)
        llm = gateway(cfg, a.max_tokens, calls, bool(allowed))
        opts.digest_host = host if a.send_digests else ""
        if llm is None:
            print(
                "the optimizer is the embedded model, which runs only inside a training run: mining with the "
                "heuristic miner (name a served model, e.g. llm=local or llm=openai, to mine with one)",
                file=sys.stderr,
            )
    report = pipeline.run(opts, llm)
    print(json.dumps(report, indent=1, sort_keys=True) if a.json else summary(report))
    return EXIT_OK


def summary(r: dict) -> str:
    """The report in a few lines."""
    red = ", ".join(f"{k} {v}" for k, v in sorted(r["redactions"].items())) or "none"
    sessions = ", ".join(f"{k} {v}" for k, v in sorted(r["sessions"].items())) or "none"
    return "\n".join(
        [
            f"harvest window {r['window']['since'] or 'all'} .. {r['window']['until']} (scope {r['scope']})",
            f"sessions: {sessions}; left out: {r['out_of_scope']} other folders, {r['out_of_window']} outside the "
            f"window, {r['duplicates']} duplicates",
            f"redacted: {red}",
            f"tasks: {r['tasks_new']} new, {r['tasks_kept']} already there; splits {r['splits']} ({r['mining']['miner']})",
            f'written to {r["output"]} (review it, then set "reviewed": true in its review.json)',
        ]
        + ([f"model mining stopped: {r['mining']['stopped_by']}"] if r["mining"].get("stopped_by") else [])
        + [f"no {s} session store at {p} (give --{s.split('_')[0]}-home)" for s, p in r["missing_stores"].items()]
    )


def main(argv: Optional[list[str]] = None) -> int:
    p = parser()
    a, extra = p.parse_known_args(argv)  # part 2's verbs take flags this parser does not know yet
    if a.verb not in LATER and extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if a.verb in LATER:
        print(f"skillopt_ray.sleep {a.verb} comes with part 2 (issue 43); today only `harvest` exists", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return harvest(a)
    except (ValueError, MinerRefused) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
