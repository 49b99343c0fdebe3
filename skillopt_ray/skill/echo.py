"""A rewritten skill that copies the optimizer prompt's own scaffolding is not a skill.

A small rewriter sometimes answers with the prompt's section headings ("Current Skill", "Selected Revise
Suggestions", ...) or a literal `[...]` where content should be. Such a document tells the target nothing new and
spends a whole selection rollout on the gate; `optimizer.refuse_echoed_rewrites` refuses it before the gate.
"""

from __future__ import annotations

import re
from typing import Optional

# The section headings of the prompts that the rewriter and the full-rewrite analysts and mergers read
# (skillopt_ray/prompts): a skill for the target has no use for any of them.
PROMPT_HEADINGS = (
    "Current Skill",
    "Selected Revise Suggestions",
    "Previous Steps in This Epoch",
    "Update Format",
    "Edits Budget",
    "Suggestions Budget",
    "Failed Trajectories",
    "Successful Trajectories",
    "Patches to merge",
    "Two pre-merged candidate groups to combine",
    "Two pre-merged patch groups to combine",
    "Optimizer Meta Skill",
)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]*(.+?)[ \t#]*$", re.MULTILINE)
# `[...]` or `[…]` standing for left-out text; `x[...]` (Python's Ellipsis index) is code, not a placeholder
_PLACEHOLDER = re.compile(r"(?<![\w\])])\[[ \t]*(?:\.\.\.|…)[ \t]*\]")


def _prompt_headings(text: str) -> list[str]:
    """The prompt headings among `text`'s Markdown headings, as written there."""
    found = []
    for m in _HEADING.finditer(text):
        title = m.group(1).strip().lower()
        if any(title.startswith(h.lower()) for h in PROMPT_HEADINGS):
            found.append(m.group(0).strip())
    return found


def prompt_echo(candidate: str, current: str) -> Optional[str]:
    """Why `candidate` is an echo of the prompt rather than a skill, or None. Only what the rewrite introduced
    counts: a heading or placeholder the current skill already holds is the skill's own text."""
    new_headings = [h for h in _prompt_headings(candidate) if h not in _prompt_headings(current)]
    if new_headings:
        return f"it copies the optimizer prompt's heading {new_headings[0]!r}"
    if len(_PLACEHOLDER.findall(candidate)) > len(_PLACEHOLDER.findall(current)):
        return "it holds a literal '[...]' placeholder where text should be"
    return None
