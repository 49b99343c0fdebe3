"""Early-stopping gate (issue 16, `optimizer.gate_early_stop`, off in the paper protocol): with the hard
metric and a strict comparison, a candidate that has lost so many selection episodes that it can no longer
beat the current score is rejected without playing the rest. Same decisions, fewer paid episodes."""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import pytest
from helpers import echo_llm, llm_config
from scripted_server import ScriptedServer
from skillopt_envs.base import NOT_PLAYED, EpisodeResult, Task
from skillopt_envs.chat import JsonResult

from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402


class Runner:
    """Plays episodes one after another, as a pool with one slot would. Selection task i passes for a skill by
    a fixed pseudo-random rule of (skill, i), so candidates differ; training episodes all fail."""

    def __init__(self) -> None:
        self.selection_played = 0

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop=None) -> list[EpisodeResult]:
        out, stopped = [], False
        for t in tasks:
            if stopped:
                out.append(EpisodeResult(t.task_id, t.task_type, fail_reason=NOT_PLAYED))
                continue
            hard = 0.0 if ctx.training else float(zlib.crc32(f"{skill}|{t.task_id}".encode()) % 3 != 0)
            self.selection_played += not ctx.training
            r = EpisodeResult(
                t.task_id,
                t.task_type,
                hard=hard,
                soft=hard,
                n_turns=1,
                task_description="g",
                fail_reason="" if hard else "failed: no",
                trajectory=[{"role": "agent", "content": "tried"}],
            )
            out.append(r)
            stopped = stop is not None and stop(r)
        return out


class Optimizer:
    async def chat_json(self, req, schema, name="reply"):
        assert req.stage == "analyst", req.stage
        data = {
            "batch_size": 1,
            "failure_summary": [],
            "patch": {"reasoning": "r", "edits": [{"op": "append", "content": f"- tip {req.key}"}]},
        }
        return JsonResult(data, json.dumps(data))

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def _run(tmp_path, early: bool):
    cfg = Config(experiment="early")
    cfg.optimizer = OptimizerConfig(
        epochs=4, batch_size=1, minibatch_size=8, slow_update=False, meta_skill=False, gate_early_stop=early
    )
    rd = RunDir(tmp_path / f"early{early}").ensure()
    runner = Runner()
    splits = Splits(
        [Task(f"tr{i}", "t") for i in range(4)], [Task(f"va{i}", "t") for i in range(12)], [Task("te0", "t")]
    )
    asyncio.run(
        Trainer(cfg, rd, Optimizer(), runner, Tracker(False, None, "early", tmp_path), splits, "# seed\n").run()
    )
    history = json.loads((rd.root / "history.json").read_text())
    return history, runner.selection_played, json.loads((rd.root / "summary.json").read_text())


def test_same_decisions_with_fewer_selection_episodes(tmp_path):
    full, played_full, s_full = _run(tmp_path, False)
    early, played_early, s_early = _run(tmp_path, True)
    assert [h["action"] for h in early] == [h["action"] for h in full]
    assert [h["current_score"] for h in early] == [h["current_score"] for h in full]
    assert s_early["selection"]["best"] == s_full["selection"]["best"] and s_early["versions"] == s_full["versions"]
    rejects = sum(h["action"] == "reject" for h in full)
    assert rejects >= 3 and any(h["action"].startswith("accept") for h in full)  # the run exercises both outcomes
    saved = 1 - played_early / played_full
    print(
        f"gate early stop: {rejects} rejects in {len(full)} steps, selection episodes {played_full} -> {played_early} ({saved:.0%} saved)"
    )
    assert saved > 0.1
    stopped = [json.loads(p.read_text()) for p in sorted((tmp_path / "earlyTrue/steps").glob("*/gate.json"))]
    assert all(g["action"] == "reject" for g in stopped if g.get("early_stopped"))
    assert any(
        g.get("early_stopped") and g["episodes_not_played"] > 0 and g["reason"].startswith("rejected early")
        for g in stopped
    )


