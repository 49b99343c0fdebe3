"""One agent episode: workspace, jail, the episode's model endpoint, the CLI run, the empty-reply retry, and
what comes back (final message, raw transcript, summaries, usage, tool errors)."""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Optional

from skillopt_envs.sandbox import userns_filter

from skillopt_ray.base import untrusted
from skillopt_ray.harness import commands, skill_list, trace
from skillopt_ray.harness.jail import Jail, JailLimits, JailResult, default_prefix, jail_env
from skillopt_ray.harness.jail_exe import ExecOnlyError
from skillopt_ray.harness.workspace import remove_tree
from skillopt_ray.llm.wire import AgentOptions
from skillopt_ray.llm.wire import AgentSettings as GatewayAgentSettings

if TYPE_CHECKING:  # the agent API server (aiohttp) loads with the first agent episode, not with every chat run
    from skillopt_ray.llm.agent_api import CallRecord

HARNESSES = ("codex", "claude_code")
PROCESS_RAN = "Process exited with code"  # Codex's header on a command's output, written once a process ran
BIN = {"codex": "codex", "claude_code": "claude"}
PREFIX = {"codex": "codex", "claude_code": "claude"}  # file prefix of the raw transcript and the summary


class HarnessError(RuntimeError):
    """The agent could not run properly (the jail, the CLI or its tools broke): an infra error, never a score."""

    def __init__(self, message: str, kind: str = "env"):
        super().__init__(message)
        self.kind = kind


@dataclass
class AgentRun:
    final_message: str
    raw: str
    summary: str  # the reference's trace summary file text
    trace: trace.AgentTrace
    attempts: int
    calls: list[CallRecord] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # collected workspace files (collect=...)
    usage_warning: Optional[str] = None
    wall_s: float = 0.0
    first_call_s: Optional[float] = None
    jail_note: str = ""  # what the jail held back of the agent's own files (over the archive's limit): scored as is

    @property
    def response(self) -> str:
        """What the benchmark scores: the final message, else the raw transcript (as the reference does)."""
        return self.final_message if self.final_message.strip() else self.raw


@dataclass
class AgentSettings:
    harness: str
    model: str
    timeout_s: float
    memory_mb: int = 4096
    empty_retries: int = 1
    codex_sandbox: str = "danger-full-access"
    codex_reasoning_effort: str = "none"
    claude_effort: str = "medium"
    claude_max_thinking_tokens: int = 16384
    prefix: Optional[str] = None
    jail: str = "bwrap"
    limits: JailLimits = JailLimits()  # processes, disk bytes and files, file size (llm.target.agent.*)

    @staticmethod
    def from_gateway(s: GatewayAgentSettings, default_timeout_s: float) -> AgentSettings:
        a: AgentOptions = s.get("agent") or {}
        return AgentSettings(
            harness=s["harness"],
            model=s["model"],
            timeout_s=float(a.get("timeout_s") or default_timeout_s),
            memory_mb=int(a.get("memory_mb", 4096)),
            empty_retries=int(a.get("empty_retries", 1)),
            codex_sandbox=str(a.get("codex_sandbox", "danger-full-access")),
            codex_reasoning_effort=str(a.get("codex_reasoning_effort", "none")),
            claude_effort=str(a.get("claude_effort") or ""),  # empty or missing: the default medium
            claude_max_thinking_tokens=int(a.get("claude_max_thinking_tokens", 16384)),
            prefix=a.get("prefix"),
            jail=str(a.get("jail", "bwrap")),
            limits=JailLimits.from_agent(a),
        )


def cli_path(settings: AgentSettings) -> Path:
    exe = default_prefix(settings.prefix) / "bin" / BIN[settings.harness]
    if not exe.exists():
        raise HarnessError(
            f"the {settings.harness} CLI is not installed at {exe}; run scripts/install_harnesses.sh "
            "(or point llm.target.agent.prefix at an npm prefix holding it)",
            kind="sandbox_start",
        )
    return exe


