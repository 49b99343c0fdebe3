"""A call that runs out of retries is one call's bad luck, not the run's end (SearchQA smoke through the CLI, the
driver and the gateway actor, against a scripted endpoint that answers HTTP 500 to every attempt of chosen calls).

A target call out of retries is an infra error of its episode (kind `llm`, counted, kept out of the means), and the
run goes on within optimizer.max_infra_failure_fraction. An optimizer call out of retries takes its stage's
fallback, as the reference does for an unusable reply: an analyst's minibatch yields nothing, a merge concatenates
its inputs, a ranking keeps the first N, the slow update and the meta skill are skipped; each error is recorded."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web
from conftest import qa_fixture
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli

pytestmark = pytest.mark.slow

FAST_RETRIES = ["llm.max_retries=2", "llm.retry_base_s=0.05", "llm.retry_max_s=0.1", "llm.retry_window_s=5"]


class FailingCalls(ScriptedServer):
    """The scripted server, answering HTTP 500 to every attempt of the calls `fails(role, stage, key)` picks."""

    def __init__(self, fails, **kw):
        super().__init__(**kw)
        self.fails = fails
        self.failed: Counter = Counter()  # (role, stage) -> attempts answered 500

    async def _chat(self, request: web.Request) -> web.Response:
        h = request.headers
        role, stage, key = h.get("X-SkillOpt-Role", ""), h.get("X-SkillOpt-Stage", ""), h.get("X-SkillOpt-Key", "")
        if self.fails(role, stage, key):
            self.failed[(role, stage)] += 1
            return web.json_response({"error": {"message": "injected 500", "type": "injected"}}, status=500)
        return await super()._chat(request)


def _run(url: str, out: Path, data: Path, *extra: str) -> tuple[int, Path]:
    overrides = [
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        f"env.data_dir={data}",
        "env.options.split_source=folders",
        *FAST_RETRIES,
        *extra,
    ]
    cfg = cli.plain(cli.compose(overrides))
    cfg = cli.resolve_paths(cfg)
    return cli.run_one(checked(cfg)), cli.run_dir_for(cfg)


def test_calls_out_of_retries_take_fallbacks_and_the_run_finishes(ray_cluster, tmp_path, capsys):
    answers = qa_fixture(tmp_path / "qa")
    first_train = json.loads((tmp_path / "qa" / "train" / "items.json").read_text())[0]["id"]

    def fails(role: str, stage: str, key: str) -> bool:
        if role == "target":  # one episode of epoch 2's training rollout
            return key.startswith("train/e2") and f"/{first_train}/" in key
        if key.startswith("train/e1"):
            return stage in ("merge", "ranking")
        return stage in ("slow_update", "meta_skill") or (stage == "analyst" and key.startswith("train/e2"))

    with FailingCalls(fails, policies=Policies(target="rule_gated", answers=answers)) as srv:
        code, rd = _run(
            srv.base_url,
            tmp_path / "out",
            tmp_path / "qa",
            "env.limit_train=2",
            "optimizer.batch_size=2",
            "optimizer.minibatch_size=1",  # two analysts per step, so a merge call
            "optimizer.learning_rate=1",  # a budget below the merged edits, so a ranking call
            "optimizer.min_learning_rate=1",
            "optimizer.max_infra_failure_fraction=0.5",
        )
        failed = dict(srv.failed)
    err = capsys.readouterr().err
    assert code == 0, err
    # every chosen call was tried and failed (first attempt + llm.max_retries)
    for role_stage in [("target", "rollout"), ("optimizer", "merge"), ("optimizer", "ranking")]:
        assert failed.get(role_stage, 0) >= 3, failed
    for stage in ("slow_update", "meta_skill", "analyst"):
        assert failed.get(("optimizer", stage), 0) >= 3, failed
    unavailable = "optimizer endpoint unavailable at endpoint " + srv.base_url

    def read(rel: str):
        return json.loads((rd / rel).read_text())

    # target: the episode is an infra error of kind llm, kept out of the step's means; the run went on
    rec = read("steps/e02_s001/step_record.json")
    results = read("steps/e02_s001/rollout.json")
    bad = [r for r in results if r["infra_error"]]
    scored = [r for r in results if not r["infra_error"]]
    assert [(r["task_id"], r["error_kind"]) for r in bad] == [(first_train, "llm")] and len(scored) == 1
    assert (rec["infra_errors"], rec["infra_kinds"], rec["rollout_n"]) == (1, {"llm": 1}, 1), rec
    assert rec["rollout_hard"] == scored[0]["hard"]  # the mean over the scored episode only
    assert "target endpoint unavailable" in bad[0]["error"]
    # merge: the inputs concatenated; ranking: the first `budget` of them
    agg = read("steps/e01_s001/aggregate.json")
    assert agg["merged"]["reasoning"] == "fallback concatenation" and len(agg["merged"]["edits"]) == 2
    assert len(agg["fallbacks"]) == 1 and unavailable in agg["fallbacks"][0]
    sel = read("steps/e01_s001/select.json")
    assert sel["budget"] == 1 and unavailable in sel["fallback"]
    assert sel["selected"]["edits"] == agg["merged"]["edits"][:1]
    # an analyst: its minibatch yields nothing, the error recorded
    refl = read("steps/e02_s001/reflect.json")
    assert refl["dropped"] == 1 and len(refl["errors"]) == 1 and unavailable in refl["errors"][0]
    # slow update and meta skill: skipped, the error recorded
    for rel in ("epochs/e02/slow_result.json", "epochs/e02/meta_skill_result.json"):
        res = read(rel)
        assert res["action"] == "no_content" and unavailable in res["error"], res
    counts = read("summary.json")["counts"]
    assert (counts["merge_fallbacks"], counts["rank_fallbacks"], counts["dropped_epoch_calls"]) == (1, 1, 2)
    assert counts["dropped_analyses"] == 1
