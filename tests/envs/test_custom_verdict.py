"""What the analysts read about a script-scored custom task: the check read the whole reply, so the verdict quotes no
"answer" taken from it, and the check's own FAIL lines lead (the trajectory text and the failure-reason header).
Other scorers keep the verdict laid out as the reference's."""

from __future__ import annotations

from pathlib import Path

import pytest
from custom_helpers import FakeLLM, bench, play, write_jsonl

from skillopt_ray.prompts.render import trajectory_block

CHECK = Path(__file__).resolve().parents[2] / "examples" / "python-functions" / "check.py"
TESTS = [[[[1, 2, 2]], 1.67], [[[]], None]]
PROSE = "This function adds the numbers and divides by how many there are."

pytestmark = pytest.mark.usefixtures("needs_bwrap")  # checks run in the sandbox

REPLY = f"```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```\n\n{PROSE}"


def _script_bench(tmp_path: Path):
    rows = [
        {"id": f"mean_{s}", "prompt": "Write `mean(xs)`.", "split": s, "metadata": {"function": "mean", "tests": TESTS}}
        for s in ("train", "val", "test")
    ]
    return bench(write_jsonl(tmp_path / "t.jsonl", rows), scorer="script", check=str(CHECK))


def test_a_script_verdict_says_the_check_read_the_whole_reply_and_leads_with_its_fail_lines(tmp_path):
    r = play(_script_bench(tmp_path), "train", FakeLLM(REPLY))
    verdict = r.trajectory[-1]["content"]
    assert r.scored and r.hard == 0.0 and r.soft == 0.0
    assert "Answer taken from the reply" not in verdict and PROSE not in verdict
    assert "The check read: the whole reply" in verdict
    fail_round = "FAIL mean([1, 2, 2]) returned 1.6666666666666667, expected 1.67"
    fail_empty = "FAIL mean([]) raised ZeroDivisionError: division by zero"
    assert fail_round in verdict and fail_empty in verdict
    assert verdict.index(fail_round) < verdict.index("Verdict: the check printed 0")
    assert r.fail_reason == f"script=0.000: {fail_round}"
    assert r.info["predicted_answer"] == REPLY.strip()  # what the check read, not the closing prose
    shown = trajectory_block(r, 1)  # the text an analyst gets for this episode
    assert f"Failure reason: script=0.000: {fail_round}" in shown and "Answer taken" not in shown


def test_a_check_that_prints_only_its_score_is_named_by_its_verdict(tmp_path):
    check = tmp_path / "check.py"
    check.write_text("print(0.25)\n")
    rows = [{"id": f"q{s}", "prompt": "p", "split": s} for s in ("train", "val", "test")]
    b = bench(write_jsonl(tmp_path / "t.jsonl", rows), scorer="script", check=str(check))
    r = play(b, "train", FakeLLM("anything\n\nlast paragraph"))
    assert r.fail_reason == "script=0.250: the check printed 0.25"
    assert "last paragraph" in r.trajectory[1]["content"] and "'last paragraph'" not in r.trajectory[-1]["content"]


def test_other_scorers_still_quote_the_answer_they_compared(tmp_path):
    rows = [{"id": f"q{s}", "prompt": "Capital?", "answer": "Paris", "split": s} for s in ("train", "val", "test")]
    r = play(bench(write_jsonl(tmp_path / "t.jsonl", rows)), "train", FakeLLM("Hmm.\n<answer>Lyon</answer>"))
    verdict = r.trajectory[-1]["content"]
    assert "Answer taken from the reply: 'Lyon'\nExpected: ['Paris']" in verdict
    assert r.info["predicted_answer"] == "Lyon" and r.fail_reason.startswith("exact_match=0.000: ")
