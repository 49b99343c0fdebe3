"""Conformance of the training loop with SkillOpt's reference (docs/reference-behaviours.md: the training loop,
the step buffer, the epoch boundary): a scripted 3-epoch run through the real Trainer with a fake episode runner
and a recording fake optimizer. No Ray, no network; expected values are computed from the reference's rules.

- the scheduler counter advances only on steps that reach select, budgets 1-indexed cosine
- analysts are told the configured maximum L whatever the step's budget (quirk: analysts-told-max-budget)
- epoch batches: the train split shuffled with Random(seed + 1000·e), consecutive batches
- the step buffer: per epoch, skips excluded
- slow update: epoch-1 placeholder; from epoch 2 the previous skill, current skill, previous guidance and
  comparison of Random(seed + 2000·e) samples
- meta skill: none in epoch 1, written from epoch 2, used in the analyst, merge and ranking prompts of the
  following epoch only
- the `changed` pair policy tops up along the same shuffle
"""

from __future__ import annotations

import json
import math
import random
import re

import pytest
from conformance_helpers import SEED, FakeRunner, ScriptedOptimizer, make_run

from skillopt_ray.skill.document import SLOW_END, SLOW_START


def cosine(k: int, T: int, mx: int, mn: int) -> int:
    """The reference's cosine budget: 1-indexed, floored at the minimum only."""
    if T <= 1:
        return mx
    t = min(k, T) / T
    return max(mn, round(mn + 0.5 * (mx - mn) * (1 + math.cos(math.pi * t))))


@pytest.fixture(scope="module")
def three_epochs(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("loop"))


def test_scheduler_advances_only_on_steps_that_reach_select(three_epochs):
    trainer, rd, _, llm, _ = three_epochs
    history = json.loads((rd.root / "history.json").read_text())
    T = 3 * 2  # epochs x ceil(4 / 2)
    assert [h["action"] for h in history][1] == "skip_no_patches"
    # step 2 skipped: steps 1,3,4,5,6 take lr(1..5); the skipped step takes no budget
    expected = [cosine(1, T, 4, 2), None] + [cosine(k, T, 4, 2) for k in range(2, 6)]
    assert expected == [4, None, 4, 3, 2, 2]
    assert [h["edit_budget"] for h in history] == expected
    assert trainer.state.lr_step == 5
    # the ranking call of each selecting step names that budget
    budgets = [int(re.search(r"budget=(\d+)\)", llm.user(c)).group(1)) for c in llm.of("ranking")]
    assert budgets == [b for b in expected if b is not None]


def test_analysts_are_told_the_configured_maximum(three_epochs):
    _, _, _, llm, _ = three_epochs
    analysts = llm.of("analyst")
    assert len(analysts) == 12  # 6 steps x 2 failed minibatches of 1
    for c in analysts:
        assert re.search(r"^## Edits Budget\nL=4 edits", llm.user(c), re.M), c.key


def test_epoch_batches_follow_seed_plus_1000_epoch(three_epochs):
    _, _, runner, _, splits = three_epochs
    training = [c for c in runner.calls if c["training"]]
    expected = []
    for e in (1, 2, 3):
        order = [t.task_id for t in splits.train]
        random.Random(SEED + 1000 * e).shuffle(order)
        expected += [order[0:2], order[2:4]]
    assert [c["ids"] for c in training] == expected


def test_step_buffer_is_per_epoch_and_skips_leave_no_entry(three_epochs):
    _, _, _, llm, _ = three_epochs

    def buffer_of(prefix):
        texts = {llm.user(c) for c in llm.of("analyst", prefix)}
        assert texts
        return [
            t.split("## Previous Steps in This Epoch\n", 1)[1].split("\n## ", 1)[0]
            if "## Previous Steps" in t
            else None
            for t in texts
        ]

    assert buffer_of("train/e1s1/") == [None, None]
    assert all("### Step 1 — REJECT (2/2 failed)" in b for b in buffer_of("train/e1s2/"))
    assert buffer_of("train/e2s1/") == [None, None]  # reset at the epoch start; the skipped step 2 left nothing
    for b in buffer_of("train/e2s2/"):
        assert "### Step 3 — REJECT (2/2 failed)" in b and "Step 1" not in b and "Step 2" not in b
        assert '  - "premature_stop: gave up" (×2, tasks: ' in b
        assert "  Rejected edits (score 0.0 → 0.0):\n" in b
        assert '    1. [append] "- merged 4"' in b  # the ranked order


