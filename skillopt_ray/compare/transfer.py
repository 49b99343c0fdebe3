"""Transfer table: one or more skills evaluated across targets (chat, codex, claude_code, several models) and
benchmarks in one Ray job, printed as the paper prints it (rows: skill; columns: target x benchmark; hard score
with n and a 95% interval) and logged to MLflow.

    python -m skillopt_ray.transfer --skills a.md,b.md --targets chat,codex,claude_code --benchmarks searchqa \
        -- llm=compatible llm.base_url=http://127.0.0.1:8000/v1 env.limit_test=40

A target is `chat`, `codex` or `claude_code`, optionally with a model: `codex:gpt-5.5`. Each cell is an ordinary
`mode=eval` run (gateway, env actors, ledger, cache, run directory) named transfer-<skill>-<target>-<benchmark>
under --out, so a rerun resumes and each cell's episodes are in its run directory; the overrides after `--`
apply to every cell. The interval is Wilson's score interval for a proportion over the scored episodes.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from skillopt_ray.runs.rundir import RunDir  # noqa: E402

if TYPE_CHECKING:
    from skillopt_ray.runs.tracking import Tracker

HARNESSES = ("chat", "codex", "claude_code")


@dataclass(frozen=True)
class Target:
    harness: str
    model: Optional[str] = None

    @staticmethod
    def parse(text: str) -> Target:
        harness, _, model = text.partition(":")
        if harness not in HARNESSES:
            raise ValueError(f"unknown target {text!r}: use chat, codex or claude_code, optionally with :<model>")
        return Target(harness, model or None)

    @property
    def label(self) -> str:
        return self.harness + (f":{self.model}" if self.model else "")

    def overrides(self) -> list[str]:
        return [f"llm.target.harness={self.harness}"] + ([f"llm.target.model={self.model}"] if self.model else [])


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% score interval for k successes in n trials ((0, 0) for n = 0)."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Cell:
    skill: str
    target: str
    benchmark: str
    hard: float
    n: int
    lo: float
    hi: float
    infra_errors: int
    run_dir: str
    exit_code: int

    def text(self) -> str:
        if self.exit_code != 0:
            return f"failed (exit {self.exit_code})"
        return f"{self.hard:.3f} (n={self.n}, {self.lo:.2f}-{self.hi:.2f})"


def cell_from_run(skill: str, target: str, bench: str, run_dir: Path, split: str, code: int) -> Cell:
    """A cell's score from its run directory: the scored episodes' hard scores."""
    rows = RunDir(run_dir).read_eval_results(split)
    scored = [r for r in rows if not (r.get("infra_error") or r.get("fail_reason") in ("data_error", "not_played"))]
    k = sum(1 for r in scored if isinstance(hard := r.get("hard"), (int, float)) and hard >= 1.0)
    n = len(scored)
    lo, hi = wilson(k, n)
    infra = sum(1 for r in rows if r.get("infra_error"))
    return Cell(skill, target, bench, k / n if n else 0.0, n, lo, hi, infra, str(run_dir), code)


def table(cells: list[Cell], skills: list[str], columns: list[tuple[str, str]]) -> str:
    """Markdown: one row per skill, one column per (target, benchmark)."""
    by = {(c.skill, c.target, c.benchmark): c for c in cells}
    head = ["skill"] + [f"{t} / {b}" for t, b in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in skills:
        row = [s] + [by[(s, t, b)].text() if (s, t, b) in by else "-" for t, b in columns]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The tool's options, and the Hydra overrides after `--` that every cell's run gets."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(prog="python -m skillopt_ray.transfer", description=__doc__.splitlines()[0])
    ap.add_argument("--skills", required=True, help="comma-separated skill .md files")
    ap.add_argument(
        "--targets", default="chat,codex,claude_code", help="comma-separated: chat, codex, claude_code[:model]"
    )
    ap.add_argument("--benchmarks", default="searchqa", help="comma-separated experiment presets (conf/experiment)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", default="outputs/transfer", help="output_dir of every cell's run")
    return ap.parse_args(argv), extra


def _run_cells(
    args: argparse.Namespace,
    extra: list[str],
    skills: list[Path],
    names: list[str],
    targets: list[Target],
    benches: list[str],
    out: Path,
    tracker: Tracker,
    parent: Optional[str],
) -> Optional[list[Cell]]:
    """One eval run per benchmark, target and skill; None after a bad override (reported in one line)."""
    from skillopt_ray import cli

    cells: list[Cell] = []
    for bench in benches:
        for t in targets:
            for name, skill in zip(names, skills):
                overrides = [
                    f"+experiment={bench}", *extra, *t.overrides(), "mode=eval", f"eval.skill_path={skill.resolve()}",
                    f"eval.split={args.split}", f"output_dir={out}", f"run_name=transfer-{_slug(name)}-{_slug(t.label)}-{bench}",
                    "tracking.experiment_name=transfer", *([f"tracking.parent_run_id={parent}"] if parent else []),
                ]  # fmt: skip
                try:
                    config = cli.compose(overrides)
                except Exception as e:  # noqa: BLE001 - a bad override: one line, then stop
                    print(f"error: {t.label} / {bench}: {e}", file=sys.stderr)
                    return None
                checked = cli.preflight(config)  # checked once; a bad input stops the command, as before
                code = cli.run_one(checked)
                cells.append(cell_from_run(name, t.label, bench, cli.run_dir_for(checked.data), args.split, code))
    return cells


def _publish(cells: list[Cell], names: list[str], columns: list[tuple[str, str]], out: Path, tracker: Tracker) -> None:
    """Print the table, write transfer.md and transfer.json, and log both and each cell's score to MLflow."""
    text = table(cells, names, columns)
    print(text)
    (out / "transfer.md").write_text(text + "\n")
    (out / "transfer.json").write_text(json.dumps([c.__dict__ for c in cells], indent=2))
    for c in cells:
        key = f"transfer/hard.{_slug(c.skill)}.{_slug(c.target)}.{c.benchmark}"  # a grouped key is logged as is
        tracker.log_metrics({key: c.hard, key + ".n": float(c.n), key + ".lo": c.lo, key + ".hi": c.hi}, 0)
    tracker.log_artifact(out / "transfer.md")
    tracker.log_artifact(out / "transfer.json")


