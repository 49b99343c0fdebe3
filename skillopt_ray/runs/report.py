"""A run's story, read from its run directory: what each step tried, what the gate decided and why.

    python -m skillopt_ray.report RUN_DIR [--diffs] [--html FILE]
    python -m skillopt_ray.report RUN_A --diff-skill RUN_B      # the two runs' best skills, diffed

Prints the skill versions (who made each one, at which step, with which selection score), then per
epoch and step: the action, the edit budget, the edits merged, ranked, applied and skipped, the
candidate's score against the current skill's (tasks compared), the gate's reason and the selection
tasks that flipped, the epoch-boundary results (slow update, meta skill) and the final summary.
`--diffs` adds each step's diff (current -> candidate); `--html FILE` writes the skill history with
its diffs as one HTML page (the same page a run logs to MLflow as `skill_history.html`).

Works on finished, unfinished and older run directories: files a run has not written (yet) are
left out, and gate records without `reason` / `flipped` are shown without them.
"""

from __future__ import annotations

import argparse
import difflib
import html
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.jsontypes import JSONObject, JSONValue, as_object

from skillopt_ray.base.stats import GateTestDict, IntervalDict
from skillopt_ray.runs.records import (
    EpochRecord,
    GateDecisionFields,
    GateRecord,
    RecordError,
    Session,
    StepRecord,
    Summary,
    is_accept,
)
from skillopt_ray.runs.rundir import BEST_SKILL, STEP_CANDIDATE, STEP_DIFF, RunDir
from skillopt_ray.runs.state import StateBrief


def kinds_text(kinds: Any) -> str:
    """Infra errors by kind as text, e.g. ': sandbox_start 2, timeout 1'; empty when no kind is known."""
    return (": " + ", ".join(f"{k} {n}" for k, n in kinds.items())) if isinstance(kinds, dict) and kinds else ""


def _strip_fence(text: str) -> str:
    """diff.md holds the diff in a ```diff fence; the bare diff."""
    m = re.match(r"^```[a-z]*\n(.*?)```\s*$", text, re.S)
    return m.group(1) if m else text


def diff_text(old: str, new: str, a: str = "current", b: str = "candidate") -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b))


@dataclass
class Version:
    number: int
    made_by: str
    step: Optional[int] = None
    epoch: Optional[int] = None
    score: Optional[float] = None
    text: str = ""


@dataclass
class Story:
    rd: RunDir
    history: list[StepRecord]
    gates: dict[int, GateRecord]
    diffs: dict[int, str]
    versions: list[Version]
    epochs: dict[int, EpochRecord]
    summary: Optional[Summary]
    state: StateBrief  # state.json's headline fields (older and partial states included)
    config: JSONObject = field(default_factory=dict)
    sessions: list[Session] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.rd.root


def _versions(
    rd: RunDir, history: list[StepRecord], epochs: dict[int, EpochRecord], state: StateBrief
) -> list[Version]:
    """Every skill version on disk, with what made it: the initial skill, an accepted step, an epoch boundary, notes."""
    texts = {v.version: v.text for v in rd.skill_versions()}
    made: dict[int, Version] = {}
    if 0 in texts:
        made[0] = Version(0, "initial skill", 0, None, state.get("initial_score"))
    prev_version, prev_epoch = 0, None
    for rec in history:
        v, epoch = rec.skill_version, rec.epoch
        if v is None:
            continue
        if rec.accepted and v not in made:
            made[v] = Version(v, f"step {rec.step} ({rec.action})", rec.step, epoch, rec.current_score)
        # other versions since the previous step: the epoch boundary between them (or appendix notes within an epoch)
        for u in range(prev_version + 1, v + 1):
            if u in texts and u not in made:
                made[u] = (
                    _boundary_version(u, prev_epoch, epochs)
                    if prev_epoch is not None and prev_epoch != epoch
                    else Version(
                        u,
                        "appendix notes" if prev_epoch is not None else "initial skill with appendix",
                        rec.step,
                        epoch,
                    )
                )
        prev_version, prev_epoch = max(prev_version, v), epoch
    for u in sorted(texts):
        if u not in made:
            made[u] = (
                _boundary_version(u, prev_epoch, epochs)
                if prev_epoch is not None
                else Version(u, "initial skill with appendix")
            )
    out = []
    for u in sorted(texts):
        made[u].text = texts[u]
        out.append(made[u])
    return out