def codex_sandbox_problem(settings: AgentSettings) -> Optional[str]:
    """Why Codex's own sandbox cannot run its shell tool here, or None. Inside the bubblewrap jail a seccomp filter
    refuses new user namespaces, which every Codex sandbox mode but danger-full-access needs: each command would
    come back as bwrap's refusal, exit 1, a run that looks like the model's failure. Known from the settings and
    the jail before anything starts."""
    if settings.harness != "codex" or settings.jail != "bwrap" or settings.codex_sandbox == "danger-full-access":
        return None
    if userns_filter() is None:  # no filter on this architecture: the jail does not refuse them
        return None
    return (
        f"llm.target.agent.codex_sandbox={settings.codex_sandbox} cannot run commands inside the bubblewrap jail "
        "(it refuses the user namespaces Codex's own sandbox needs); use llm.target.agent.codex_sandbox="
        "danger-full-access (the jail is the sandbox)"
    )


def _codex_extra(port: int) -> tuple[str, ...]:
    """-c pairs: the episode's endpoint as Codex's model provider (no retries of its own: the gateway retries),
    and its calls home switched off."""
    provider = (
        f'{{name="skillopt",base_url="http://127.0.0.1:{port}/v1",env_key="SKILLOPT_AGENT_KEY",'
        'wire_api="responses",request_max_retries=0,stream_max_retries=0}'
    )
    return (
        'model_provider="skillopt"',
        f"model_providers.skillopt={provider}",
        "analytics.enabled=false",
        "feedback.enabled=false",
        "check_for_update_on_startup=false",
        'history.persistence="none"',
    )


SESSION_LOG_BYTES = 32 << 20  # one CLI session log; a longer one was grown by the agent, not the CLI
SESSION_LOG_FILES = 64
SESSION_LOG_DEPTH = 6  # Codex: sessions/YYYY/MM/DD/rollout-*.jsonl; Claude Code: projects/<project>/<session>.jsonl


def _session_logs(home: Path, harness: str) -> list[PurePosixPath]:
    """The CLI's session log files under the jail's home, found without following any link: the home is writable
    by the agent's own commands, so a planted symlink, FIFO or hard link is skipped, not read."""
    top = PurePosixPath(".codex/sessions" if harness == "codex" else ".claude/projects")
    found: list[PurePosixPath] = []
    stack = [(top, 0)]
    while stack and len(found) < SESSION_LOG_FILES:
        rel, depth = stack.pop()
        for e in untrusted.list_dir(home, rel):
            if e.is_dir and depth + 1 < SESSION_LOG_DEPTH:
                stack.append((rel / e.name, depth + 1))
            elif e.is_file and e.name.endswith(".jsonl"):
                found.append(rel / e.name)
    return sorted(found)[:SESSION_LOG_FILES]


