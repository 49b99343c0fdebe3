"""What the analysts see of an agent run: a short summary of its transcript, never the raw event stream."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

from skillopt_envs.jsontypes import JSONObject, as_int, as_object

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
    """An agent run read from its own session log: the commands it ran, files it read, usage, and the structured
    signs of broken machinery (never words inside a tool's output: those are what the model saw)."""

    commands: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    # shell calls for which the harness could not create a process at all (Codex: a command item without a
    # process id, exit code -1); a command that ran and exited non-zero is not one
    tool_errors: list[str] = field(default_factory=list)
    processes_started: int = 0  # shell calls that got a process (whatever it printed or returned)
    cli_errors: list[str] = field(default_factory=list)  # the CLI's own error events (Codex: event_msg `error`)
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


def codex_session_trace(events: list[JSONObject], workspace: str = "") -> AgentTrace:
    """Read Codex's rollout log (`sessions/**/rollout-*.jsonl` under CODEX_HOME) by its event kinds. `workspace`
    is the agent's working folder as the CLI sees it (see _codex_item)."""
    t = AgentTrace()
    for ev in events:
        p = as_object(ev.get("payload"))
        kind, sub = ev.get("type"), p.get("type")
        if kind == "response_item" and sub == "function_call":
            _codex_command(t, p)
        elif kind == "event_msg" and sub == "item_completed":
            _codex_item(t, as_object(p.get("item")), workspace)
        elif kind == "event_msg" and sub == "error":
            t.cli_errors.append(str(p.get("message") or "error event")[:300])
        elif kind == "event_msg" and sub == "token_count":
            last = as_object(as_object(p.get("info")).get("last_token_usage"))
            if last:
                t.usage_reports += 1
                t.input_tokens += as_int(last.get("input_tokens"))
                t.output_tokens += as_int(last.get("output_tokens"))
        elif kind == "event_msg" and sub == "agent_message":
            t.final_message = str(p.get("message") or "")
    return t


def _codex_command(t: AgentTrace, call: JSONObject) -> None:
    """A shell call's command line (and the file it reads, if any) from a function_call item."""
    raw = call.get("arguments") or "{}"
    try:
        args = raw if isinstance(raw, dict) else json.loads(raw) if isinstance(raw, str) else {}
    except (ValueError, RecursionError):
        args = {}
    cmd = args.get("cmd") or args.get("command") if isinstance(args, dict) else None
    if isinstance(cmd, list):
        cmd = " ".join(map(str, cmd))
    if cmd:
        t.commands.append(str(cmd))
        t.files_read += _files_of(str(cmd))


def _codex_item(t: AgentTrace, item: JSONObject, workspace: str) -> None:
    """A finished command item: a process was started (any exit code), or the harness never created one. A
    process that could not start in a folder the model chose (one that does not exist, say) is the model's own
    observation; in the workspace, which the runner made, it is the tool that is broken."""
    if item.get("type") != "CommandExecution":
        return
    if item.get("process_id") is not None or item.get("exit_code") != -1:
        t.processes_started += 1
        return
    cwd = str(item.get("cwd") or "").removeprefix("file://").rstrip("/")
    if workspace and cwd and cwd != workspace.rstrip("/"):
        return
    said = str(item.get("aggregated_output") or "no process was created").strip()
    t.tool_errors.append(f"{_shown_command(item)}: {said[:200]}")


def _shown_command(item: JSONObject) -> str:
    cmd = item.get("command")
    return " ".join(map(str, cmd))[:120] if isinstance(cmd, list) else str(cmd or "command")[:120]


def claude_session_trace(events: list[JSONObject]) -> AgentTrace:
    """Read Claude Code's session log (`projects/*/<session>.jsonl` under its config dir). Its tool results are
    observations only: an `is_error` result is a command that exited non-zero or a refused tool input, which the
    model sees and answers to; a Claude Code that cannot run its tools does not reach its model (the runner's
    own markers and the CLI's exit status say so)."""
    t = AgentTrace()
    seen_usage: set[str] = set()
    for ev in events:
        msg = as_object(ev.get("message"))
        content = msg.get("content")
        if ev.get("type") != "assistant":
            continue
        mid = str(msg.get("id") or "")
        usage = as_object(msg.get("usage"))
        if usage and mid not in seen_usage:  # one message is logged once per content block
            seen_usage.add(mid)
            t.usage_reports += 1
            t.input_tokens += as_int(usage.get("input_tokens"))
            t.output_tokens += as_int(usage.get("output_tokens"))
        for b in content if isinstance(content, list) else []:
            _claude_block(t, b)
    return t


def _claude_block(t: AgentTrace, b: JSONObject) -> None:
    """One block of an assistant message: a Bash or Read call (commands, files read), or text (final message)."""
    if b.get("type") == "tool_use":
        inp = b.get("input")
        if not isinstance(inp, dict):
            return  # a tool input of another shape names no command or file
        if b.get("name") == "Bash" and inp.get("command"):
            t.commands.append(str(inp["command"]))
            t.files_read += _files_of(str(inp["command"]))
        elif b.get("name") == "Read" and inp.get("file_path"):
            t.files_read.append(str(inp["file_path"]))
    elif b.get("type") == "text" and b.get("text"):
        t.final_message = str(b["text"])


def broken_tools(t: AgentTrace) -> Optional[str]:
    """Why the agent's tools were broken, from structure alone, or None. Broken means the shell tool was called
    and not once could the harness create a process for it; one call that got a process proves the tools work
    (a later call refused for the model's own reasons, a bad working folder or a process limit, is what it sees)."""
    if t.tool_errors and t.processes_started == 0:
        return f"no shell command could start a process ({len(t.tool_errors)} tried; first: {t.tool_errors[0]})"
    return None


def read_jsonl(text: str) -> list[JSONObject]:
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