def _boundary_version(v: int, epoch: Optional[int], epochs: dict[int, EpochRecord]) -> Version:
    e = epochs.get(epoch or 0)
    slow = e.slow if e else None
    if slow is not None and slow.action == "inject_placeholder":
        return Version(v, f"epoch {epoch} boundary (empty slow-update block)", None, epoch)
    score = slow.candidate_full_score if slow is not None and slow.accepted else None
    return Version(v, f"epoch {epoch} boundary (slow update)", None, epoch, score)


def load(run_dir: str | Path) -> Story:
    rd = RunDir(run_dir)
    if not rd.root.is_dir():
        raise FileNotFoundError(f"{rd.root} is not a run directory (no such folder)")
    history = rd.history()
    gates, diffs = {}, {}
    for rec in history:
        gate = rd.read_gate(*rec.step_id)
        if gate is not None:
            gates[rec.step] = gate
        d = rd.read_step_text(*rec.step_id, STEP_DIFF)
        if d is None:  # older runs: no diff.md; the candidate against the skill the step started from
            cand = rd.read_step_text(*rec.step_id, STEP_CANDIDATE)
            base = _skill_before(rd, rec, history)
            d = diff_text(base, cand) if cand is not None and base is not None else None
        else:
            d = _strip_fence(d)
        if d is not None:
            diffs[rec.step] = d
    epochs = rd.epochs()
    state = rd.read_state_brief()
    return Story(
        rd,
        history,
        gates,
        diffs,
        _versions(rd, history, epochs, state),
        epochs,
        rd.read_summary(),
        state,
        rd.read_config(),
        rd.read_sessions(),
    )


def _skill_before(rd: RunDir, rec: StepRecord, history: list[StepRecord]) -> Optional[str]:
    """The current skill when `rec`'s step began (the previous step's version; v0 for the first step)."""
    prev = [h.skill_version for h in history if h.step < rec.step and h.skill_version is not None]
    v = prev[-1] if prev else 0
    return rd.read_text(rd.skill_path(v).relative_to(rd.root))


# ---------------------------------------------------------------- text


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, (int, float)) else str(x))


def _ids(ids: list[str], limit: int = 8) -> str:
    if not ids:
        return "none"
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _diff_size(d: str) -> tuple[int, int]:
    lines = d.splitlines()
    plus = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    minus = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    return plus, minus


def _edits(rec: StepRecord) -> str:
    s = rec.edit_apply_summary or {}
    parts = [f"{rec.n_edits_merged} merged", f"{rec.n_edits_ranked} kept"]
    if s:
        parts.append(f"{s.get('applied', 0)} applied")
        if s.get("skipped"):
            parts.append(f"{s['skipped']} skipped")
        if s.get("errors"):
            parts.append(f"{s['errors']} failed")
    return ", ".join(parts)


def _skipped_reports(rd: RunDir, rec: StepRecord) -> list[str]:
    try:
        upd = rd.read_stage(*rec.step_id, "update") or {}
    except RecordError:
        upd = {}
    out = []
    for r in upd.get("reports") or []:
        status = str(r.get("status", ""))
        if status and not status.startswith("applied"):
            target = (r.get("target") or r.get("content_preview") or "").strip().replace("\n", " ")
            out.append(
                f"edit {r.get('index', '?')} ({r.get('op', '?')}): {status}" + (f" - {target[:60]!r}" if target else "")
            )
    return out


def lr_text(o: Mapping[str, JSONValue]) -> str:
    """The edit budget as the schedule makes it, in words: a constant budget has no minimum to reach, so it is not
    written as a change (`constant 4->2` read as a decay from 4 to 2)."""
    top, low, kind = o.get("learning_rate", "?"), o.get("min_learning_rate", "?"), o.get("lr_schedule", "?")
    if o.get("lr_control_mode") == "autonomous":
        return "learning rate chosen by the optimizer each step (autonomous control, up to the merged edits)"
    if kind == "constant":
        return f"learning rate {top} every step (constant)"
    if kind == "autonomous":
        return "learning rate unlimited (autonomous schedule: every merged edit kept)"
    return f"learning rate {top} decaying to {low} ({kind})"


