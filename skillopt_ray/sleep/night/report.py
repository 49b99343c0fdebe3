"""A night's report: each gate decision with its paired difference and interval, the verdict (accepted, rejected,
or unverified when the gate judged on borrowed tasks), how often this validation set has been looked at, and what
the night spent. Read from the run directory the night's run wrote."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.io import atomic_write_text
from skillopt_ray.runs.records import GateRecord, is_accept
from skillopt_ray.runs.rundir import RunDir


@dataclass
class GateLine:
    step: str
    action: str
    reason: str
    mean_diff: float | None = None
    lo: float | None = None
    hi: float | None = None
    episodes: int | None = None


@dataclass
class NightReport:
    run_name: str
    run_dir: str
    tasks: dict[str, int]
    gates: list[GateLine] = field(default_factory=list)
    verdict: str = "rejected"  # accepted | rejected | unverified
    val_looks: int = 1
    val_looks_max: int = 5
    tokens: int = 0
    cost_usd: float = 0.0
    live_path: str = ""
    proposed: str = ""
    # the judge of rubric tasks (stages/judge.py): its counts (judge.json), the best skill's judged score on the
    # selection tasks with its spread over their samples, and its agreement with rule checks where a task has both
    judge: dict[str, float] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)  # task id -> "<split>: why it could not be scored"

    @property
    def changed(self) -> bool:
        return any(is_accept(g.action) for g in self.gates)

    def notes(self) -> list[str]:
        out = []
        if self.left_out:
            out.append(
                f"{len(self.left_out)} task(s) left out: they cannot be scored ({', '.join(sorted(self.left_out))}; "
                "report.json says why)"
            )
        if self.verdict == "unverified":
            out.append("unverified: the night had no validation tasks of its own; the gate judged on train tasks")
        if self.val_looks >= self.val_looks_max:
            out.append(
                f"this validation set has decided {self.val_looks} nights (limit {self.val_looks_max}): gains on it "
                "are less trustworthy each time; harvest fresh validation tasks"
            )
        return out

    def summary(self) -> str:
        lines = [
            f"night {self.run_name}: {self.verdict}; tasks {self.tasks}; {self.tokens} tokens, ${self.cost_usd:.4f}"
        ]
        for g in self.gates:
            ci = f"paired difference {g.mean_diff:+.3f} [{g.lo:+.3f}, {g.hi:+.3f}]" if g.mean_diff is not None else ""
            lines.append(f"  {g.step}: {g.action} {ci}".rstrip())
        lines += judge_lines(self.judge)
        lines += [f"  note: {n}" for n in self.notes()]
        return "\n".join(lines)

    def as_dict(self) -> JSONObject:
        """The report as staging and report.json keep it (staging reads `verdict` and the `gates` rows)."""
        return asdict(self) | {"notes": self.notes(), "changed": self.changed}


def judge_lines(j: Mapping[str, float]) -> list[str]:
    """What the judge did, in a few lines (none when it judged nothing)."""
    if not j:
        return []
    out = []
    if j.get("score") is not None:
        out.append(
            f"  judged score of the best skill: {j['score']:.3f} ± {j['spread']:.3f} (sd over {j['samples']} samples "
            f"of {j['tasks']} rubric tasks)"
        )
    if j.get("pair_comparisons") or j.get("scores"):
        out.append(
            f"  judge: {j.get('pair_comparisons', 0)} pairwise comparisons ({j.get('pair_errors', 0)} unusable, "
            f"{j.get('order_disagreements', 0)} ties by order disagreement), {j.get('scores', 0)} scores "
            f"({j.get('score_errors', 0)} unusable)"
        )
    n = int(j.get("agree") or 0) + int(j.get("disagree") or 0)
    if n:
        out.append(f"  judge agreed with the rule checks on {j['agree']} of {n} episodes ({j['agree'] / n:.0%})")
    return out


def judged_score(rd: RunDir) -> dict[str, float]:
    """The best skill's judged score on the rubric tasks of the selection split: the mean over their samples and
    the samples' standard deviation ({} when no task was judged)."""
    try:
        best = rd.read_state_brief().get("best_eval")
    except (OSError, ValueError):
        return {}
    ev = rd.scores().get(str(best or ""))
    if ev is None or not ev.outcomes:
        return {}
    reps = ev.task_repeats or {t: [v] for t, v in ev.tasks.items()}
    xs = [r[1] for t in ev.outcomes for r in reps.get(t, [])]
    if not xs:
        return {}
    mean = sum(xs) / len(xs)
    sd = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
    return {"score": mean, "spread": sd, "samples": len(xs), "tasks": len(ev.outcomes)}


def gate_line(step: str, g: GateRecord) -> GateLine:
    t = g.gate_test
    if t is None:  # the plain gate: no paired difference to show
        return GateLine(step, g.action, g.reason or "")
    return GateLine(step, g.action, g.reason or "", t.get("mean_diff"), t.get("lo"), t.get("hi"), t.get("episodes"))


def build_report(
    run_dir: Path, run_name: str, splits: dict[str, list[str]], looks: int, looks_max: int, borrowed: bool
) -> NightReport:
    rd = RunDir(run_dir)
    gates = [gate_line(step, g) for step, g in rd.step_gates()]
    totals = (rd.read_ledger() or {}).get("totals") or {}
    rep = NightReport(
        run_name, str(run_dir), {k: len(v) for k, v in splits.items()}, gates, "rejected", looks, looks_max,
        int(totals.get("tokens") or 0), float(totals.get("cost_usd") or 0.0),
    )  # fmt: skip
    rep.judge = {**rd.read_judge(), **judged_score(rd)}
    if rep.changed:
        rep.verdict = "unverified" if borrowed else "accepted"
    return rep


def write_report(folder: Path, rep: NightReport) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "report.json", json.dumps(rep.as_dict(), indent=1) + "\n")  # a resumed night rewrites
    atomic_write_text(folder / "report.md", f"# Night {rep.run_name}\n\n```\n{rep.summary()}\n```\n")
