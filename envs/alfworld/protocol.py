"""The ALFWorld target protocol, as the reference's: what the target reads each step and how its reply
becomes a game command.

Prompt: a one-line system prompt; the user message is the skill section followed by the observation
template (a first-step form, and a later-step form that shows the step count and the most recent history
records). The reply is reasoning in <think> tags, then one command in <action> tags; the command sent to
the game is the lowercased text of the first <action> tag, and `look` when the reply is empty or has no
tag. Transport and API errors are not replies: they propagate and the episode becomes an infra error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from skillopt_envs.chat import ChatMessage
from skillopt_envs.jsontypes import JSONObject

SYSTEM_PROMPT = "You are an expert agent who completes household tasks in the ALFRED text environment."
ROLE_LINE = "You are an expert household agent acting in the ALFRED text world."
SKILL_HEADING = "## Skill Knowledge"
SKILL_INTRO = "Below is a strategy document learned from earlier episodes; let it guide every choice you make."
REPLY_INSTRUCTION = (
    "First think about the situation and what to do next, and write that reasoning between <think> and </think>. "
    "Then pick exactly one action from the admissible actions above and write it between <action> and </action>."
)
FALLBACK_COMMAND = "look"
EMPTY_REPLY_NOTE = "(the model's reply was empty; `look` was played)"
NO_TAG_NOTE = "(the reply had no <action>...</action> tag; `look` was played)"

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)  # case-sensitive, as the instruction spells the tags
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Record:
    """One history record: the observation the target saw and the command that was sent after it."""

    observation: str
    action: str


@dataclass(frozen=True)
class ParsedReply:
    command: str  # what the game receives: lowercased, or `look`
    action: str  # as the target wrote it (stripped, case kept); `look` for the fallback
    reasoning: Optional[str]  # the <think> content, a note for the fallbacks, else None
    format_ok: bool  # both think tags present and no CJK characters; recorded, never scored
    fallback: bool  # True when `look` was substituted for a missing action


def goal_text(first_observation: str) -> str:
    """The text after 'Your task is to: ' in the first observation ('' when absent)."""
    marker = "Your task is to: "
    i = first_observation.find(marker)
    if i < 0:
        return ""
    return first_observation[i + len(marker) :].splitlines()[0].strip()


def format_admissible(actions: list[str]) -> str:
    """Each action in single quotes, one per line after a leading space, in brackets; `help` removed."""
    return "[" + "\n ".join(f"'{a}'" for a in actions if a != "help") + "]"


def visible_actions(actions: list[str]) -> list[str]:
    return [a for a in actions if a != "help"]


def skill_section(skill: str) -> str:
    if not skill.strip():
        return ""
    return f"\n\n{SKILL_HEADING}\n{SKILL_INTRO}\n\n{skill}\n"


def observation_prompt(task: str, memory: list[Record], observation: str, admissible: list[str], window: int) -> str:
    """The observation template: first step when `memory` is empty, else the later-step form with the last
    `window` records numbered over the whole episode (1-based)."""
    actions = format_admissible(admissible)
    if not memory:
        return (
            f"\n{ROLE_LINE}\n"
            f"Your current observation is:\n{observation}\n\n"
            f"The admissible actions right now are:\n{actions}\n\n"
            f"{REPLY_INSTRUCTION}"
        )
    shown = memory[-window:] if window > 0 else []
    first_k = len(memory) - len(shown) + 1
    lines = [
        f"[Observation {first_k + i}: '{r.observation}', Action {first_k + i}: '{r.action}']"
        for i, r in enumerate(shown)
    ]
    recent = (
        (f"The {len(shown)} most recent observations and the action you took after each:\n" + "\n".join(lines))
        if shown
        else "No earlier observations are shown."
    )
    return (
        f"{ROLE_LINE} Your task is to: {task}\n"
        f"You have taken {len(memory)} step(s) so far. {recent}\n"
        f"You are now at step {len(memory) + 1}, and your current observation is:\n{observation}\n\n"
        f"The admissible actions right now are:\n{actions}\n\n"
        f"{REPLY_INSTRUCTION}"
    )


def user_prompt(
    skill: str, task: str, memory: list[Record], observation: str, admissible: list[str], window: int
) -> str:
    return skill_section(skill) + "\n" + observation_prompt(task, memory, observation, admissible, window)


def build_messages(
    skill: str, task: str, memory: list[Record], observation: str, admissible: list[str], window: int = 2
) -> list[ChatMessage]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(skill, task, memory, observation, admissible, window)},
    ]


def _format_ok(reply: str) -> bool:
    return "<think>" in reply and "</think>" in reply and not _CJK.search(reply)


def _reasoning(reply: str) -> Optional[str]:
    m = _THINK.search(reply)
    return m.group(1).strip() if m else None


def parse_reply(reply: Optional[str]) -> ParsedReply:
    """Tagged reply -> command. Empty reply or no <action> tag -> `look` (with a note as the reasoning)."""
    text = reply or ""
    if not text.strip():
        return ParsedReply(FALLBACK_COMMAND, FALLBACK_COMMAND, EMPTY_REPLY_NOTE, False, True)
    m = _ACTION.search(text)
    if m is None:
        return ParsedReply(FALLBACK_COMMAND, FALLBACK_COMMAND, NO_TAG_NOTE, _format_ok(text), True)
    action = m.group(1).strip()
    return ParsedReply(action.lower(), action, _reasoning(text), _format_ok(text), False)


def parse_constrained_reply(reply: Optional[str]) -> ParsedReply:
    """A schema-constrained reply `{"action": ...}` (embedded model); anything else is parsed as a tagged reply."""
    from skillopt_envs.kit import extract_json

    try:
        obj = extract_json(reply or "")
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("action"), str) and obj["action"].strip():
        action = obj["action"].strip()
        return ParsedReply(action.lower(), action, None, False, False)
    return parse_reply(reply)


def action_schema(admissible: list[str]) -> JSONObject:
    """JSON schema whose only field is one of the admissible actions (constrained decoding)."""
    return {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": visible_actions(admissible)}},
        "required": ["action"],
        "additionalProperties": False,
    }