def story_text(s: Story, diffs: bool = False) -> str:
    out: list[str] = []
    cfg, o = s.config, as_object(s.config.get("optimizer"))
    out.append(f"run {s.root.name}")
    facts = [f"experiment {cfg.get('experiment', '?')}", f"seed {cfg.get('seed', '?')}"]
    if o:
        facts += [
            f"{o.get('epochs', '?')} epochs",
            f"batch {o.get('batch_size', '?')}",
            f"gate {o.get('gate_metric', '?')}",
            lr_text(o),
        ]
    out.append("  " + ", ".join(facts))
    if s.summary is None:
        st = s.state
        out.append(
            f"  not finished: phase {st.get('phase', '?')}, epoch {st.get('epoch', '?')}, {st.get('global_step', len(s.history))} steps done"
        )
    out.append("")
    out.append("skill versions")
    for v in s.versions:
        score = f"selection {_f(v.score)}" if v.score is not None else ""
        out.append(f"  v{v.number:04d}  {v.made_by:<44} {len(v.text):>6} chars  {score}".rstrip())
    out.append("")
    initial = s.state.get("initial_score")
    if initial is not None:
        out.append(f"initial skill on selection: {_f(initial)}")
    by_epoch: dict[int, list[StepRecord]] = {}
    for rec in s.history:
        by_epoch.setdefault(rec.epoch, []).append(rec)
    for epoch in sorted(set(by_epoch) | set(s.epochs)):
        out.append("")
        out.append(f"epoch {epoch}")
        for rec in by_epoch.get(epoch, []):
            out.extend(_step_lines(s, rec, diffs))
        out.extend(_boundary_lines(s.epochs.get(epoch)))
    out.append("")
    out.extend(_final_lines(s))
    return "\n".join(out)


def _q(x: Any) -> Any:
    return "?" if x is None else x


def _flip_text(flipped: Any, limit: int = 8) -> Optional[str]:
    if not isinstance(flipped, dict):
        return None
    return f"flipped to pass: {_ids(flipped.get('to_pass') or [], limit)}; to fail: {_ids(flipped.get('to_fail') or [], limit)}"


def paired_text(t: GateTestDict) -> str:
    """The paired gate's test in one line: the difference, its interval, p and the verdict."""
    verdict = "significant" if t.get("significant") else "not significant"
    if t.get("test") == "sequential":
        return (
            f"sequential paired gate: net {_f(t.get('net'), 2)} over {t.get('n')} tasks ({t.get('pairs')} pairs, "
            f"p={_f(t.get('p_value'), 4)}), "
            f"{t.get('episodes')} episodes in {t.get('looks')} looks (first pass {t.get('first_pass')}), difference "
            f"{_f(t.get('mean_diff'), 4)} [{_f(t.get('lo'), 4)}, {_f(t.get('hi'), 4)}] over {t.get('n')} tasks: "
            f"{'accepted' if t.get('significant') else 'rejected'} ({str(t.get('stopped', '')).replace('_', ' ')})"
        )
    return (
        f"paired test ({t.get('test')}, alpha {t.get('alpha')}): difference {_f(t.get('mean_diff'), 4)} "
        f"[{_f(t.get('lo'), 4)}, {_f(t.get('hi'), 4)}] ({float(t.get('level') or 0):.0%} interval) over "
        f"{t.get('n')} tasks, p={_f(t.get('p_value'), 4)}: {verdict}"
    )


def interval_text(iv: Optional[IntervalDict]) -> str:
    """'0.556 [0.337, 0.754] n=18', or '-' for a run written before intervals existed."""
    if not iv:
        return "-"
    return f"{_f(iv.get('mean'))} [{_f(iv.get('lo'))}, {_f(iv.get('hi'))}] n={iv.get('n')}"


def _played(s: Story) -> str:
    """What a step's rollout count counts: tasks, or episodes when each task is played more than once."""
    repeats = as_object(s.config.get("optimizer")).get("rollouts_per_task") or 1
    return f"episodes ({repeats} per task)" if isinstance(repeats, (int, float)) and repeats > 1 else "tasks"


