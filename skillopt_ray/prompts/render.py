"""Text the optimizer reads, laid out as the reference lays it out: trajectories, the step buffer, the
longitudinal comparison and the meta-skill block. Nothing is truncated."""

from __future__ import annotations

from typing import Any, TypedDict

from skillopt_envs.base import EpisodeResult

from skillopt_ray.runs.state import BufferEntry, RejectedItem


class PairSide(TypedDict):
    """One side of a longitudinal pair: how the task went under one epoch's skill."""

    hard: float
    soft: float
    predicted_answer: object  # what the benchmark's info recorded as the answer, shown as text
    fail_reason: str


class EpochPair(TypedDict):
    """One task played under the previous and the current epoch's skill (the slow update's comparison)."""

    id: str
    task: str
    category: str  # improved | regressed | persistent_fail | stable_success
    prev: PairSide
    curr: PairSide
    prev_trajectory: str
    curr_trajectory: str


# Sub-blocks every chat benchmark can fill; a benchmark adds its own as info["analyst_blocks"] ([title, text] pairs).
PROMPT_BLOCKS = (("Target System Prompt", "target_system_prompt"), ("Target User Prompt", "target_user_prompt"))


def sub_blocks(info: dict[str, Any]) -> list[tuple[str, str]]:
    """The titled blocks shown under a trajectory's header, in order: the target's prompts, then the benchmark's own."""
    blocks = [(title, str(info[key])) for title, key in PROMPT_BLOCKS if info.get(key)]
    return blocks + [(str(title), str(text)) for title, text in info.get("analyst_blocks") or [] if text]


def conversation_text(entries: list[Any]) -> str:
    """One or more lines per conversation entry, by the entry's shape."""
    lines: list[str] = []
    for e in entries:
        if not isinstance(e, dict):
            lines.append(f"[agent] {e}")
        elif e.get("type") == "tool_call":
            lines += [f"[action] {e.get('command', '')}", f"[obs]    {e.get('output', '')}"]
        elif "action" in e and "env_feedback" in e:
            s = e.get("step", "")
            if e.get("reasoning"):
                lines.append(f"[step {s} think] {e['reasoning']}")
            lines += [f"[step {s} action] {e['action']}", f"[step {s} obs]    {e['env_feedback']}"]
        elif e.get("role") == "system":
            lines.append(f"[verification] {e.get('content', '')}")
        else:
            lines.append(f"[{e.get('role') or 'agent'}] {e.get('content', '')}")
    return "\n".join(lines)


def trajectory_block(r: EpisodeResult, idx: int) -> str:
    head = [
        f"### Trajectory {idx} (id={r.task_id})",
        f"Task: {r.task_description}",
        f"Task type: {r.info.get('header_task_type', r.task_type)}",
    ]
    repeats = int(r.info.get("repeats") or 1)
    if repeats > 1:  # optimizer.rollouts_per_task > 1: say which attempt this is (the reference plays one)
        head.append(
            f"Attempt: {r.info.get('repeat')} of {repeats} independent attempts at this task with the same skill"
        )
    if r.fail_reason:
        head.append(f"Failure reason: {r.fail_reason}")
    head.append(f"Steps: {r.n_turns}")
    text = "\n".join(head) + "\n"
    for title, body in sub_blocks(r.info):
        text += f"\n#### {title}\n{body.rstrip(chr(10))}\n"
    return text + "\n" + conversation_text(r.trajectory)


def minibatch_text(results: list[EpisodeResult]) -> str:
    """Blocks of the items that have a conversation; the index counts skipped items (gaps possible)."""
    blocks = [trajectory_block(r, i) for i, r in enumerate(results, start=1) if r.trajectory]
    return "\n\n---\n\n".join(blocks)


# ---------- step buffer ----------

STEP_BUFFER_PREAMBLE = (
    "What follows summarises the earlier steps of this epoch: do not propose again edits that were "
    "rejected, and concentrate on the failure patterns that are still open.\n"
)


