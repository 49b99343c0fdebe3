"""End-to-end training through the driver actor, the real client path and the real ALFWorld engine,
plus lossless resume at several interruption points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import checked

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def _data(url: str, out: Path, alfworld_root: Path, *extra: str) -> dict:
    overrides = [
        "+experiment=alfworld",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"env.data_dir={alfworld_root}",
        f"output_dir={out}",
        "env.max_turns=10",
        "debug.progress=off",
        "env.options.skip_missing_games=true",
        # this file's sizes (the smoke preset's were these before it shrank for the quickstart's sake)
        "env.limit_train=4",
        "env.limit_selection=2",
        "env.limit_test=2",
        "optimizer.batch_size=4",
        "optimizer.minibatch_size=2",
        "optimizer.slow_update_samples=2",
        "optimizer.lr_schedule=cosine",
        *extra,
    ]
    return cli.load(overrides)


def _run(url, out, root, *extra) -> tuple[int, Path]:
    data = _data(url, out, root, *extra)
    return cli.run_one(checked(data)), cli.run_dir_for(data)


def _fingerprint(run_dir: Path) -> dict:
    skills = {p.name: p.read_text() for p in sorted((run_dir / "skills").glob("*.md"))}
    history = json.loads((run_dir / "history.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "skills": skills,
        "history": history,
        "best": (run_dir / "best_skill.md").read_text(),
        "test": summary["test"],
        "counts": summary["counts"],
    }


def test_tiny_experiment_runs_all_stages_two_epochs(ray_cluster, scripted, alfworld_root, tmp_path, capsys):
    code, rd = _run(scripted.base_url, tmp_path / "out", alfworld_root)
    assert code == 0
    summary = json.loads((rd / "summary.json").read_text())
    # the rule-gated target only wins once the optimizer taught it the rule for its task type
    assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] == 1.0
    assert summary["counts"]["accept"] >= 1 and summary["steps"] == 2
    assert set(summary["test"]["best"]["per_type"]) and summary["tokens"]["calls"] > 0
    for rel in (
        "config.yaml",
        "state.json",
        "history.json",
        "best_skill.md",
        "skills/skill_v0000.md",
        "skills/skill_v0001.md",
        "steps/e01_s001/rollout.json",
        "steps/e01_s001/reflect.json",
        "steps/e01_s001/aggregate.json",
        "steps/e01_s001/select.json",
        "steps/e01_s001/update.json",
        "steps/e01_s001/gate.json",
        "steps/e01_s001/candidate.md",
        "steps/e01_s001/step_record.json",
        "epochs/e01/meta_skill_result.json",
        "epochs/e01/slow_result.json",
        "epochs/e02/slow_result.json",
        "epochs/e02/slow_pairs.json",
        "epochs/e02/comparison_pairs.json",
        "epochs/e02/slow_update_prompt.md",
        "epochs/e02/meta_skill_prompt.md",
        "epochs/e02/meta_skill_result.json",
        "final/evaluation.json",
        "ledger.json",
    ):
        assert (rd / rel).exists(), rel
    rollout = json.loads((rd / "steps/e01_s001/rollout.json").read_text())
    assert len(rollout) == 4 and all(r["trajectory"] for r in rollout)
    gate = json.loads((rd / "steps/e01_s001/gate.json").read_text())
    assert gate["action"] == "accept_new_best"
    # the decision explained: scores compared, the rule, the selection tasks that flipped, the diff
    assert gate["reason"].startswith(
        "candidate 1.0000 vs current 0.0000 (best 0.0000), hard score over 2 selection tasks: accepted"
    )
    assert len(gate["flipped"]["to_pass"]) == 2 and gate["flipped"]["to_fail"] == []
    diff = (rd / "steps/e01_s001/diff.md").read_text()
    assert diff.startswith("```diff\n--- current\n+++ candidate\n") and "+- RULE-" in diff
    assert "RULE-" in (rd / "best_skill.md").read_text()
    # epoch 1: the empty slow-update placeholder goes into current (unscored) and no meta skill is written
    assert json.loads((rd / "epochs/e01/slow_result.json").read_text())["action"] == "inject_placeholder"
    assert json.loads((rd / "epochs/e01/meta_skill_result.json").read_text())["action"] == "skip_first_epoch"
    slow = json.loads((rd / "epochs/e02/slow_result.json").read_text())
    assert slow["action"] == "reject"  # selection already 1.0: the gated block ties, and ties reject
    assert "<!-- SLOW_UPDATE_START -->\nKeep following" in (rd / "epochs/e02/candidate_skill.md").read_text()
    assert "SLOW_UPDATE" not in (rd / "best_skill.md").read_text()
    state = json.loads((rd / "state.json").read_text())
    final_skill = (rd / "skills" / f"skill_v{state['current_version']:04d}.md").read_text()
    assert final_skill.endswith(
        "<!-- SLOW_UPDATE_START -->\n<!-- SLOW_UPDATE_END -->\n"
    )  # the rejected block never landed
    assert state["meta_skill"] and state["phase"] == "done" and state["version"] == 2
    # MLflow: one run with params, per-step metrics and every skill version as artifacts
    from mlflow.tracking import MlflowClient

    ml = json.loads((rd / "mlflow_run.json").read_text())
    client = MlflowClient(ml["tracking_uri"])
    run = client.get_run(ml["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["optimizer.learning_rate"] == "4"
    assert "llm.target.api_key_env" in run.data.params
    history = json.loads((rd / "history.json").read_text())
    # the reference's cosine 4 -> 2 over T=2 steps is 3, 2, and the schedule moves only on steps that reach select
    assert history[0]["action"] == "accept_new_best" and history[0]["edit_budget"] == 3
    assert [h["edit_budget"] for h in history if h["edit_budget"] is not None] == [3, 2][
        : sum(h["edit_budget"] is not None for h in history)
    ]
    gated = [h for h in history if h["candidate_gate_score"] is not None]
    assert len(client.get_metric_history(ml["run_id"], "score/candidate_gate_score")) == len(gated) >= 1
    tokens = client.get_metric_history(ml["run_id"], "tokens/tokens_total")
    assert len(tokens) >= 2 and tokens[0].value > 0  # per-step ledger metrics (plus the final total)
    assert client.get_metric_history(ml["run_id"], "tokens/tokens.target.rollout")
    skills = {Path(a.path).name for a in client.list_artifacts(ml["run_id"], "skills")}
    assert {"skill_v0000.md", "skill_v0001.md"} <= skills
    assert {a.path for a in client.list_artifacts(ml["run_id"])} >= {"best_skill.md", "summary.json"}
    out = capsys.readouterr().out
    assert "test hard" in out and "mlflow run:" in out


def test_resume_is_lossless_at_several_points(ray_cluster, scripted, alfworld_root, tmp_path):
    code, ref_dir = _run(scripted.base_url, tmp_path / "ref", alfworld_root)
    assert code == 0
    ref_calls = scripted.state.attempts
    reference = _fingerprint(ref_dir)
    for point in ("e1s1:reflect", "e1s1:gate", "e2:slow_pairs", "e2:slow_update", "final:initial"):
        out = tmp_path / point.replace(":", "_")
        before = scripted.state.attempts
        code, rd = _run(scripted.base_url, out, alfworld_root, f"debug.interrupt_after={point}")
        assert code == cli.EXIT_STOPPED, point
        assert not (rd / "summary.json").exists()
        code, rd2 = _run(scripted.base_url, out, alfworld_root)
        assert code == 0 and rd2 == rd
        assert _fingerprint(rd) == reference, point
        assert scripted.state.attempts - before == ref_calls, f"{point}: paid calls repeated on resume"


def test_replay_reproduces_a_recorded_run_offline(ray_cluster, scripted, alfworld_root, tmp_path):
    code, rd = _run(scripted.base_url, tmp_path / "rec", alfworld_root)
    assert code == 0
    reference = _fingerprint(rd)
    # same cache, fresh run directory contents, server gone
    for p in rd.iterdir():
        if p.name != "llm_cache.sqlite" and not p.name.startswith("llm_cache"):
            if p.is_dir():
                import shutil

                shutil.rmtree(p)
            else:
                p.unlink()
    scripted.stop()
    code, rd2 = _run(scripted.base_url, tmp_path / "rec", alfworld_root, "llm.cache_mode=replay")
    assert code == 0 and rd2 == rd
    assert _fingerprint(rd) == reference
    assert json.loads((rd / "ledger.json").read_text())["totals"]["calls"] == 0


def test_eval_only_scores_a_skill_per_type(ray_cluster, scripted, alfworld_root, tmp_path):
    skill = tmp_path / "skill.md"
    skill.write_text("# skill\n- RULE-pick_and_place\n- RULE-look_at_obj_in_light\n")
    code, rd = _run(
        scripted.base_url,
        tmp_path / "ev",
        alfworld_root,
        "mode=eval",
        f"eval.skill_path={skill}",
        "eval.split=val",
        "env.limit_selection=6",
    )
    assert code == 0
    s = json.loads((rd / "summary.json").read_text())
    per = s["eval"]["per_type"]
    assert s["eval"]["n"] == 6 and len(per) == 6
    assert per["pick_and_place"]["hard"] == 1.0 and per["pick_heat_then_place_in_recep"]["hard"] == 0.0
    assert abs(s["eval"]["hard"] - 2 / 6) < 1e-9
    iv = s["intervals"]["eval"]["hard"]  # the score's 95% interval over the 6 tasks (Wilson: 0/1 task scores)
    assert iv["n"] == 6 and iv["method"] == "wilson" and iv["lo"] < 2 / 6 < iv["hi"]


def test_infra_failures_stop_the_run_with_a_clear_error(ray_cluster, scripted, alfworld_root, tmp_path, capsys):
    # a data dir whose selection split exists but whose games vanish -> infrastructure failures, not zero scores
    import shutil

    root = tmp_path / "data"
    shutil.copytree(alfworld_root / "json_2.1.1", root / "json_2.1.1")
    data = _data(scripted.base_url, tmp_path / "o", root)
    for g in (root / "json_2.1.1" / "valid_seen").glob("*/*/game.tw-pddl"):
        g.write_text("{not json")  # present but unloadable: every selection episode is an infrastructure failure
    code = cli.run_one(checked(data))
    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR
    assert "failed for infrastructure reasons" in err


def test_missing_data_dir_is_one_line_exit_2(ray_cluster, scripted, tmp_path, capsys):
    """The data check runs once, in preflight (before any run directory): one line naming the folder and the fix."""
    from skillopt_ray.cli.errors import UsageError

    with pytest.raises(UsageError) as err:
        checked(_data(scripted.base_url, tmp_path / "o", tmp_path / "no-such-data"))
    text = str(err.value)
    assert text.startswith("ALFWorld data directory") and "does not exist" in text and "\n" not in text
    assert not (tmp_path / "o").exists()


def test_three_epochs_slow_update_and_meta_skill_see_their_inputs(ray_cluster, scripted, alfworld_root, tmp_path):
    """The reference's epoch boundary (slow update, meta skill) through the real loop: the slow update sees the
    previous and current skill and the previous guidance; the meta skill is written from epoch 2 on and shown to
    the optimizer the epoch after."""
    code, rd = _run(
        scripted.base_url,
        tmp_path / "out",
        alfworld_root,
        "optimizer.epochs=3",
        "optimizer.slow_update_gate=false",
        "optimizer.slow_update_samples=4",
    )
    assert code == 0
    slow2 = (rd / "epochs/e02/slow_update_prompt.md").read_text()
    slow3 = (rd / "epochs/e03/slow_update_prompt.md").read_text()
    for text in (slow2, slow3):
        order = [
            "## Previous Epoch's Skill",
            "## Current Epoch's Skill",
            "## Previous Slow Update Guidance",
            "## Longitudinal Comparison (same 20 tasks, two skill versions)",
            "### Regressions (right→wrong) — HIGHEST PRIORITY",
            "### Persistent Failures (wrong→wrong)",
            "### Improvements (wrong→right)",
            "### Stable Successes (right→right)",
        ]
        assert [text.find(h) for h in order] == sorted(text.find(h) for h in order) and min(
            text.find(h) for h in order
        ) >= 0
    guidance = "Keep following the per-task-type rules"
    assert "(none yet" in slow2.split("## Previous Slow Update Guidance", 1)[1].split("## Longitudinal", 1)[0]
    assert (
        guidance in slow3.split("## Previous Slow Update Guidance", 1)[1].split("## Longitudinal", 1)[0]
    )  # force-injected in e2
    assert guidance in slow3.split("## Previous Epoch's Skill", 1)[1].split("## Current Epoch's Skill", 1)[0]
    assert json.loads((rd / "epochs/e02/slow_result.json").read_text())["action"] == "force_accept"
    meta_content = "Appending one rule per failing task type"
    assert json.loads((rd / "epochs/e01/meta_skill_result.json").read_text())["action"] == "skip_first_epoch"
    meta2 = (rd / "epochs/e02/meta_skill_prompt.md").read_text()
    meta3 = (rd / "epochs/e03/meta_skill_prompt.md").read_text()
    assert (
        "## Previous Epoch Last-Step Skill" in meta2
        and "## Longitudinal Comparison (same tasks, two last-step skills)" in meta2
    )
    assert "(none yet" in meta2 and meta_content in meta3.split("## Previous Optimizer Meta Skill", 1)[1]
    # the meta skill written at the end of epoch 2 reaches the optimizer's prompts in epoch 3 only
    log = scripted.policies.optimizer_log
    analysts = {k: msgs[-1]["content"] for stage, k, msgs in log if stage == "analyst"}
    e2 = [t for k, t in analysts.items() if k.startswith("train/e2s")]
    e3 = [t for k, t in analysts.items() if k.startswith("train/e3s")]
    assert e2 and e3
    assert not any("## Optimizer Meta Skill" in t for t in e2)
    assert all("## Optimizer Meta Skill" in t and meta_content in t for t in e3)
    assert not any(
        "## Optimizer Meta Skill" in msgs[-1]["content"] for stage, _k, msgs in log if stage == "slow_update"
    )


def test_unparseable_optimizer_replies_fall_back_and_the_run_finishes(
    ray_cluster, walkthroughs, alfworld_root, tmp_path
):
    """Merges and rankings that stay unparseable after the re-ask fall back (concatenation, first N), recorded."""
    from scripted_server import Policies, ScriptedServer

    class Garbled(Policies):
        def optimizer_reply(self, stage, body):
            return (
                "sorry, I cannot produce JSON today"
                if stage in ("merge", "ranking")
                else super().optimizer_reply(stage, body)
            )

    with ScriptedServer(Garbled(walkthroughs, "rule_gated")) as srv:
        code, rd = _run(
            srv.base_url,
            tmp_path / "out",
            alfworld_root,
            "optimizer.epochs=1",
            "optimizer.learning_rate=2",
            "optimizer.min_learning_rate=1",
        )
        asked = srv.state.requests
    assert code == 0
    agg = json.loads((rd / "steps/e01_s001/aggregate.json").read_text())
    sel = json.loads((rd / "steps/e01_s001/select.json").read_text())
    assert agg["fallbacks"] and agg["merged"]["reasoning"] == "fallback concatenation"
    assert sel["ranked"] and sel["fallback"] and "[fallback truncated" in sel["selected"]["reasoning"]
    assert len(agg["merged"]["edits"]) > 2 and len(sel["selected"]["edits"]) == sel["budget"] == 2  # T=1: the maximum
    assert asked[("optimizer", "merge")] == 2 * agg["calls"]  # each merge was re-asked once
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["counts"]["merge_fallbacks"] == len(agg["fallbacks"]) and summary["counts"]["rank_fallbacks"] == 1


def test_a_budget_stop_resumes_to_the_uninterrupted_result(ray_cluster, scripted, alfworld_root, tmp_path):
    code, ref_dir = _run(scripted.base_url, tmp_path / "ref", alfworld_root)
    assert code == 0
    reference = _fingerprint(ref_dir)
    calls = json.loads((ref_dir / "ledger.json").read_text())["totals"]["calls"]
    code, rd = _run(scripted.base_url, tmp_path / "capped", alfworld_root, f"llm.budget.max_calls={calls // 2}")
    assert code == cli.EXIT_STOPPED and not (rd / "summary.json").exists()
    assert json.loads((rd / "ledger.json").read_text())["totals"]["calls"] <= calls // 2
    code, rd2 = _run(scripted.base_url, tmp_path / "capped", alfworld_root, f"llm.budget.max_calls={calls // 2}")
    assert code == cli.EXIT_STOPPED  # the cap still holds on a rerun
    code, rd3 = _run(scripted.base_url, tmp_path / "capped", alfworld_root, f"llm.budget.max_calls={calls}")
    assert code == 0 and rd3 == rd  # budgets are not part of a run's identity: the same run resumes
    assert _fingerprint(rd) == reference
    assert json.loads((rd / "ledger.json").read_text())["totals"]["calls"] == calls