def _step_lines(s: Story, rec: StepRecord, diffs: bool) -> list[str]:
    step, action = rec.step, rec.action or "?"
    gate = s.gates.get(step) or GateRecord(action=action)
    head = f"  step {step} (epoch {rec.epoch}, step {_q(rec.step_in_epoch)}): {action}"
    if rec.accepted:
        head += f" -> skill v{rec.skill_version or 0:04d}"
    lines = [head]
    lines.append(
        f"    rollout: hard {_f(rec.rollout_hard)}, soft {_f(rec.rollout_soft)} on {_q(rec.rollout_n)} {_played(s)}"
        + (f" ({rec.infra_errors} infra errors{kinds_text(rec.infra_kinds)})" if rec.infra_errors else "")
    )
    if action.startswith("skip"):
        lines.append(
            "    no candidate: "
            + {
                "skip_no_patches": "the analysts proposed no edits",
                "skip_no_rewrite": "the update produced no new skill",
            }.get(action, action)
        )
        return lines
    budget = rec.edit_budget
    lines.append(f"    edits: budget {budget if budget is not None else '-'}; {_edits(rec)}")
    for r in _skipped_reports(s.rd, rec):
        lines.append(f"      {r}")
    cand = gate.candidate_score if gate.candidate_score is not None else rec.candidate_gate_score
    n = gate.tasks_compared if gate.tasks_compared is not None else rec.tasks_compared
    metric = gate.gate_metric or rec.gate_metric or "gate"
    lines.append(
        f"    gate ({metric}): candidate {_f(cand)} vs current {_f(gate.current_score)} (best {_f(gate.best_score)}), "
        f"{n if n is not None else '?'} tasks compared"
    )
    if gate.gate_test:
        lines.append(f"    {paired_text(gate.gate_test)}")
    if gate.reason:
        lines.append(f"    reason: {gate.reason}")
    flips = _flip_text(gate.flipped)
    if flips:
        lines.append(f"    {flips}")
    d = s.diffs.get(step)
    if d is not None:
        plus, minus = _diff_size(d)
        lines.append(f"    diff: +{plus} -{minus} lines ({s.rd.step_dir(*rec.step_id)}/{STEP_DIFF})")
        if diffs and d.strip():
            lines.extend("      " + x for x in d.rstrip("\n").splitlines())
    return lines


def _boundary_lines(e: Optional[EpochRecord]) -> list[str]:
    if not e:
        return []
    lines = []
    slow = e.slow
    if slow is not None:
        text = f"  epoch boundary, slow update: {slow.action}"
        if slow.candidate_full_score is not None and slow.action != "inject_placeholder":
            dec: GateDecisionFields | dict[str, float] = slow.decision or {}
            text += f" (candidate {_f(dec.get('candidate_score', slow.candidate_full_score))} vs current {_f(dec.get('current_score'))})"
        lines.append(text)
        if slow.gate_test:
            lines.append(f"    {paired_text(slow.gate_test)}")
        if slow.reason:
            lines.append(f"    reason: {slow.reason}")
        flips = _flip_text(slow.flipped)
        if flips:
            lines.append(f"    {flips}")
        if slow.error:
            lines.append(f"    error: {slow.error}")
    if e.meta is not None:
        text = f"  epoch boundary, meta skill: {e.meta.action}"
        content = (e.meta_skill or "").strip()
        if content:
            first = content.splitlines()[0]
            text += f" ({len(content)} chars: {first[:60]!r})"
        lines.append(text)
    return lines


