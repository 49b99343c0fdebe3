"""The hook a benchmark uses to run its episode in an agent harness instead of a chat turn.

A benchmark opts in with the class attribute `agent_harness = True` and, in `run_episode`, asks
`harness_settings(llm)`; when it is not None it builds a `HarnessTask` (the SKILL.md description and preamble,
task.md, the prompt, its timeout, files to collect) and calls `run_harness_task`, then scores the response."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import AgentInfo

from skillopt_ray.harness.runner import AgentRun, AgentSettings, HarnessError, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace, remove_tree
from skillopt_ray.llm.wire import AgentSettings as GatewayAgentSettings


@dataclass
class HarnessTask:
    description: str  # SKILL.md front matter
    preamble: str  # SKILL.md text before the learned guidance
    task_md: str
    prompt: str
    timeout_s: float  # the benchmark's own per-call limit (llm.target.agent.timeout_s overrides it)
    copy_files: dict[str, str] = field(default_factory=dict)
    extra_files: dict[str, str] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    link_dirs: dict[str, str] = field(default_factory=dict)  # workspace path -> directory (symlinked, read-only)
    allow_file_edits: bool = False
    collect: tuple[str, ...] = ()

    def outside_paths(self) -> tuple[str, ...]:
        """Host paths outside the workspace the agent may read (the jail mounts them read-only where they are):
        the images (Codex gets them with -i) and the symlinked directories' targets."""
        return tuple(os.path.realpath(p) for p in [*self.images, *self.link_dirs.values()])

    def add_dirs(self) -> tuple[str, ...]:
        """Claude Code's extra --add-dir folders, as the reference passes them: the data dirs, then the image dirs."""
        dirs = [os.path.realpath(d) for d in self.link_dirs.values()]
        dirs += [os.path.dirname(os.path.realpath(i)) for i in self.images]
        return tuple(dict.fromkeys(dirs))


@dataclass
class HarnessOutcome:
    run: Optional[AgentRun]
    skill_md: str
    error: str = ""
    error_kind: str = ""

    def info(self, trace_to_optimizer: bool = True) -> AgentInfo:
        """What goes into the episode's info: the analysts' target prompts and the trace summary; never the
        raw event stream."""
        if self.run is None:
            return {}
        blocks = [["Agent Trace Summary", self.run.trace.render()]] if trace_to_optimizer else []
        out: AgentInfo = {
            "agent_summary": self.run.summary,
            "agent_attempts": self.run.attempts,
            "agent_calls": len(self.run.calls),
            "agent_tokens": [
                sum(c.prompt_tokens for c in self.run.calls),
                sum(c.completion_tokens for c in self.run.calls),
            ],
            "agent_reported_tokens": [self.run.trace.input_tokens, self.run.trace.output_tokens],
            "agent_cost_usd": sum(c.cost_usd for c in self.run.calls),
            "agent_wall_s": round(self.run.wall_s, 3),
            "agent_first_call_s": round(self.run.first_call_s, 3) if self.run.first_call_s is not None else None,
            "analyst_blocks": blocks,
        }
        if self.run.usage_warning:
            out["usage_warning"] = self.run.usage_warning
        if self.run.jail_note:
            out["agent_jail_note"] = self.run.jail_note
        return out


TURN_BREAK = "\n\n===== TURN BREAK =====\n\n"


def trace_to_optimizer(settings: GatewayAgentSettings) -> bool:
    """Whether the analysts see the agent's trace summary (llm.target.agent.trace_to_optimizer)."""
    return bool((settings.get("agent") or {}).get("trace_to_optimizer", True))


def turns_info(outcomes: list[HarnessOutcome], show_trace: bool = True) -> AgentInfo:
    """The episode's info over several agent runs (one per benchmark turn): summaries and traces joined with the
    reference's turn-break line, calls, tokens, cost and time added up."""
    infos = [o.info(show_trace) for o in outcomes if o.run is not None]
    if len(infos) <= 1:
        return infos[0] if infos else {}
    runs = [o.run for o in outcomes if o.run is not None]
    out: AgentInfo = {
        "agent_summary": TURN_BREAK.join(i["agent_summary"] for i in infos),
        "agent_attempts": sum(i["agent_attempts"] for i in infos),
        "agent_calls": sum(i["agent_calls"] for i in infos),
        "agent_tokens": [sum(i["agent_tokens"][k] for i in infos) for k in (0, 1)],
        "agent_reported_tokens": [sum(i["agent_reported_tokens"][k] for i in infos) for k in (0, 1)],
        "agent_cost_usd": sum(i["agent_cost_usd"] for i in infos),
        "agent_wall_s": round(sum(i["agent_wall_s"] for i in infos), 3),
        "agent_first_call_s": infos[0]["agent_first_call_s"],
        "agent_turns": len(infos),
        "analyst_blocks": (
            [["Agent Trace Summary", TURN_BREAK.join(r.trace.render() for r in runs if r is not None)]]
            if show_trace
            else []
        ),
    }
    warnings = [i["usage_warning"] for i in infos if i.get("usage_warning")]
    if warnings:
        out["usage_warning"] = "; ".join(warnings)
    return out


async def harness_settings(llm: Any) -> Optional[GatewayAgentSettings]:
    """The target's harness settings, or None for a chat target (or an LLM handle without harness support)."""
    s = getattr(llm, "_agent_settings_cache", None)  # static config: asked once per handle, not per episode
    if s is None:
        get = getattr(llm, "agent_settings", None)
        if get is None:
            return None
        s = get("target")
        if hasattr(s, "__await__"):
            s = await s
        try:
            llm._agent_settings_cache = s
        except AttributeError:
            pass
    return s if s and s.get("harness", "chat") != "chat" else None


async def run_harness_task(
    llm: Any,
    settings: GatewayAgentSettings,
    task_id: str,
    skill: str,
    ht: HarnessTask,
    key: str,
    stage: Optional[str] = None,
) -> HarnessOutcome:
    """Lay out the workspace (`predictions/<id>/codex_exec`, as the reference names it for every CLI), run the
    agent, and hand back its run; a broken jail or broken tools come back as an error, a gateway error is raised.
    The agent's calls are booked under `stage`, else the stage the episode key names (runner.agent_stage)."""
    skill_md = render_skill_md(skill, ht.description, ht.preamble)
    root = Path(tempfile.mkdtemp(prefix="skillopt-ws-"))
    try:
        wd = prepare_workspace(
            root / "predictions" / task_id.replace("/", "_") / "codex_exec",
            skill_md,
            WorkspaceSpec(
                task=ht.task_md,
                extra_files=ht.extra_files,
                copy_files=ht.copy_files,
                link_dirs=ht.link_dirs,
                images=ht.images,
            ),
        )
        s = AgentSettings.from_gateway(settings, ht.timeout_s if ht.timeout_s > 0 else math.inf)
        try:
            run = await run_agent(
                llm,
                s,
                wd,
                ht.prompt,
                key,
                allow_file_edits=ht.allow_file_edits,
                collect=ht.collect,
                images=tuple(os.path.realpath(i) for i in ht.images),
                add_dirs=ht.add_dirs(),
                read_only=ht.outside_paths(),
                stage=stage,
            )
        except HarnessError as e:
            return HarnessOutcome(None, skill_md, str(e), e.kind)
        return HarnessOutcome(run, skill_md)
    finally:
        remove_tree(root)
