"""What the analysts see of an agent run: a short summary of its transcript, never the raw event stream."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

_LABEL = re.compile(r"<answer>\s*([A-E])\s*</answer>", re.IGNORECASE)
_TAG = re.compile(r"<answer>", re.IGNORECASE)


def _read_status(lines: list[str], needle: str) -> str:
    """success / failed / unknown for the first `exec` line mentioning `needle`, judged by the two lines after it."""
    for i, line in enumerate(lines):
        if line.strip() == "exec" and i + 1 < len(lines):  # newer Codex prints the command on the next line
            line, i = line + " " + lines[i + 1], i + 1
        if line.startswith("exec") and needle in line:
            after = " ".join(lines[i + 1 : i + 3])
            if "succeeded" in after:
                return "success"
            if "failed" in after or "ERROR" in after:
                return "failed"
            return "unknown"
    return "unknown"


def answer_format(reply: str) -> tuple[str, str]:
    """(format, label) of a final answer: well_formed (a single letter A-E), tagged_nonlabel, plain_text, missing."""
    m = _LABEL.search(reply or "")
    if m:
        return "well_formed", m.group(1).upper()
    if _TAG.search(reply or ""):
        return "tagged_nonlabel", "(none)"
    return ("plain_text" if (reply or "").strip() else "missing"), "(none)"


def codex_trace_summary(transcript: str, reply: str) -> str:
    """The reference's Codex trace summary of a human-readable `codex exec` transcript."""
    lines = transcript.splitlines()
    out = ["Codex Trace Summary"]
    for prefix, name in (("sandbox: ", "sandbox"), ("reasoning effort: ", "reasoning")):
        hit = next((ln for ln in lines if ln.startswith(prefix)), None)
        if hit is not None:
            out.append(f"- {name}: {hit[len(prefix) :].strip()}")
    out.append(f"- read task.md: {_read_status(lines, 'task.md')}")
    out.append(f"- read SKILL.md: {_read_status(lines, 'SKILL.md')}")
    errors = [ln.split("ERROR:", 1)[1].strip() for ln in lines if "ERROR:" in ln][:3]
    out.append(f"- shell/tool errors: {' | '.join(errors) if errors else 'none'}")
    fmt, label = answer_format(reply)
    out.append(f"- final answer format: {fmt}")
    out.append(f"- final answer label: {label}")
    tokens = next((lines[i + 1].strip() for i, ln in enumerate(lines[:-1]) if ln.strip() == "tokens used"), "")
    if tokens:
        out.append(f"- tokens used: {tokens}")
    return "\n".join(out)


def claude_trace_summary(reply: str, transcript: str) -> str:
    """Answer format, response length and up to three error lines (stored; the reference shows it to no one)."""
    fmt = "tagged" if _TAG.search(reply or "") else ("plain_text" if (reply or "").strip() else "missing")
    errs = [ln.strip() for ln in transcript.splitlines() if re.search(r"error|traceback", ln, re.IGNORECASE)][:3]
    return "\n".join(
        ["Claude Trace Summary", f"- final answer format: {fmt}", f"- response length: {len(reply or '')}"]
        + [f"- error: {e[:200]}" for e in errs]
    )


@dataclass
class AgentTrace:
    """An agent run read from its own session log: the commands it ran, files it read, tool errors, usage."""

    commands: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    tool_errors: list[str] = field(default_factory=list)  # a tool the harness could not run (not a command's exit 1)
    final_message: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    usage_reports: int = 0

    def render(self, limit: int = 12) -> str:
        """The analysts' view: commands, files read, errors, final message (each list cut at `limit`)."""

        def block(title: str, items: list[str]) -> list[str]:
            if not items:
                return [f"- {title}: none"]
            more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
            return [f"- {title}{more}:"] + [f"  - {i[:200]}" for i in items[:limit]]

        return "\n".join(
            block("commands run", self.commands)
            + block("files read", self.files_read)
            + block("tool errors", self.tool_errors)
            + [f"- final message: {self.final_message.strip()[:400] or '(empty)'}"]
        )


_READERS = re.compile(r"^\s*(?:cat|head|tail|less|more|sed -n [^ ]+|nl|wc(?: -\w)?)\s+([^\s|;&<>]+)")


def _files_of(cmd: str) -> list[str]:
    m = _READERS.match(cmd)
    return [m.group(1).strip("'\"")] if m else []