def _final_lines(s: Story) -> list[str]:
    sm = s.summary
    if not sm:
        return ["final: not reached yet"]
    if sm.mode == "eval":
        e = sm.eval or {}
        iv = sm.interval("eval", "hard")
        return [
            f"evaluation of {sm.skill_path} on {sm.split}: hard {_f(e.get('hard'))}, soft {_f(e.get('soft'))} (n={e.get('n')})"
            + (f"; hard 95% interval over tasks {interval_text(iv)}" if iv else "")
        ]
    lines = ["final (test split)", f"  {'skill':<8}{'version':>9}{'selection':>11}{'test hard':>11}{'test soft':>11}"]
    versions, sel, test = sm.versions or {}, sm.selection or {}, sm.test or {}
    for k in ("initial", "best", "final"):
        t = test.get(k, {})
        v = versions.get(k)
        lines.append(
            f"  {k:<8}{f'v{v:04d}' if v is not None else '-':>9}{_f(sel.get(k)):>11}{_f(t.get('hard')):>11}{_f(t.get('soft')):>11}"
        )
    if sm.intervals:
        reps = f", {sm.rollouts_per_task} rollouts per task" if sm.rollouts_per_task else ""
        lines.append(f"  95% intervals over tasks (n = tasks{reps}):")
        for k in ("initial", "best", "final"):
            lines.append(
                f"    {k:<8}selection {interval_text(sm.interval('selection', k))}; "
                f"test hard {interval_text(sm.interval('test', k))}"
            )
    c = sm.counts or {}
    lines.append(
        f"  steps {sm.steps}: {c.get('accept', 0)} accepted, {c.get('reject', 0)} rejected, {c.get('skip', 0)} skipped; "
        f"best from {sm.best_origin or '?'}" + (" (final skill promoted)" if sm.final_promoted else "")
    )
    tok = sm.tokens or {}
    lines.append(
        f"  model calls {tok.get('calls', '?')}, tokens {tok.get('tokens', '?')}, cost ${float(tok.get('cost_usd') or 0):.4f}"
    )
    if s.sessions:
        total = sum(float(x.get("wall_s", 0)) for x in s.sessions)
        from skillopt_ray.runs.progress import fmt_duration

        lines.append(
            f"  time: {fmt_duration(total)} over {len(s.sessions)} command{'s' if len(s.sessions) > 1 else ''}"
        )
    return lines


