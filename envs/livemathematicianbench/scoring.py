"""LiveMathematicianBench scoring as the reference does it: extract the answer, parse a choice label, exact match.

Extraction: the last <answer>...</answer> (any case, across lines), else the reply's last non-empty line, else the
stripped reply. Label parsing, in order: the normalised text is a choice label; the text equals a choice's text
(ignoring case); the first whitespace token, normalised, is a choice label; else the normalised text as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from skillopt_envs.base import EpisodeResult, Task
from skillopt_envs.livemathematicianbench.data import Choice, normalize_label

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_OPEN_TAG = re.compile(r"<answer>", re.IGNORECASE)


def extract_answer(reply: str) -> str:
    reply = reply or ""
    tagged = _ANSWER.findall(reply)
    if tagged:
        return tagged[-1].strip()
    stripped = reply.strip()
    lines = [ln.strip() for ln in stripped.splitlines() if ln.strip()]
    return lines[-1] if lines else stripped


def has_answer_tag(reply: str) -> bool:
    """The reference's stop test for later turns: the reply contains an <answer> tag."""
    return bool(_OPEN_TAG.search(reply or ""))


def parse_label(answer: str, choices: list[Choice]) -> str:
    labels = {normalize_label(c.get("label")) for c in choices}
    norm = normalize_label(answer)
    if norm in labels:
        return norm
    wanted = answer.strip().lower()
    for c in choices:
        text = str(c.get("text") or "")
        if text and text.strip().lower() == wanted:
            return normalize_label(c.get("label"))
    tokens = answer.split()
    if tokens and normalize_label(tokens[0]) in labels:
        return normalize_label(tokens[0])
    return norm


@dataclass(frozen=True)
class MCQScore:
    extracted: str
    label: str
    predicted_text: str
    correct_label: str
    correct_text: str
    em: float

    @property
    def predicted_answer(self) -> str:
        """The predicted label, or the extracted text when no label came out."""
        return self.label or self.extracted

    @property
    def fail_reason(self) -> str:
        if self.em:
            return ""
        return f"MCQ=0: predicted '{self.predicted_answer}' but expected '{self.correct_label}'"


def score_reply(reply: str, choices: list[Choice], correct: Choice) -> MCQScore:
    extracted = extract_answer(reply)
    label = parse_label(extracted, choices)
    correct_label = normalize_label(correct.get("label"))
    predicted_text = next(
        (str(c.get("text") or "") for c in choices if label and normalize_label(c.get("label")) == label), ""
    )
    return MCQScore(
        extracted=extracted,
        label=label,
        predicted_text=predicted_text,
        correct_label=correct_label,
        correct_text=str(correct.get("text") or ""),
        em=1.0 if label == correct_label else 0.0,
    )


def evaluation_block(question: str, s: MCQScore) -> str:
    """The verification entry the analysts see after the reply."""
    return "\n".join(
        [
            "[EVALUATION RESULT]",
            f"Question: {question}",
            f"Predicted label: {s.label!r}",
            f"Predicted text: {s.predicted_text!r}",
            f"Correct label: {s.correct_label!r}",
            f"Correct text: {s.correct_text!r}",
            f"Exact Match: {s.em}",
        ]
    )


def scored_episode(
    task: Task,
    system: str,
    user: str,
    choices: list[Choice],
    correct: Choice,
    replies: list[str],
    **info: Any,
) -> EpisodeResult:
    """The last reply's choice scored (exact match), with the trajectory and prompts the optimizer reads; `info`
    adds what the target's protocol knows (the chat target's choice seed, an agent's turns)."""
    s = score_reply(replies[-1], choices, correct)
    return EpisodeResult(
        task.task_id,
        task.task_type,
        hard=float(int(s.em)),
        soft=s.em,
        fail_reason=s.fail_reason,
        n_turns=len(replies),
        # the reference records the replies and the verification entry, no user entry
        trajectory=[
            *({"type": "message", "turn": k, "content": r} for k, r in enumerate(replies, start=1)),
            {"role": "system", "content": evaluation_block(task.payload["question"], s)},
        ],
        # the reference's results carry no task text: the analysts' `Task:` line is empty
        task_description="",
        info={
            "target_system_prompt": system,
            "target_user_prompt": user,
            "predicted_answer": s.predicted_answer,
            "predicted_label": s.label,
            "predicted_text": s.predicted_text,
            "correct_label": s.correct_label,
            "correct_text": s.correct_text,
            "response": replies[-1],
            "agent_ok": True,
            **info,
        },
    )
