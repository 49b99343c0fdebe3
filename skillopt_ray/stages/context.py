"""The per-step optimizer context: what every optimizer stage of one training step sees, built once per step.

The stages (reflect, aggregate, select, update) read the step's skill, meta skill, step buffer and request key and
the optimizer settings they need from here, instead of each taking its own long list of parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillopt_ray.prompts.length_guard import LengthGuard


@dataclass(frozen=True)
class OptimizerContext:
    llm: Any  # the optimizer model: `chat_json(request, schema, name)`
    skill: str  # the current skill the step started from
    mode: str  # optimizer.update_mode
    key: str  # request-key prefix of the step (train/eEsS): cache and ledger entries are named after it
    meta_skill: str = ""  # active in this epoch's optimizer prompts
    step_buffer: str = ""  # earlier steps of this epoch, as the prompts show them
    env: str = ""  # benchmark name (the analysts' system prompt names its domain)
    batch_seed: int = 0  # seeds the minibatch shuffle of this step
    minibatch_size: int = 8
    max_budget: int = 4  # the configured maximum learning rate: analysts propose at most this many edits
    failure_only: bool = False
    skill_aware: bool = False  # skill-aware reflection: analysts may also write execution-lapse notes
    appendix_source: str = "both"
    merge_batch_size: int = 8
    protect_regions: bool = True
    refuse_echoes: bool = False  # rewrite modes: refuse a rewrite that copies the prompt (no gate spent on it)
    guard: LengthGuard = field(default_factory=LengthGuard)  # cuts prompts to the optimizer's context when set

    @staticmethod
    def for_step(llm: Any, o: Any, env: str, **step: Any) -> OptimizerContext:
        """The context of one step from the optimizer config `o` and the step's own values (skill, key, ...)."""
        return OptimizerContext(
            llm=llm,
            mode=o.update_mode,
            env=env,
            minibatch_size=o.minibatch_size,
            max_budget=o.learning_rate,
            failure_only=o.failure_only,
            skill_aware=o.skill_aware_reflection,
            appendix_source=o.skill_aware_appendix_source,
            merge_batch_size=o.merge_batch_size,
            protect_regions=o.protect_regions_in_rewrites,
            refuse_echoes=o.refuse_echoed_rewrites,
            **step,
        )
