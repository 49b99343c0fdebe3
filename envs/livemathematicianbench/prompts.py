"""The target's prompts for LiveMathematicianBench, in this project's words.

System: a role line (an expert at multiple-choice questions on research mathematics), the skill section (left out
when the skill is blank), the task format (what to watch in the wording) and the answer format (reason step by step,
then only the choice label in <answer> tags). User: the question and one line per choice, then the theorem and the
proof sketch when the flags ask for them. A later turn (env.max_turns > 1) quotes the previous reply instead.
"""

from __future__ import annotations

from skillopt_envs.livemathematicianbench.data import Choice

SYSTEM_TEMPLATE = """You are an expert mathematician who answers multiple-choice questions about research-level mathematics.

{skill_section}## Task Format
You are given one question and its answer choices; exactly one choice is correct. Read each choice with care:
quantifiers (for all, there exists, for some), the hypotheses each statement keeps or drops, extremal words
(largest, smallest, at most, at least) and whether an inequality or a bound is strict or allows equality.

## Answer Format
Reason step by step first. Then write the label of the single choice you pick, and nothing else, inside
<answer></answer> tags.
Example of the last line of a reply: <answer>B</answer>
"""

RETRY_TEMPLATE = """Your previous reply was:

{previous}

Check the exact wording of each option against the question once more, then give only the label of the choice you
pick inside <answer></answer> tags."""


def skill_section(skill: str) -> str:
    body = (skill or "").strip()
    return f"## Skill\n{body}\n\n" if body else ""


def system_prompt(skill: str) -> str:
    return SYSTEM_TEMPLATE.format(skill_section=skill_section(skill))


def user_prompt(
    question: str,
    choices: list[Choice],
    *,
    theorem: str = "",
    sketch: str = "",
    use_theorem: bool = False,
    use_sketch: bool = False,
) -> str:
    lines = "\n".join(f"{c['label']}. {c['text']}" for c in choices)
    text = f"## Question\n{question}\n\n## Choices\n{lines}"
    if use_theorem and theorem:
        text += f"\n\n## Theorem\n{theorem}"
    if use_sketch and sketch:
        text += f"\n\n## Proof Sketch\n{sketch}"
    return text


def retry_prompt(user: str, previous: str) -> str:
    """A later turn's user message: the question again, the previous reply quoted, the request for the label only."""
    return f"{user}\n\n{RETRY_TEMPLATE.format(previous=previous)}"