def _session_events(home: Path, harness: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for rel in _session_logs(home, harness):
        try:
            data = untrusted.read_bytes(home, rel, SESSION_LOG_BYTES)
        except untrusted.Untrusted:
            continue
        events += trace.read_jsonl(data.decode("utf-8", "replace"))
    return events


@dataclass(frozen=True)
class _CliOptions:
    """What an episode asks of the CLI beyond its prompt (see run_agent)."""

    allow_file_edits: bool = False
    images: tuple[str, ...] = ()
    add_dirs: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()


@dataclass
class _Attempt:
    """One CLI run: what it returned, its model calls and its session trace."""

    result: JailResult
    raw: str
    calls: list[CallRecord]
    trace: trace.AgentTrace
    first_call_s: Optional[float]
    started: bool = True  # the CLI wrote its session log: the jail did start it
    # the CLI logged an interrupted turn: only a command of the agent's can send it SIGINT (the jail ends it with
    # SIGKILL), so the failure is the agent's own
    interrupted: bool = False
    # a tool result the CLI sent back through the gateway says a process ran: the tools worked, whatever the session
    # log (which the agent's commands can rewrite) says
    process_ran: bool = False


async def run_agent(
    llm: Any,
    settings: AgentSettings,
    workspace: Path,
    prompt: str,
    key: str,
    allow_file_edits: bool = False,
    collect: tuple[str, ...] = (),
    images: tuple[str, ...] = (),
    add_dirs: tuple[str, ...] = (),
    read_only: tuple[str, ...] = (),
    stage: Optional[str] = None,
) -> AgentRun:
    """Run the CLI in `workspace` (already prepared) until it gives a non-empty final message or the empty
    retries run out. `images` go to Codex as -i (their original paths, as the reference passes them), `add_dirs`
    to Claude Code as --add-dir; `read_only` host paths are mounted read-only where they are. The agent's model
    calls are booked under `stage` (by default the loop stage its key names, see agent_stage). A gateway error is
    re-raised as itself; a broken jail or broken tools raise HarnessError."""
    exe = cli_path(settings)
    problem = codex_sandbox_problem(settings)
    if problem:
        raise HarnessError(problem, kind="sandbox_start")
    options = _CliOptions(allow_file_edits, images, add_dirs, read_only)
    root = Path(tempfile.mkdtemp(prefix="skillopt-agent-"))
    attempts: list[_Attempt] = []
    final = ""
    try:
        for attempt in range(settings.empty_retries + 1):
            p = commands.retry_prompt(prompt) if attempt else prompt
            home = root / f"attempt{attempt}"
            where = (f"{key}/a{attempt}", stage or agent_stage(key))
            run = await _run_attempt(llm, settings, exe, home, workspace, p, where, options)
            attempts.append(run)
            final = _final_message(settings, run, workspace)
            if final.strip():
                break
        return _agent_run(settings, attempts, final, workspace, collect)
    finally:
        remove_tree(root)


def agent_stage(key: str) -> str:
    """The ledger stage of an agent episode whose context gave none: the one its key names."""
    from skillopt_ray.llm.ledger import stage_of_key

    return stage_of_key(key)


def _cli_launch(
    settings: AgentSettings, jail: Jail, home: Path, workspace: Path, prompt: str, token: str, options: _CliOptions
) -> tuple[list[str], dict[str, str]]:
    """The CLI's argv (paths as the jail sees them) and its own environment variables: the episode's endpoint
    and `token`, the only key the agent holds."""
    ws_in = jail.workspace_path(workspace)
    if settings.harness == "codex":
        (home / "home" / ".codex").mkdir(parents=True, exist_ok=True)
        native = commands.codex_native(jail.prefix)
        extra = {"CODEX_HOME": f"{jail.home_path()}/.codex", "SKILLOPT_AGENT_KEY": token}
        if native:  # what the npm script sets before it runs the binary
            extra.update(
                CODEX_MANAGED_BY_NPM="1", CODEX_MANAGED_PACKAGE_ROOT=f"{jail.prefix_path()}/{commands.CODEX_PACKAGE}"
            )
        cmd = commands.codex_argv(
            f"{jail.prefix_path()}/{native or 'bin/codex'}",
            ws_in,
            prompt,
            settings.model,
            settings.codex_reasoning_effort,
            settings.codex_sandbox,
            images=options.images,
            extra_config=_codex_extra(jail.port),
        )
        return cmd, extra
    cmd = commands.claude_argv(
        f"{jail.prefix_path()}/bin/claude",
        ws_in,
        commands.exec_prompt(prompt, options.allow_file_edits),
        settings.model,
        settings.claude_effort,
        add_dirs=options.add_dirs,
        append_system=skill_list.listing(workspace),
    )
    extra = {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{jail.port}",
        "ANTHROPIC_API_KEY": token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
        "CLAUDE_CONFIG_DIR": f"{jail.home_path()}/.claude",
    }
    if settings.claude_max_thinking_tokens > 0:
        extra["MAX_THINKING_TOKENS"] = str(settings.claude_max_thinking_tokens)
    return cmd, extra


async def _run_attempt(
    llm: Any,
    settings: AgentSettings,
    exe: Path,
    home: Path,
    workspace: Path,
    prompt: str,
    where: tuple[str, str],
    options: _CliOptions,
) -> _Attempt:
    """One CLI run in a fresh jail with its own model endpoint (re-raising the endpoint's gateway error)."""
    jail = Jail(home, exe.parent.parent, settings.jail, options.read_only, settings.limits)
    token = secrets.token_hex(16)  # the only key the agent holds: it opens nothing but its own endpoint
    cmd, extra = _cli_launch(settings, jail, home, workspace, prompt, token, options)
    env = jail_env(jail.home_path(), jail.prefix_path(), extra)
    from skillopt_ray.llm.agent_api import AgentAPIServer

    server = AgentAPIServer(llm, where[0], stage=where[1])
    await server.start(jail.socket_path)
    t_launch = time.monotonic()
    try:
        res: JailResult = await jail.run(workspace, env, cmd, settings.timeout_s, settings.memory_mb)
    except ExecOnlyError as e:  # nothing of the agent's ran: the jail could not be set up
        raise HarnessError(str(e), kind="sandbox_start") from None
    finally:
        await server.stop()
    if server.errors:  # the model endpoint failed after the gateway's retries: as for a chat episode
        raise server.errors[-1]
    raw = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr.strip() else "")
    events = _session_events(home / "home", settings.harness)
    if settings.harness == "codex":
        t = trace.codex_session_trace(events, jail.workspace_path(workspace))
    else:
        t = trace.claude_session_trace(events)
    first = None if server.first_call_at is None else server.first_call_at - t_launch
    interrupted = any(
        e.get("type") == "event_msg"
        and isinstance(e.get("payload"), dict)
        and e["payload"].get("type") == "turn_aborted"
        and e["payload"].get("reason") == "interrupted"
        for e in events
    )
    ran = any(
        PROCESS_RAN in str(m.get("content")) for r in server.requests for m in r["messages"] if m.get("role") == "tool"
    )
    return _Attempt(
        res, raw, list(server.calls), t, first, started=bool(events), interrupted=interrupted, process_ran=ran
    )


