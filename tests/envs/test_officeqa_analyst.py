"""What OfficeQA's analysts see: the whole tool trajectory ([action] command / [obs] observation), the failure
reason with the gold, the target prompts; and the length guard cutting tool observations between lines."""

from __future__ import annotations

import re

from skillopt_envs.base import EpisodeResult

from skillopt_ray.prompts.length_guard import COMMAND_KEEP, LengthGuard, cut_lines, shrink_result
from skillopt_ray.prompts.render import trajectory_block

ROWS = "".join(f"{n}: | Gold stock, month {n} | {n * 1111:,}.5 |\n" for n in range(1, 121))


def _episode() -> EpisodeResult:
    cmd = "grep(pattern='gold stock', path='/corpus/transformed/treasury_bulletin_1944_01.txt')"
    return EpisodeResult(
        "UID0002",
        "easy",
        fail_reason="predicted '1' but expected '2,222.5'",
        n_turns=4,
        trajectory=[
            {"role": "user", "content": "## Question\nWhat was the gold stock?"},
            {"type": "message", "content": ""},
            {"type": "tool_call", "command": cmd, "output": ROWS},
            {"type": "message", "content": "<answer>1</answer>"},
        ],
        task_description="What was the gold stock?",
        info={"target_system_prompt": "SYSTEM", "target_user_prompt": "## Question\nWhat was the gold stock?"},
    )


def test_the_analyst_block_shows_every_call_and_observation_and_the_gold_in_the_failure():
    text = trajectory_block(_episode(), 1)
    assert "Task type: easy\nFailure reason: predicted '1' but expected '2,222.5'\nSteps: 4" in text
    assert "#### Target System Prompt\nSYSTEM" in text and "[user] ## Question" in text
    assert "[action] grep(pattern='gold stock', path='/corpus/transformed/treasury_bulletin_1944_01.txt')" in text
    assert "[obs]    1: | Gold stock, month 1 | 1,111.5 |" in text and "120: | Gold stock, month 120" in text
    assert text.rstrip().endswith("[agent] <answer>1</answer>")
    assert "[verification]" not in text  # OfficeQA has no verification entry


def test_cut_lines_keeps_whole_lines():
    cut = cut_lines(ROWS, 600)
    kept = [ln for ln in cut.splitlines() if not ln.startswith("[…")]
    assert set(kept) <= set(ROWS.splitlines()) and kept[0].startswith("1: ") and kept[-1].startswith("120: ")
    assert re.search(r"\[… \d+ lines \([\d,]+ characters\) cut by the length guard …\]", cut)
    assert len(cut) < 700 and cut_lines("short", 10) == "short"


def test_the_guard_keeps_tool_observations_legible():
    r = _episode()
    small = shrink_result(r, 300)
    call = small.trajectory[2]
    assert call["command"] == r.trajectory[2]["command"]  # the command is never cut below COMMAND_KEEP
    lines = call["output"].splitlines()
    whole = set(ROWS.splitlines())
    assert all(ln in whole for ln in lines if not ln.startswith("[…")) and any(ln.startswith("[…") for ln in lines)
    guard = LengthGuard(prompt_tokens=900)
    user = guard.analyst_user([r], "system", lambda body: f"## Trajectories\n{body}")
    obs = user.split("[obs]    ", 1)[1].split("\n[agent]", 1)[0]
    assert all(ln in whole or ln.startswith("[…") for ln in obs.splitlines())
    assert "[action] grep(pattern='gold stock'" in user and COMMAND_KEEP >= len(r.trajectory[2]["command"])
