"""The target's prompt for SearchQA, laid out as the reference's, in this project's words.

System: a one-line role, the skill section (left out when the skill is blank), the task format and the
answer format (reason step by step first, then a short answer in <answer> tags). User: the context, then
the question.
"""

from __future__ import annotations

SYSTEM_TEMPLATE = """You are a careful question-answering agent who answers questions using search results.

{skill_section}## Task Format
You are given a context made of search-result passages and a question. Work out the answer from what
the passages say.

## Answer Format
Think it through step by step first: find the passages that bear on the question and reason about
what they say. Then give your final answer inside <answer></answer> tags. Keep the answer short (a
name, a number, a few words or a short phrase); do not repeat the question and do not explain inside
the tags.
Example of the last line of a reply: <answer>Mount Kilimanjaro</answer>
"""


def skill_section(skill: str) -> str:
    body = (skill or "").strip()
    return f"## Skill\n{body}\n\n" if body else ""


def system_prompt(skill: str) -> str:
    return SYSTEM_TEMPLATE.format(skill_section=skill_section(skill))


def user_prompt(context: str, question: str) -> str:
    return f"## Context\n{context}\n\n## Question\n{question}"