def test_slow_update_inputs(three_epochs):
    trainer, rd, runner, llm, splits = three_epochs
    assert json.loads((rd.root / "epochs/e01/slow_result.json").read_text()) == {
        "action": "inject_placeholder",
        "epoch": 1,
    }
    e2, e3 = llm.of("slow_update")
    assert [c.key for c in (e2, e3)] == ["slow/e2/write", "slow/e3/write"]
    u2, u3 = llm.user(e2), llm.user(e3)
    for u in (u2, u3):
        assert "## Optimizer Meta Skill" not in u
        assert (
            "## Longitudinal Comparison (same 20 tasks, two skill versions)\n## Longitudinal Comparison Summary\nTotal samples: 3\n"
            in u
        )
    # epoch 2: the previous skill is epoch 1's end skill, with the empty placeholder; no earlier guidance
    prev2 = u2.split("## Previous Epoch's Skill\n", 1)[1].split("\n## Current Epoch's Skill", 1)[0]
    assert f"{SLOW_START}\n{SLOW_END}" in prev2 and "GUIDE" not in prev2
    guidance2 = u2.split("## Previous Slow Update Guidance\n", 1)[1].split("## Longitudinal", 1)[0]
    assert "GUIDE" not in guidance2
    # epoch 2's guidance was accepted (it improves selection): epoch 3 sees it as previous guidance and in both skills
    assert json.loads((rd.root / "epochs/e02/slow_result.json").read_text())["action"] == "accept_new_best"
    guidance3 = u3.split("## Previous Slow Update Guidance\n", 1)[1].split("## Longitudinal", 1)[0]
    assert "GUIDE e2" in guidance3
    prev3 = u3.split("## Previous Epoch's Skill\n", 1)[1].split("\n## Current Epoch's Skill", 1)[0]
    curr3 = u3.split("## Current Epoch's Skill\n", 1)[1].split("\n## Previous Slow Update Guidance", 1)[0]
    assert f"{SLOW_START}\nGUIDE e2\n{SLOW_END}" in prev3 and f"{SLOW_START}\nGUIDE e2\n{SLOW_END}" in curr3
    # the sample: Random(seed + 2000·e), first n, the same tasks for both skills; trajectories of both sides shown
    for e, u in ((2, u2), (3, u3)):
        order = [t.task_id for t in splits.train]
        random.Random(SEED + 2000 * e).shuffle(order)
        boundary = [c for c in runner.calls if not c["training"] and c["key"].startswith(f"slow/e{e}/")]
        assert [c["ids"] for c in boundary] == [order[:3], order[:3]]
        assert all(f"#### Task {tid}:" in u for tid in order[:3])
        assert "**Previous epoch trajectory:**\n```\n[step 0 think] start\n[step 0 action] look\n" in u
        assert "**Current epoch trajectory:**\n```\n" in u
        assert u.index("### Regressions (right→wrong) — HIGHEST PRIORITY") < u.index(
            "### Persistent Failures (wrong→wrong)"
        )
    # the guidance is the one block at the very end of the final skill
    final = trainer.current
    assert final.count(SLOW_START) == 1 and final.endswith(f"{SLOW_START}\nGUIDE e2\n{SLOW_END}\n")