def main(argv: Optional[list[str]] = None) -> int:
    args, extra = _parse_args(list(sys.argv[1:] if argv is None else argv))
    skills = [Path(s).expanduser() for s in args.skills.split(",") if s]
    missing = [str(s) for s in skills if not s.is_file()]
    if missing:
        print(f"error: skill file {missing[0]} does not exist; give --skills as paths to .md files", file=sys.stderr)
        return 2
    try:
        targets = [Target.parse(t) for t in args.targets.split(",") if t]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    benches = [b for b in args.benchmarks.split(",") if b]
    out = Path(args.out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    names = [s.stem for s in skills]
    if len(set(names)) != len(names):
        names = [f"{i + 1}-{s.stem}" for i, s in enumerate(skills)]

    from skillopt_ray.runs.tracking import Tracker, default_tracking_uri

    tracker = Tracker(True, default_tracking_uri(out), "transfer", out / "mlflow-artifacts")
    parent = tracker.start({}, "transfer", {"skills": args.skills, "targets": args.targets}, lambda _r: None)
    tracker.log_params({"skills": args.skills, "targets": args.targets, "benchmarks": args.benchmarks,
                        "split": args.split, "overrides": " ".join(extra)})  # fmt: skip
    cells = _run_cells(args, extra, skills, names, targets, benches, out, tracker, parent)
    if cells is None:
        tracker.finish("FAILED")
        return 2
    _publish(cells, names, [(t.label, b) for b in benches for t in targets], out, tracker)
    failed = [c for c in cells if c.exit_code != 0]
    tracker.finish("FAILED" if failed else "FINISHED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