def acted(run: _Attempt) -> bool:
    """Whether the agent's commands may have run: the gateway (outside the jail) answered with a tool call. Before
    that nothing the agent controls ran, so a failure is the jail's, the launcher's or the CLI's; after it, only
    evidence outside the jail (the gateway's error, the host's own failure) makes the episode an infra error."""
    return any(c.tool_calls for c in run.calls)


def _final_message(settings: AgentSettings, run: _Attempt, workspace: Path) -> str:
    """The attempt's final message ("" asks for a retry), or HarnessError when the jail, the CLI or its tools
    broke, judged from structure only: the jail's and the CLI's exit status, the time and memory limits, whether
    the CLI started (its session log) and reached its model (the endpoint's calls), the CLI's own error events and
    whether its shell tool could ever start a process. What a command printed, or its exit code, is the model's
    observation, never a reason to drop the episode; and once the agent has run commands (acted), a CLI that died,
    ran out of time or memory, or files the launcher could not send back are the agent's own: scored on what it
    left."""
    res, harness = run.result, settings.harness
    mine = acted(run)
    if res.out_of_memory and not mine:
        raise HarnessError(f"the {harness} agent went past its memory limit ({settings.memory_mb} MB)")
    if not run.calls and not res.timed_out:
        said = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1][:300]
        if not run.started and not res.over_limit:  # over the limit the session log may have stayed behind
            raise HarnessError(
                f"the {harness} CLI did not start in its jail (no session log, no model call: {said})",
                kind="sandbox_start",
            )
        raise HarnessError(f"the {harness} CLI started but never called its model ({said})", kind="env")
    if not res.exported and not res.timed_out and (res.export_host_fault or not mine):
        raise HarnessError(
            f"the jail could not send the {harness} agent's files back: {res.export_problem}", "jail_export"
        )
    broken = None if run.process_ran else trace.broken_tools(run.trace)
    if broken:
        raise HarnessError(f"the {harness} agent's tools were broken: {broken}")
    if harness == "codex":
        return _codex_final(settings, run, workspace)
    # a timeout or a failed run with nothing printed is an empty reply: retried
    return "" if res.timed_out or (res.returncode != 0 and not res.stdout.strip()) else res.stdout.strip()


