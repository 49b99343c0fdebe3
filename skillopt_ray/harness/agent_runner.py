"""The engine's side of the benchmark contract's agent runner: an env actor hands each episode of an agent target
one of these (EpisodeContext.agent), so that benchmarks run the agent CLI without importing the harness."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import AgentOutcome, AgentTask, EpisodeContext

from skillopt_ray.harness.episode import (
    HarnessOutcome,
    HarnessTask,
    harness_settings,
    run_harness_task,
    trace_to_optimizer,
)
from skillopt_ray.harness.runner import AgentSettings, HarnessError, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace, remove_tree
from skillopt_ray.llm.ledger import stage_of_key
from skillopt_ray.llm.wire import AgentSettings as GatewayAgentSettings


async def episode_context(llm: Any, ctx: EpisodeContext) -> EpisodeContext:
    """The context an episode is played with: its stage (the one its key names when it came without one) and, for
    an agent target, the agent runner booking under that stage."""
    if not ctx.stage:
        ctx = replace(ctx, stage=stage_of_key(ctx.key))
    runner = await agent_runner_for(llm, ctx.stage)
    return ctx if runner is None else replace(ctx, agent=runner)


async def agent_runner_for(llm: Any, stage: str = "") -> Optional[HarnessRunner]:
    """The runner for this handle's target (llm.target.harness=codex|claude_code), or None for a chat target."""
    settings = await harness_settings(llm)
    return None if settings is None else HarnessRunner(llm, settings, stage)


@dataclass
class HarnessRunner:
    """Runs an AgentTask in the jail; its model traffic goes through `llm`, so cache, ledger and budgets hold."""

    llm: Any
    settings: GatewayAgentSettings
    stage: str = ""  # the ledger stage of the agent's calls; "" -> the stage the episode key names

    @property
    def trace_to_optimizer(self) -> bool:
        return trace_to_optimizer(self.settings)

    def for_stage(self, stage: str) -> HarnessRunner:
        """The same runner booking its calls under `stage` (one episode's)."""
        return HarnessRunner(self.llm, self.settings, stage)

    async def run(self, task: AgentTask, key: str) -> AgentOutcome:
        if task.workspace is None and task.task_id:
            return await self._run_named(task, key)
        return await self._run_in(task, key)

    async def _run_named(self, task: AgentTask, key: str) -> AgentOutcome:
        """A temporary workspace named after the task (predictions/<id>/codex_exec), as the built-ins lay it out."""
        ht = HarnessTask(
            task.description, task.preamble, task.task_md, task.prompt, task.timeout_s,
            copy_files=dict(task.files), extra_files=dict(task.extra_files), images=list(task.images),
            link_dirs=dict(task.link_dirs), allow_file_edits=task.allow_file_edits, collect=tuple(task.collect),
        )  # fmt: skip
        out = await run_harness_task(self.llm, self.settings, task.task_id, task.skill, ht, key, self.stage or None)
        return self._outcome(out)

    async def _run_in(self, task: AgentTask, key: str) -> AgentOutcome:
        """A workspace in the task's folder (kept for the caller), else in a temporary one removed afterwards."""
        skill_md = render_skill_md(task.skill, task.description, task.preamble)
        own = task.workspace is None
        root = Path(tempfile.mkdtemp(prefix="skillopt-ws-")) / "workspace" if own else Path(str(task.workspace))
        try:
            spec = WorkspaceSpec(task=task.task_md, copy_files=dict(task.files), extra_files=dict(task.extra_files))
            wd = prepare_workspace(root, skill_md, spec)
            s = AgentSettings.from_gateway(self.settings, task.timeout_s if task.timeout_s > 0 else math.inf)
            try:
                run = await run_agent(
                    self.llm, s, wd, task.prompt, key, allow_file_edits=task.allow_file_edits,
                    collect=tuple(task.collect), stage=self.stage or None,
                )  # fmt: skip
            except HarnessError as e:
                return AgentOutcome("", skill_md, ok=False, error=str(e), error_kind=e.kind)
            return self._outcome(HarnessOutcome(run, skill_md))
        finally:
            if own:
                remove_tree(root.parent)

    def _outcome(self, out: HarnessOutcome) -> AgentOutcome:
        if out.run is None:
            return AgentOutcome("", out.skill_md, ok=False, error=out.error, error_kind=out.error_kind)
        run = out.run
        return AgentOutcome(
            run.response, out.skill_md, ok=True, info=out.info(self.trace_to_optimizer),
            files=dict(run.files), trace=run.trace.render(),
        )  # fmt: skip
