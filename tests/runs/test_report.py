"""`python -m skillopt_ray.report RUN_DIR`: a run's story from its run directory, new and older records alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from report_helpers import make_run

from skillopt_ray.runs import report

REPO = Path(__file__).resolve().parents[2]


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
