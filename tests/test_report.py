"""`python -m skillopt_ray.report RUN_DIR`: a run's story from its run directory, new and older records alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from skillopt_ray.runs import report

REPO = Path(__file__).resolve().parent.parent
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


def test_story_of_a_run(tmp_path):
    rd = make_run(tmp_path / "run")
    out = subprocess.run(
        [sys.executable, "-m", "skillopt_ray.report", str(rd)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    lines = [x.strip() for x in text.splitlines()]
    assert "experiment alfworld, seed 7, 2 epochs, batch 4, gate hard, learning rate 4 decaying to 2 (cosine)" in text
    # every version with what made it, at which step and with which selection score
    versions = [x for x in lines if x.startswith("v000")]
    assert [x.split("  ")[0] for x in versions] == ["v0000", "v0001", "v0002", "v0003"]
    assert "initial skill" in versions[0] and versions[0].endswith("selection 0.250")
    assert "step 1 (accept_new_best)" in versions[1] and versions[1].endswith("selection 0.500")
    assert "epoch 1 boundary (empty slow-update block)" in versions[2]
    assert "epoch 2 boundary (slow update)" in versions[3] and versions[3].endswith("selection 0.750")
    # step 1: the action, budget, edits (with the skipped one named), scores, reason, flips, diff size
    s1 = text[text.index("step 1 (epoch 1") : text.index("epoch boundary, slow update: inject_placeholder")]
    assert "accept_new_best -> skill v0001" in s1
    assert "edits: budget 2; 3 merged, 2 kept, 1 applied, 1 skipped" in s1
    assert "edit 2 (replace): skipped_target_missing - '- never heat'" in s1
    assert "gate (hard): candidate 0.500 vs current 0.250 (best 0.250), 4 tasks compared" in s1
    assert "reason: candidate 0.5000 vs current 0.2500" in s1
    assert "flipped to pass: val:0001, val:0002; to fail: val:0003" in s1
    assert "diff: +1 -0 lines (steps/e01_s001/diff.md)" in s1
    # step 2: an older gate record (no reason, no flips, no diff.md): told without them, the diff made from candidate.md
    s2 = text[text.index("step 2 (epoch 2") : text.index("final (test split)")]
    assert "reject" in s2 and "candidate 0.250 vs current 0.500" in s2
    assert "reason:" not in s2.split("epoch boundary")[0] and "flipped" not in s2.split("epoch boundary")[0]
    assert "diff: +3 -0 lines" in s2
    # epoch boundaries and the end
    assert "epoch boundary, meta skill: skip_first_epoch" in text
    assert "epoch boundary, slow update: accept_new_best (candidate 0.750 vs current 0.500)" in text
    assert "epoch boundary, meta skill: write_meta_skill (30 chars: 'Prefer one rule per task type.')" in text
    assert "best        v0003      0.750      0.600      0.600" in text
    assert "steps 2: 1 accepted, 1 rejected, 0 skipped; best from slow_update_epoch_02" in text
    assert "time: 2m10s over 2 commands" in text


def test_diffs_and_html(tmp_path):
    rd = make_run(tmp_path / "run")
    html_path = tmp_path / "history.html"
    assert report.main([str(rd), "--diffs", "--html", str(html_path)]) == 0
    page = html_path.read_text()
    assert page.startswith("<!doctype html>") and "Versions of the current skill" in page
    assert '<span class="add">+- RULE-heat: use the microwave</span>' in page
    assert "v0002 &rarr; v0003" in page and "flipped to pass: val:0001, val:0002" in page


def test_unfinished_run_and_jsonl_history(tmp_path, capsys):
    rd = make_run(tmp_path / "run", with_new_gate_fields=False)
    (rd / "summary.json").unlink()
    (rd / "state.json").write_text(json.dumps({"phase": "train", "epoch": 2, "global_step": 2, "initial_score": 0.25}))
    # the per-step log is newer than history.json (written at epoch ends): its records win, a cut last line is ignored
    recs = json.loads((rd / "history.json").read_text())
    recs[1]["action"] = "skip_no_patches"
    (rd / "history.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + '\n{"step": 3, "epo')
    assert report.main([str(rd)]) == 0
    text = capsys.readouterr().out
    assert "not finished: phase train, epoch 2, 2 steps done" in text and "final: not reached yet" in text
    assert (
        "step 2 (epoch 2, step 1): skip_no_patches" in text and "no candidate: the analysts proposed no edits" in text
    )
    assert "reason:" not in text.split("epoch 2\n")[0].split("step 1 (")[1]


def test_not_a_run_directory(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err