def _rejected_line(i: int, item: RejectedItem) -> str:
    if "op" in item:
        if item.get("target"):
            return f'    {i}. [{item["op"]}] target="{item["target"]}" → "{item.get("content", "")}"'
        return f'    {i}. [{item["op"]}] "{item.get("content", "")}"'
    return f'    {i}. [{item.get("type", "?")}] "{item.get("title", "")}" → "{item.get("instruction", "")}"'


def step_buffer_text(entries: list[BufferEntry]) -> str:
    if not entries:
        return ""
    lines = [STEP_BUFFER_PREAMBLE]
    for e in entries:
        lines.append(f"### Step {e['step']} — {e['action'].upper()} ({e['n_fail']}/{e['n_total']} failed)")
        for p in e.get("failure_patterns", []):
            lines.append(f'  - "{p["pattern"]}" (×{p["count"]}, tasks: {", ".join(map(str, p["task_ids"]))})')
        if e.get("rejected_edits"):
            lines.append(f"  Rejected edits (score {e['score_before']} → {e['score_after']}):")
            lines += [_rejected_line(i, it) for i, it in enumerate(e["rejected_edits"], start=1)]
    return "\n".join(lines)


# ---------- meta skill ----------


def meta_skill_block(content: str) -> str:
    if not content:
        return ""
    return (
        "## Optimizer Meta Skill\nThis is memory for the optimizer, learned in earlier epochs on this same environment. "
        "Let it shape how you propose, merge and rank updates, and lean on it when the evidence is unclear — but not "
        "against trajectories that clearly contradict it.\n\n" + content
    )


# ---------- longitudinal comparison ----------

SECTIONS = (
    ("regressed", "### Regressions (right→wrong) — HIGHEST PRIORITY", True),
    ("persistent_fail", "### Persistent Failures (wrong→wrong)", True),
    ("improved", "### Improvements (wrong→right)", True),
    ("stable_success", "### Stable Successes (right→right)", False),
)


def _side(label: str, s: PairSide) -> str:
    verdict = "PASS" if s.get("hard") else "FAIL"
    return f"- {label} epoch: {verdict} (soft={float(s.get('soft') or 0):.2f}) — answer: {s.get('predicted_answer', 'N/A')}"


def _pair_entry(p: EpochPair, with_trajectories: bool) -> str:
    lines = [f"#### Task {p['id']}: {p['task']}", _side("Prev", p["prev"]), _side("Curr", p["curr"])]
    if p["curr"].get("fail_reason"):
        lines.append(f"- Curr fail reason: {p['curr']['fail_reason']}")
    if not p["prev"].get("hard") and p["prev"].get("fail_reason"):
        lines.append(f"- Prev fail reason: {p['prev']['fail_reason']}")
    text = "\n".join(lines)
    if with_trajectories:
        blocks = [
            f"**{title}:**\n```\n{text}\n```"
            for title, text in (
                ("Previous epoch trajectory", p.get("prev_trajectory")),
                ("Current epoch trajectory", p.get("curr_trajectory")),
            )
            if text
        ]
        if blocks:
            text += "\n\n" + "\n".join(blocks)
    return text


def comparison_text(pairs: list[EpochPair]) -> str:
    count = {c: sum(p["category"] == c for p in pairs) for c, _, _ in SECTIONS}
    parts = [
        "## Longitudinal Comparison Summary\n"
        f"Total samples: {len(pairs)}\n"
        f"- Improved (wrong→right): {count['improved']}\n"
        f"- Regressed (right→wrong): {count['regressed']}\n"
        f"- Persistent failures (wrong→wrong): {count['persistent_fail']}\n"
        f"- Stable successes (right→right): {count['stable_success']}"
    ]
    for cat, heading, with_traj in SECTIONS:
        entries = [_pair_entry(p, with_traj) for p in pairs if p["category"] == cat]
        parts.append(heading + "\n" + ("\n\n".join(entries) if entries else "(none)"))
    return "\n\n".join(parts)
