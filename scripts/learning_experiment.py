"""A real model learns: train a local-model experiment with llm=local under several seeds and report the test gain.

One local model server (Qwen2.5-Coder-1.5B, 2 slots per run) serves every seed's run at once: on a CPU, a few
sequences decoded together cost little more than one, so the seeds run side by side. Each run is an ordinary CLI run
(its own run directory, resumable: rerunning this command continues where it stopped and pays no call twice).
At the end it prints, per seed and pooled, the initial and best skill's test scores with 95% intervals and n, the
paired per-task difference (best - initial) with its 95% bootstrap interval, tokens and wall time, and the best
skill; the same text goes to <output-dir>/report.md.

    scripts/install_model.sh qwen2.5-coder-1.5b                  # once
    .venv/bin/python scripts/learning_experiment.py              # seeds 42 and 43: 22.6 min for both, 2 shared cores
    .venv/bin/python scripts/learning_experiment.py --experiment local_house_style   # house-style tasks: 31-63 min
    .venv/bin/python scripts/learning_experiment.py --report-only
    .venv/bin/python scripts/learning_experiment.py -- env.limit_test=2   # extra overrides for every run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from skillopt_ray.base.stats import Interval, paired_bootstrap  # noqa: E402
from skillopt_ray.runs.records import Evaluation  # noqa: E402
from skillopt_ray.runs.rundir import FINAL_EVALUATION, RunDir  # noqa: E402

MODEL = "qwen2.5-coder-1.5b"
SLOT_TOKENS = 8192


@dataclass
class RunResult:
    """What one seed's run measured."""

    seed: int
    run_dir: Path
    initial: Evaluation
    best: Evaluation
    intervals: dict[str, Any]
    tokens: int
    calls: int
    wall_s: float
    accepted: int
    steps: int
    best_skill: str


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    ap.add_argument("--experiment", default="local_coder", help="the conf/experiment preset every seed runs")
    ap.add_argument(
        "--output-dir", type=Path, help="default: outputs/learning (local_coder), else outputs/<experiment>"
    )
    ap.add_argument("--threads", type=int, default=2, help="model server threads (1 can be faster on a busy CPU)")
    ap.add_argument("--report-only", action="store_true", help="only report on the runs already in --output-dir")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (after --)")
    return ap.parse_args(argv)


def start_server(args: argparse.Namespace) -> Any:
    from skillopt_ray.llm.embedded import EmbeddedServer, EmbeddedUnavailable

    slots = 2 * len(args.seeds)
    try:
        server = EmbeddedServer(MODEL, SLOT_TOKENS * slots, args.threads, slots, 600.0, args.output_dir / "server.log")
        server.start()
    except EmbeddedUnavailable as e:
        print(f"learning_experiment: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return server


def launch(seed: int, url: str, args: argparse.Namespace) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "skillopt_ray",
        f"+experiment={args.experiment}",
        "llm=local",
        f"seed={seed}",
        f"output_dir={args.output_dir}",
        f"llm.embedded.server_url={url}",
        "debug.progress=plain",
        *args.overrides,
    ]
    log = open(args.output_dir / f"seed{seed}.log", "w")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


def run_all(args: argparse.Namespace) -> None:
    """Every seed's run against one shared server; stops the server (and no other process) at the end."""
    args.output_dir.mkdir(parents=True, exist_ok=True)
    server = start_server(args)
    procs: dict[int, subprocess.Popen] = {}
    try:
        procs = {s: launch(s, server.base_url, args) for s in args.seeds}
        for seed, p in procs.items():
            code = p.wait()
            print(f"seed {seed}: exit {code} (log {args.output_dir / f'seed{seed}.log'})")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)
        server.stop()


def run_dir_of(seed: int, out: Path) -> Optional[Path]:
    """The run directory the seed's CLI run named in its log."""
    log = out / f"seed{seed}.log"
    if not log.exists():
        return None
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("run directory: "):
            return Path(line.split(": ", 1)[1].strip())
    return None