# ---------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em;color:#1f2328;font-size:14px}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.4em 0} td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.accept{color:#1a7f37;font-weight:600} .reject{color:#cf222e;font-weight:600} .skip{color:#6e7781}
details{margin:.3em 0;border:1px solid #d0d7de;border-radius:6px;padding:.3em .6em} summary{cursor:pointer}
pre.diff{background:#f6f8fa;padding:.5em;overflow-x:auto;font-size:12px;line-height:1.35;margin:.4em 0}
pre.diff .add{background:#dafbe1;display:block} pre.diff .del{background:#ffebe9;display:block}
pre.diff .hunk{color:#8250df;display:block} .muted{color:#6e7781}
"""


def _cls(action: str) -> str:
    return "accept" if is_accept(action) else ("reject" if action == "reject" else "skip")


def _diff_html(d: str) -> str:
    rows = []
    for line in d.splitlines():
        e = html.escape(line)
        if line.startswith("+++") or line.startswith("---"):
            rows.append(f'<span class="muted">{e}</span>')
        elif line.startswith("+"):
            rows.append(f'<span class="add">{e}</span>')
        elif line.startswith("-"):
            rows.append(f'<span class="del">{e}</span>')
        elif line.startswith("@@"):
            rows.append(f'<span class="hunk">{e}</span>')
        else:
            rows.append(e)
    body = "".join(
        r if r.endswith("</span>") and ('"add"' in r or '"del"' in r or '"hunk"' in r) else r + "\n" for r in rows
    )
    return f'<pre class="diff">{body or "(no change)"}</pre>'


def skill_history_html(run_dir: str | Path) -> str:
    """One self-contained page: the versions of the current skill with the diff each made, and every step's decision."""
    s = load(run_dir)
    e = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>skill history - {e(s.root.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>Skill history</h1><div class='muted'>{e(s.root.name)}</div>",
    ]
    parts.append(
        "<h2>Versions of the current skill</h2><table><tr><th>version</th><th>made by</th><th>epoch</th><th>step</th>"
        "<th>selection score</th><th>length</th></tr>"
    )
    for v in s.versions:
        parts.append(
            f"<tr><td>v{v.number:04d}</td><td>{e(v.made_by)}</td><td class='num'>{v.epoch if v.epoch is not None else ''}</td>"
            f"<td class='num'>{v.step if v.step is not None else ''}</td><td class='num'>{_f(v.score) if v.score is not None else ''}</td>"
            f"<td class='num'>{len(v.text)}</td></tr>"
        )
    parts.append("</table>")
    parts.append("<h2>Steps</h2>")
    for rec in s.history:
        step, action = rec.step, rec.action or "?"
        gate = s.gates.get(step) or GateRecord(action=action)
        title = f"step {step} (epoch {rec.epoch}, step {_q(rec.step_in_epoch)}): <span class='{_cls(action)}'>{e(action)}</span>"
        if gate.candidate_score is not None:
            title += f" &mdash; candidate {_f(gate.candidate_score)} vs current {_f(gate.current_score)}"
        budget = rec.edit_budget if rec.edit_budget is not None else "-"
        body = [
            f"<div>rollout hard {_f(rec.rollout_hard)} on {_q(rec.rollout_n)} tasks; budget {budget}; edits {e(_edits(rec))}</div>"
        ]
        if gate.reason:
            body.append(f"<div>reason: {e(gate.reason)}</div>")
        flips = _flip_text(gate.flipped, 50)
        if flips:
            body.append(f"<div>{e(flips)}</div>")
        d = s.diffs.get(step)
        if d is not None:
            body.append(_diff_html(d))
        opened = " open" if rec.accepted else ""
        parts.append(f"<details{opened}><summary>{title}</summary>{''.join(body)}</details>")
    boundary = [
        (ep, x.slow)
        for ep, x in sorted(s.epochs.items())
        if x.slow is not None and x.slow.action != "inject_placeholder"
    ]
    if boundary:
        parts.append("<h2>Epoch boundaries</h2>")
        for ep, slow in boundary:
            parts.append(
                f"<details><summary>epoch {ep}: slow update <span class='{_cls(slow.action)}'>{e(slow.action)}</span>"
                f"</summary><div>{e(slow.reason or '')}</div><pre class='diff'>{e(slow.slow_update_content or '')}</pre></details>"
            )
    parts.append("<h2>Diffs between consecutive versions</h2>")
    for prev, cur in zip(s.versions, s.versions[1:]):
        d = diff_text(prev.text, cur.text, f"v{prev.number:04d}", f"v{cur.number:04d}")
        parts.append(
            f"<details><summary>v{prev.number:04d} &rarr; v{cur.number:04d} ({e(cur.made_by)})</summary>{_diff_html(d)}</details>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def _best_skill(rd: RunDir) -> str:
    text = rd.read_text(BEST_SKILL)
    if text is None:
        raise RecordError(f"{rd.root} has no best skill yet ({BEST_SKILL}): the run has not evaluated its first skill")
    return text


def _scores_line(rd: RunDir) -> str:
    s = rd.read_summary()
    if s is None or not s.test or s.selection is None:
        return "unfinished"
    return f"best selection {_f(s.selection.get('best'))}, test hard of the best skill {_f(s.test['best']['hard'])}"


def skill_diff(run_a: str | Path, run_b: str | Path) -> str:
    """The best skills of two runs side by side: each run's scores, then a unified diff (A's best -> B's best)."""
    a, b = RunDir(run_a).check(), RunDir(run_b).check()
    ta, tb = _best_skill(a), _best_skill(b)
    head = [f"A: {a.root.name} ({_scores_line(a)})", f"B: {b.root.name} ({_scores_line(b)})"]
    body = diff_text(ta, tb, f"A/{a.root.name}/{BEST_SKILL}", f"B/{b.root.name}/{BEST_SKILL}")
    return "\n".join(head) + "\n\n" + (body or "the two best skills are identical\n")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m skillopt_ray.report", description="Print a run's story from its run directory."
    )
    ap.add_argument("run_dir", help="outputs/runs/<run name>")
    ap.add_argument(
        "--diff-skill",
        metavar="OTHER_RUN_DIR",
        help="instead of the story, diff this run's best skill against another run's (and print both runs' scores)",
    )
    ap.add_argument("--diffs", action="store_true", help="print each step's diff (current -> candidate)")
    ap.add_argument("--html", metavar="FILE", help="also write the skill history with diffs as an HTML page")
    a = ap.parse_args(argv)
    if a.diff_skill:
        try:
            print(skill_diff(a.run_dir, a.diff_skill), end="")
        except RecordError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        root = RunDir(a.run_dir).check().root
        print(story_text(load(root), diffs=a.diffs))
        page = skill_history_html(root) if a.html else None
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.html and page is not None:
        Path(a.html).write_text(page, encoding="utf-8")
        print(f"skill history written to {a.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