def test_meta_skill_timing(three_epochs):
    _, rd, runner, llm, _ = three_epochs
    assert json.loads((rd.root / "epochs/e01/meta_skill_result.json").read_text()) == {
        "action": "skip_first_epoch",
        "epoch": 1,
    }
    m2, m3 = llm.of("meta_skill")
    assert [c.key for c in (m2, m3)] == ["meta/e2", "meta/e3"]
    prev_meta2 = llm.user(m2).split("## Previous Optimizer Meta Skill\n", 1)[1].split("## Longitudinal", 1)[0]
    prev_meta3 = llm.user(m3).split("## Previous Optimizer Meta Skill\n", 1)[1].split("## Longitudinal", 1)[0]
    assert "META-" not in prev_meta2 and "META-E2" in prev_meta3
    assert (
        "## Longitudinal Comparison (same tasks, two last-step skills)\n## Longitudinal Comparison Summary"
        in llm.user(m2)
    )
    # the meta skill reuses the slow update's pairs: no rollouts of its own
    assert not [c for c in runner.calls if c["key"].startswith("meta/")]
    # written at the end of epoch 2, used in epoch 3's analyst, merge and ranking prompts only
    for c in llm.calls:
        if c.stage not in ("analyst", "merge", "ranking"):
            continue
        u = llm.user(c)
        assert "META-E3" not in u
        if c.key.startswith("train/e3"):
            assert "## Optimizer Meta Skill" in u and "META-E2" in u, c.key
        else:
            assert "## Optimizer Meta Skill" not in u, c.key
    # analysts: after the step buffer, before the trajectories; merge and ranking: prepended
    for c in llm.of("analyst", "train/e3s2"):
        u = llm.user(c)
        assert (
            u.index("## Previous Steps in This Epoch")
            < u.index("## Optimizer Meta Skill")
            < u.index("## Failed Trajectories")
        )
    for c in llm.of("merge", "train/e3") + llm.of("ranking", "train/e3"):
        assert llm.user(c).startswith("## Optimizer Meta Skill")


def test_merge_sees_the_current_skill(three_epochs):
    _, _, runner, llm, _ = three_epochs
    for c in llm.of("merge", "train/e3s1"):
        step_skill = next(r["skill"] for r in runner.calls if r["key"] == "train/e3s1")
        assert f"## Current Skill\n{step_skill}" in llm.user(c)
        assert "merge level 1" in llm.user(c)


def test_changed_policy_tops_up_along_the_same_shuffle(tmp_path):
    """The `changed` policy: keep improved + regressed, then walk the rest of the Random(seed + 2000·e) shuffle
    until n changed pairs are kept."""
    train = [f"tr{i}" for i in range(6)]
    order = list(train)
    random.Random(SEED + 2000 * 2).shuffle(order)
    changed = {order[1], order[4]}  # the first sample (order[:2]) holds one changed pair; the walk finds order[4]
    runner = FakeRunner(curr_passes=lambda tid: tid in changed)
    trainer, rd, runner, llm, _ = make_run(
        tmp_path, epochs=2, train_n=6, samples=2, pairs="changed", runner=runner, llm=ScriptedOptimizer(skip_keys=())
    )
    kept = json.loads((rd.root / "epochs/e02/comparison_pairs.json").read_text())
    assert [p["id"] for p in kept] == [order[1], order[4]]
    assert all(p["category"] == "improved" for p in kept)
    (slow,) = llm.of("slow_update")
    assert "Total samples: 2\n- Improved (wrong→right): 2\n" in llm.user(slow)
    # every boundary rollout ran the same tasks for both skills, walking the shuffle in order
    boundary = [c for c in runner.calls if not c["training"] and c["key"].startswith("slow/e2/")]
    walked = [tid for c in boundary if "prev" in c["key"] for tid in c["ids"]]
    assert walked == order[: len(walked)] and order[4] in walked and order[5] not in walked
    assert sorted(c["ids"] for c in boundary if "prev" in c["key"]) == sorted(
        c["ids"] for c in boundary if "curr" in c["key"]
    )