def codex_session_trace(events: list[dict[str, Any]]) -> AgentTrace:
    """Read Codex's rollout log (`sessions/**/rollout-*.jsonl` under CODEX_HOME)."""
    t = AgentTrace()
    names: dict[str, str] = {}
    for ev in events:
        p = ev.get("payload") or {}
        kind = ev.get("type")
        if kind == "response_item" and p.get("type") == "function_call":
            names[p.get("call_id", "")] = p.get("name", "")
            try:
                args = json.loads(p.get("arguments") or "{}")
            except ValueError:
                args = {}
            cmd = args.get("cmd") or args.get("command")
            if isinstance(cmd, list):
                cmd = " ".join(map(str, cmd))
            if cmd:
                t.commands.append(str(cmd))
                t.files_read += _files_of(str(cmd))
        elif kind == "response_item" and p.get("type") == "function_call_output":
            out = p.get("output")
            text = out if isinstance(out, str) else json.dumps(out)
            if _tool_failed(text):
                t.tool_errors.append(f"{names.get(p.get('call_id', ''), 'tool')}: {text.strip()[:200]}")
        elif kind == "event_msg" and p.get("type") == "token_count":
            info = p.get("info") or {}
            last = info.get("last_token_usage") or {}
            if last:
                t.usage_reports += 1
                t.input_tokens += int(last.get("input_tokens") or 0)
                t.output_tokens += int(last.get("output_tokens") or 0)
        elif kind == "event_msg" and p.get("type") == "agent_message":
            t.final_message = str(p.get("message") or "")
    return t


def claude_session_trace(events: list[dict[str, Any]]) -> AgentTrace:
    """Read Claude Code's session log (`projects/*/<session>.jsonl` under its config dir)."""
    t = AgentTrace()
    names: dict[str, str] = {}
    seen_usage: set[str] = set()
    for ev in events:
        msg = ev.get("message") or {}
        content = msg.get("content")
        if ev.get("type") == "assistant":
            mid = str(msg.get("id") or "")
            usage = msg.get("usage") or {}
            if usage and mid not in seen_usage:  # one message is logged once per content block
                seen_usage.add(mid)
                t.usage_reports += 1
                t.input_tokens += int(usage.get("input_tokens") or 0)
                t.output_tokens += int(usage.get("output_tokens") or 0)
            for b in content if isinstance(content, list) else []:
                if b.get("type") == "tool_use":
                    names[b.get("id", "")] = b.get("name", "")
                    inp = b.get("input") or {}
                    if b.get("name") == "Bash" and inp.get("command"):
                        t.commands.append(str(inp["command"]))
                        t.files_read += _files_of(str(inp["command"]))
                    elif b.get("name") == "Read" and inp.get("file_path"):
                        t.files_read.append(str(inp["file_path"]))
                elif b.get("type") == "text" and b.get("text"):
                    t.final_message = str(b["text"])
        elif ev.get("type") == "user":
            for b in content if isinstance(content, list) else []:
                if b.get("type") == "tool_result" and b.get("is_error"):
                    text = b.get("content")
                    text = text if isinstance(text, str) else json.dumps(text)
                    if _tool_failed(text, is_error=True):
                        t.tool_errors.append(f"{names.get(b.get('tool_use_id', ''), 'tool')}: {text.strip()[:200]}")
    return t


# tool outputs that say the harness could not run the tool at all (a sandbox refusing to start, a missing
# shell): a command that ran and exited non-zero is the agent's business, these are infrastructure
_BROKEN_TOOL = re.compile(
    r"(sandbox (?:error|denied|failed)|failed to (?:spawn|create|start|exec)|bwrap:|landlock|seccomp|"
    r"No such file or directory \(os error 2\)|Operation not permitted \(os error 1\)|execution error)",
    re.IGNORECASE,
)


def _tool_failed(text: str, is_error: bool = False) -> bool:
    return bool(_BROKEN_TOOL.search(text or ""))


def read_jsonl(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            val = json.loads(line)
        except ValueError:
            continue
        if isinstance(val, dict):
            out.append(val)
    return out


def reconcile(trace: AgentTrace, ledger_calls: int, ledger_in: int, ledger_out: int) -> Optional[str]:
    """A warning when the agent's own usage reports and the gateway's count of the same episode disagree."""
    if trace.usage_reports == 0:
        return f"the agent reported no usage; the gateway counted {ledger_calls} calls, {ledger_in}+{ledger_out} tokens"
    if (trace.input_tokens, trace.output_tokens) != (ledger_in, ledger_out):
        return (
            f"the agent reported {trace.input_tokens}+{trace.output_tokens} tokens in {trace.usage_reports} reports; "
            f"the gateway counted {ledger_in}+{ledger_out} in {ledger_calls} calls"
        )
    return None