@pytest.mark.parametrize("metric", ["soft", "mixed"])
def test_only_the_hard_gate_stops_early(tmp_path, metric):
    cfg = Config(experiment="early")
    cfg.optimizer = OptimizerConfig(gate_metric=metric, gate_early_stop=True)
    trainer = Trainer(
        cfg,
        RunDir(tmp_path).ensure(),
        Optimizer(),
        Runner(),
        Tracker(False, None, "e", tmp_path),
        Splits([], [], []),
        "# s\n",
    )
    assert trainer.evaluator.certain_reject(trainer.state) is None


def test_the_pool_cancels_the_episodes_left_on_their_actors(ray_cluster):
    """Real env actors and gateway: once `stop` says so, episodes in flight are cancelled on the actors and come
    back not_played, and no further model call is made for them.

    Load-independent: two tasks are answered at once, every other task's calls are held by the server until the test
    opens it, so which episodes finish is fixed (not a race against the clock). Opened after the cancel, the held
    calls are answered; an episode that was not cancelled would then make its next call. Episodes played afterwards
    on the same actors are the barrier: the cancels were sent to the actors before them."""
    import ray
    from skillopt_envs.base import EpisodeContext
    from skillopt_envs.synthetic.benchmark import SyntheticBenchmark

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm.gateway import GatewayActor

    env_cfg = {"options": {"tasks": 8, "calls": 3}}
    tasks = SyntheticBenchmark(env_cfg).load_split("val")
    fast = {t.task_id for t in tasks[:2]}
    with GatedServer(fast) as srv:
        gw = GatewayActor.remote(llm_config(echo_llm(srv.base_url)), None, None, None)
        pool = EnvPool("synthetic", env_cfg, gw, PoolSettings(2, 2, 0.0, 60.0, 1))  # 4 slots for 8 episodes
        try:
            seen: list[str] = []

            def stop(r: EpisodeResult) -> bool:
                seen.append(r.task_id)
                return len(seen) >= 2

            results = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("cancel", False, 4, 0), stop=stop))
            held = srv.held_keys()
            srv.open()  # the held calls are answered now: a live episode would go on to its next call
            after = asyncio.run(pool.run(tasks[:2] * 2, "# skill", EpisodeContext("after", False, 4, 0)))
            held_after = srv.held_keys()
        finally:
            srv.open()
            pool.shutdown()
            ray.kill(gw)
    assert [r.task_id for r in results] == [t.task_id for t in tasks]
    assert {r.task_id for r in results if not r.not_played} == fast and set(seen) == fast
    assert all(r.hard == 1.0 for r in results if not r.not_played)
    assert sum(r.not_played for r in results) == 6  # the ones held in flight and the ones that never got a slot
    # a held episode was cancelled on its first call (sent, or on its way, when the stop came): no second call,
    # however late the first arrived; one call each for at most the 4 slots' episodes
    for keys in (held, held_after):
        assert all(k.startswith("cancel/") and k.endswith("/t0") for k in keys), keys
        assert len(keys) == len(set(keys)) <= 4, keys
    assert set(held) <= set(held_after)
    assert all(r.hard == 1.0 for r in after)


class GatedServer(ScriptedServer):
    """The echo server, holding every call of a task not in `fast` until open() (the calls' sample keys kept)."""

    def __init__(self, fast: set[str]):
        super().__init__(policy=lambda body, headers: f"ok {headers.get('x-skillopt-key', '')}")
        self.fast = fast
        self.keys: list[str] = []
        self._open = False

    def open(self) -> None:
        self._open = True

    def held_keys(self) -> list[str]:
        return sorted(k for k in self.keys if k.split("/")[-2] not in self.fast)

    async def _chat(self, request):  # type: ignore[override]
        key = request.headers.get("x-skillopt-key", "")
        self.keys.append(key)
        while key.split("/")[-2] not in self.fast and not self._open:
            await asyncio.sleep(0.01)
        return await super()._chat(request)