def _codex_final(settings: AgentSettings, run: _Attempt, workspace: Path) -> str:
    """Codex's last message file; a timeout or a non-zero exit before the agent ran anything (the reference raises
    there, with no retry) is a HarnessError naming the CLI's own error event when it wrote one. After, or when the
    agent interrupted it, the episode is scored on what it left: the file when it is still a file, else what the
    model last said as the gateway answered it (the agent can replace or lock the file, never the gateway's record)."""
    res = run.result
    failed = res.timed_out or res.returncode != 0 or res.out_of_memory or not res.exported
    if failed and not (acted(run) or run.interrupted):
        if res.timed_out:
            raise HarnessError(f"codex exec ran past its {settings.timeout_s:g} s limit", kind="timeout")
        said = run.trace.cli_errors[0] if run.trace.cli_errors else run.raw[:300]
        raise HarnessError(f"codex exec failed with exit code {res.returncode}: {said}")
    answer = read_regular(workspace / commands.CODEX_LAST_MESSAGE)
    if not (answer or "").strip():  # never written, or replaced by the agent (a folder, a link, a FIFO, locked)
        answer = next((c.text for c in reversed(run.calls) if c.text.strip() and not c.tool_calls), "")
    return answer or ""


def read_regular(path: Path, limit: int = 1 << 20) -> Optional[str]:
    """A file's text when it is a regular file (never through a symlink, never a FIFO that would block), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _agent_run(
    settings: AgentSettings, attempts: list[_Attempt], final: str, workspace: Path, collect: tuple[str, ...]
) -> AgentRun:
    """The episode's outcome over all attempts: transcripts joined, traces merged, the trace summary with the
    gateway's usage (and a warning when the CLI's own count disagrees), the collected workspace files."""
    raws = [
        f"===== {PREFIX[settings.harness].upper()} CLI ATTEMPT {i} =====\n{a.raw}" for i, a in enumerate(attempts, 1)
    ]
    raw_all = "\n\n".join(raws)
    if settings.harness == "codex":
        summary = trace.codex_trace_summary(raw_all, final)
    else:
        summary = trace.claude_trace_summary(final, raw_all)
    t_all = trace.AgentTrace()
    for a in attempts:
        _merge(t_all, a.trace)
    t_all.final_message = final
    all_calls = [c for a in attempts for c in a.calls]
    files = {name: (workspace / name).read_bytes() for name in collect if (workspace / name).is_file()}
    ledger_in = sum(c.prompt_tokens for c in all_calls)
    ledger_out = sum(c.completion_tokens for c in all_calls)
    warning = trace.reconcile(t_all, len(all_calls), ledger_in, ledger_out)
    cost = sum(c.cost_usd for c in all_calls)
    summary += (
        f"\n- gateway usage: {len(all_calls)} calls ({sum(c.cached for c in all_calls)} from the cache), "
        f"{ledger_in}+{ledger_out} tokens, ${cost:.6f}"
    )
    if warning:
        summary += f"\n- WARNING: usage mismatch: {warning}"
    wall = sum(a.result.wall_s for a in attempts)
    first_call = next((a.first_call_s for a in attempts if a.first_call_s is not None), None)
    held = [a.result.over_limit for a in attempts if a.result.over_limit]
    note = f"the agent's files passed the jail's export limit at {held[-1]}; the rest did not come back" if held else ""
    if note:
        summary += f"\n- NOTE: {note}"
    run = AgentRun(final, raw_all, summary, t_all, len(attempts), all_calls, files, warning, wall, first_call)
    run.jail_note = note
    return run


def _merge(into: trace.AgentTrace, t: trace.AgentTrace) -> None:
    into.commands += t.commands
    into.files_read += t.files_read
    into.tool_errors += t.tool_errors
    into.processes_started += t.processes_started
    into.cli_errors += t.cli_errors
    into.input_tokens += t.input_tokens
    into.output_tokens += t.output_tokens
    into.usage_reports += t.usage_reports
    into.final_message = t.final_message or into.final_message