def load(seed: int, out: Path) -> Optional[RunResult]:
    rd = run_dir_of(seed, out)
    summary = RunDir(rd).read_summary() if rd else None
    if rd is None or summary is None:
        return None
    final = RunDir(rd).read_json(FINAL_EVALUATION) or {}
    initial, best = (Evaluation.from_dict(final[k], str(rd / FINAL_EVALUATION)) for k in ("initial", "best"))
    tok = summary.tokens or {}
    return RunResult(
        seed,
        rd,
        initial,
        best,
        summary.intervals or {},
        int(tok["tokens"]),
        int(tok["calls"]),
        float(summary.wall_time_s or 0.0),
        int((summary.counts or {})["accept"]),
        int(summary.steps or 0),
        RunDir(rd).read_best_skill() or "",
    )


def diffs(r: RunResult, metric: int) -> list[float]:
    """best - initial per test task scored under both (metric 0: hard, 1: soft)."""
    common = sorted(set(r.initial.tasks) & set(r.best.tasks))
    return [r.best.tasks[t][metric] - r.initial.tasks[t][metric] for t in common]


def diff_text(ds: list[float]) -> str:
    if not ds:
        return "-"
    t = paired_bootstrap(ds, alpha=0.025)  # a 95% two-sided percentile interval
    return f"{t.mean_diff:+.3f} [{t.lo:+.3f}, {t.hi:+.3f}] n={t.n} (better {t.n_better}, worse {t.n_worse})"


def score_text(r: RunResult, which: str, metric: str) -> str:
    iv = ((r.intervals.get("test") or {}).get(which) or {}).get(metric)
    return Interval(**iv).text() if iv else "-"


def report(results: list[RunResult]) -> str:
    rows = [
        "| seed | initial test soft | best test soft | best - initial, soft (paired) | initial test hard |"
        " best test hard | best - initial, hard (paired) | accepted/steps | tokens (calls) | wall time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.seed} | {score_text(r, 'initial', 'soft')} | {score_text(r, 'best', 'soft')} | "
            f"{diff_text(diffs(r, 1))} | {score_text(r, 'initial', 'hard')} | {score_text(r, 'best', 'hard')} | "
            f"{diff_text(diffs(r, 0))} | {r.accepted}/{r.steps} | {r.tokens:,} ({r.calls}) | {r.wall_s / 60:.1f} min |"
        )
    pooled_soft = [d for r in results for d in diffs(r, 1)]
    pooled_hard = [d for r in results for d in diffs(r, 0)]
    lines = ["\n".join(rows), "", f"pooled over seeds (task x seed pairs): soft {diff_text(pooled_soft)}; "]
    lines[-1] += f"hard {diff_text(pooled_hard)}"
    for r in results:
        lines += ["", f"best skill, seed {r.seed} ({r.run_dir}):", "", "```markdown", r.best_skill.strip(), "```"]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if not (ROOT / "conf" / "experiment" / f"{args.experiment}.yaml").is_file():
        print(
            f"learning_experiment: no experiment {args.experiment!r} in conf/experiment/; name one there",
            file=sys.stderr,
        )
        return 2
    default_dir = "learning" if args.experiment == "local_coder" else args.experiment
    args.output_dir = (args.output_dir or ROOT / "outputs" / default_dir).resolve()
    t0 = time.monotonic()
    if not args.report_only:
        run_all(args)
        print(f"all seeds done in {(time.monotonic() - t0) / 60:.1f} min (wall clock)")
    results = [r for r in (load(s, args.output_dir) for s in args.seeds) if r is not None]
    missing = sorted(set(args.seeds) - {r.seed for r in results})
    if missing:
        print(f"no finished run for seed(s) {missing}: see {args.output_dir}/seed<N>.log", file=sys.stderr)
    if not results:
        return 1
    text = report(results)
    (args.output_dir / "report.md").write_text(text + "\n")
    print(text)
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
