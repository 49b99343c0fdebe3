"""The target's prompts for OfficeQA, in this project's words (the reference's contents, not its wording).

Offline with tools (the paper setting): the system message is a role line, the skill section, six rules,
how to use the tools and the answer format; the user message is the question, the oracle pages (when
parsed pages exist), the candidate files (first 20) and the source hints (the page URLs).
"""

from __future__ import annotations

import json
import re
from typing import Optional

from skillopt_envs.chat import ToolCall

MAX_CANDIDATES_SHOWN = 20

SYSTEM_TOOLS = """You are an OfficeQA agent: you answer questions about U.S. Treasury Bulletins by working over the local text files of the parsed bulletins.

{skill_section}## Rules
1. Work only with the local document tools; nothing else is available.
2. First narrow the search to the file most likely to hold the answer.
3. Prefer short, targeted searches, then read small windows around what they find.
4. Never state a value that the retrieved text does not support.
5. Do arithmetic only after you have extracted every operand exactly as printed.
6. Once the evidence is sufficient, give the final answer inside <answer>...</answer>.

## Tool Use
Call the function tools (glob, grep, read) directly. Search and read before you answer, and never ask for permission to use a tool.

## Final Answer Format
Put the final answer inside <answer>...</answer> and request no further tool in that reply."""

SYSTEM_NO_TOOLS = """You answer questions about U.S. Treasury Bulletins from the parsed oracle pages and the hints given with the question. There is no external search and there are no function tools. Give the final answer inside <answer>...</answer>.

{skill_section}"""

# the embedded model's llama.cpp server gets the tools as a text protocol (its chat template has no tool calls)
TEXT_PROTOCOL = """## Tool Protocol
Function tools are not available over this connection: to call a tool, write one line per call
<tool_call>{"name": "grep", "arguments": {"pattern": "gold", "path": "/abs/path/file.txt"}}</tool_call>
with name glob (arguments: pattern), read (arguments: path, start, limit) or grep (arguments: pattern, path).
The results come back in the next message. A reply with a tool call ends there."""

_TEXT_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.IGNORECASE | re.DOTALL)


def skill_section(skill: str) -> str:
    body = (skill or "").strip()
    return f"## Skill\n{body}\n\n" if body else ""


def system_prompt(skill: str, use_tools: bool = True, text_protocol: bool = False) -> str:
    if not use_tools:
        return SYSTEM_NO_TOOLS.format(skill_section=skill_section(skill)).rstrip()
    text = SYSTEM_TOOLS.format(skill_section=skill_section(skill))
    return text + "\n\n" + TEXT_PROTOCOL if text_protocol else text


def user_prompt(
    question: str,
    oracle: str,
    candidates: Optional[list[str]],
    source_docs: list[str],
    source_files: list[str],
    offline: bool = True,
    corpus_note: str = "",
    tail: str = "",
) -> str:
    """Sections joined by blank lines: question, oracle pages (if any), corpus note and candidates (offline),
    source hints (the page URLs), file hints (other modes), the mode's tail."""
    parts = [f"## Question\n{question}"]
    if oracle:
        parts.append(f"## Oracle Parsed Pages\n{oracle}")
    if offline:
        if corpus_note:
            parts.append(f"## Document Corpus\n{corpus_note}")
        shown = (candidates or [])[:MAX_CANDIDATES_SHOWN]
        parts.append("## Candidate Files\n" + ("\n".join(f"- {c}" for c in shown) if shown else "- none resolved"))
    if source_docs:
        parts.append("## Source Hints\n" + "\n".join(f"- {d}" for d in source_docs))
    if not offline and source_files:
        parts.append("## File Hints\n" + "\n".join(f"- {f}" for f in source_files))
    if tail:
        parts.append(tail)
    return "\n\n".join(parts)


def text_tool_calls(reply: str) -> list[ToolCall]:
    """Tool calls written in the text protocol, in the API's shape (arguments as a JSON string)."""
    calls: list[ToolCall] = []
    for i, raw in enumerate(_TEXT_CALL.findall(reply or "")):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            args = data.get("arguments")
            calls.append(
                {
                    "id": f"text_{i}",
                    "type": "function",
                    "function": {"name": data["name"], "arguments": json.dumps(args if args is not None else {})},
                }
            )
        else:
            calls.append({"id": f"text_{i}", "type": "function", "function": {"name": "", "arguments": raw.strip()}})
    return calls


def text_tool_results(results: list[tuple[str, str]]) -> str:
    """The text protocol's reply to a turn's calls: each command and its result."""
    return "## Tool Results\n" + "\n\n".join(f"### {cmd}\n{obs}" for cmd, obs in results)
