"""Helpers shared by test files; fixtures live in conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from skillopt_ray.runs import report


def make_run(root: Path, with_new_gate_fields: bool = True) -> Path:
    """Two epochs of one step each: step 1 accepted (new gate record with reason, flips and diff.md), step 2 rejected
    (an older gate record: no reason, no flips, no diff.md); epoch 1 puts the slow-update block in, epoch 2's slow update
    is accepted; finished, with a summary."""
    _w(
        root / "config.yaml",
        yaml.safe_dump(
            {
                "experiment": "alfworld",
                "seed": 7,
                "optimizer": {
                    "epochs": 2,
                    "batch_size": 4,
                    "gate_metric": "hard",
                    "lr_schedule": "cosine",
                    "learning_rate": 4,
                    "min_learning_rate": 2,
                },
            }
        ),
    )
    for v, text in enumerate((SKILL0, SKILL1, SKILL2, SKILL3)):
        _w(root / f"skills/skill_v{v:04d}.md", text)
    _w(root / "state.json", {"phase": "done", "epoch": 3, "global_step": 2, "initial_score": 0.25})
    history = [
        _record(1, 1, "accept_new_best", 1),
        _record(2, 2, "reject", 2, candidate_gate_score=0.25, current_score=0.5),
    ]
    _w(root / "history.json", history)
    gate1 = {
        "action": "accept_new_best",
        "candidate_score": 0.5,
        "current_score": 0.25,
        "best_score": 0.25,
        "tasks_compared": 4,
        "gate_metric": "hard",
    }
    if with_new_gate_fields:
        gate1.update(
            reason="candidate 0.5000 vs current 0.2500 (best 0.2500), hard score over 4 selection tasks: accepted, "
            "strictly above the current score and the best so far",
            flipped={"to_pass": ["val:0001", "val:0002"], "to_fail": ["val:0003"]},
        )
        _w(root / "steps/e01_s001/diff.md", "```diff\n" + report.diff_text(SKILL0, SKILL1) + "```\n")
    _w(root / "steps/e01_s001/gate.json", gate1)
    _w(root / "steps/e01_s001/candidate.md", SKILL1)
    _w(
        root / "steps/e01_s001/update.json",
        {
            "reports": [
                {"index": 1, "op": "append", "target": "", "status": "applied_append"},
                {"index": 2, "op": "replace", "target": "- never heat", "status": "skipped_target_missing"},
            ]
        },
    )
    _w(
        root / "steps/e02_s001/gate.json",
        {"action": "reject", "candidate_score": 0.25, "current_score": 0.5, "best_score": 0.5, "tasks_compared": 4},
    )
    _w(root / "steps/e02_s001/candidate.md", SKILL2 + "- RULE-cool: use the fridge\n")
    _w(root / "epochs/e01/slow_result.json", {"action": "inject_placeholder", "epoch": 1})
    _w(root / "epochs/e01/meta_skill_result.json", {"action": "skip_first_epoch", "epoch": 1})
    _w(
        root / "epochs/e02/slow_result.json",
        {
            "action": "accept_new_best",
            "epoch": 2,
            "candidate_full_score": 0.75,
            "decision": {"action": "accept_new_best", "candidate_score": 0.75, "current_score": 0.5},
            "slow_update_content": "keep the rules",
        },
    )
    _w(root / "epochs/e02/meta_skill_result.json", {"action": "write_meta_skill", "epoch": 2})
    _w(root / "epochs/e02/meta_skill.md", "Prefer one rule per task type.\n")
    _w(
        root / "summary.json",
        {
            "experiment": "alfworld",
            "selection": {"initial": 0.25, "best": 0.75, "final": 0.75},
            "test": {k: {"hard": h, "soft": h} for k, h in (("initial", 0.1), ("best", 0.6), ("final", 0.6))},
            "versions": {"initial": 0, "best": 3, "final": 3},
            "counts": {"accept": 1, "reject": 1, "skip": 0},
            "steps": 2,
            "best_origin": "slow_update_epoch_02",
            "tokens": {"calls": 40, "tokens": 12000, "cost_usd": 0.5},
        },
    )
    _w(root / "sessions.json", [{"wall_s": 100.0}, {"wall_s": 30.0}])
    return root


SKILL0 = "# Skill\n\n- look before acting\n"


SKILL1 = SKILL0 + "- RULE-heat: use the microwave\n"


SKILL2 = SKILL1 + "<!-- SLOW_UPDATE_START -->\n<!-- SLOW_UPDATE_END -->\n"


SKILL3 = SKILL1 + "<!-- SLOW_UPDATE_START -->\nkeep the rules\n<!-- SLOW_UPDATE_END -->\n"


def _w(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def _record(step, epoch, action, version, **kw):
    rec = {
        "step": step,
        "epoch": epoch,
        "step_in_epoch": 1,
        "action": action,
        "rollout_hard": 0.25,
        "rollout_soft": 0.5,
        "rollout_n": 4,
        "infra_errors": 0,
        "n_edits_merged": 3,
        "n_edits_ranked": 2,
        "edit_budget": 2,
        "edit_apply_summary": {"total": 2, "applied": 1, "skipped": 1, "errors": 0},
        "candidate_gate_score": 0.5,
        "tasks_compared": 4,
        "current_score": 0.5,
        "best_score": 0.5,
        "skill_version": version,
        "gate_metric": "hard",
    }
    rec.update(kw)
    return rec
